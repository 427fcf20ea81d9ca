"""PS shard daemon: wiring of config, store, shard, gRPC, metrics and the ready file."""

from __future__ import annotations

import argparse
from pathlib import Path

from ctr.runtime import config as cfg
from ctr.runtime import daemon, ports
from ctr.runtime.auth import service_policy
from protos import ps_pb2, ps_pb2_grpc
from ps.config import PSConfig
from ps.server.service import PSServicer
from ps.server.shard import Shard
from ps.server.store import ShardStore

ENV_PREFIX = "BOUNDLESS_PS_"


def run(args: argparse.Namespace) -> int:
    """Runs one shard until SIGTERM."""
    conf = cfg.build(PSConfig, ENV_PREFIX, args)
    cfg.check_outputs(conf)
    log = daemon.setup_logging(f"ps{conf.shard_index}", conf.log_level)
    ports.check_free(conf.host, conf.port)  # before the store: a second shard on a served port opens nothing
    store = ShardStore(Path(conf.data_dir)) if conf.data_dir else None
    lifecycle = conf.lifecycle.policy()
    exports = Path(conf.export_root) if conf.export_root else None
    shard = Shard(
        conf.shard_index,
        conf.shard_count,
        store,
        full_every=conf.full_checkpoint_every,
        lifecycle=lifecycle,
        export_root=exports,
        lease_s=conf.write_lease_s,
    )
    if store is not None:
        rows = sum(t.rows for t in shard.stats())
        log.info(
            "loaded committed cut %d from %s: %d rows in %d tables", shard.committed.cut, conf.data_dir, rows, len(shard.stats())
        )
    service_name = ps_pb2.DESCRIPTOR.services_by_name["ParameterServer"].full_name
    served = daemon.serve(
        conf,
        "ps",
        lambda s: ps_pb2_grpc.add_ParameterServerServicer_to_server(PSServicer(shard), s),
        [service_name],
        daemon.guard(conf, conf.host, service_policy({f"/{service_name}/": "trainer"})),
        daemon.PS_MAX_MESSAGE_BYTES,
    )
    served.ready()  # its committed cut is loaded: it answers from the first call
    port = served.port
    metrics_port = daemon.metrics_server(conf.host, conf.metrics_port)
    log.info("shard %d/%d serving on %s:%d, metrics on :%d", conf.shard_index, conf.shard_count, conf.host, port, metrics_port)
    daemon.write_ready_file(
        conf.ready_file,
        grpc_port=port,
        metrics_port=metrics_port,
        checkpoint_seq=shard.checkpoint_seq,
        committed_cut=shard.committed.cut,
        incarnation=shard.incarnation,
    )
    daemon.wait_for_stop_signal()
    served.stop(grace_s=2)
    shard.close()  # a cut being written lands first
    if store is not None:
        store.close()
    log.info("stopped")
    return 0
