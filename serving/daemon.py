"""Prediction-service daemon: wiring of config, repository watcher, gRPC and metrics."""

from __future__ import annotations

import argparse
import gc
import os
from pathlib import Path

import grpc

from ctr.repository.versions import Repository
from ctr.runtime import config as cfg
from ctr.runtime import daemon, ports
from ctr.runtime.auth import service_policy
from ctr.runtime.config import ConfigError
from protos import predict_pb2, predict_pb2_grpc
from serving import metrics
from serving.config import HELP_EXAMPLES, HELP_GROUPS, DnnBatching, ServingConfig
from serving.loading.local_copies import LocalCopies
from serving.loading.shard_part import ROUTER, WHOLE, ShardPart
from serving.loading.watcher import ModelWatcher
from serving.process_group import process_count, run_group
from serving.rest import RestFront, serve_rest
from serving.scoring.parallel import Splitter
from serving.scoring.shadow import ShadowScorer
from serving.service import PredictorServicer
from serving.sharded.fanout import FanOut, parse_shards
from serving.sharded.router import Router
from serving.sharded.shard_service import ShardScorerServicer

ENV_PREFIX = "BOUNDLESS_SERVING_"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cfg.add_arguments(parser, ServingConfig, HELP_GROUPS, HELP_EXAMPLES)


def model_names(conf: ServingConfig) -> list[str]:
    """The models to serve: --models (names, or 'all' the repository holds now), else --model-name."""
    if not conf.models:
        return [conf.model_name]
    if conf.models.strip() == "all":
        found = Repository.models_in(conf.repo)
        if not found:
            raise ConfigError(f"--models all: the repository {conf.repo} holds no model yet; name them")
        return found
    names = [n.strip() for n in conf.models.split(",") if n.strip()]
    if len(set(names)) != len(names):
        raise ConfigError(f"--models {conf.models}: a model is named twice")
    return names


def copies_root(conf: ServingConfig) -> Path | None:
    return Path(conf.copies_dir) if conf.copies_dir else None


def run(args: argparse.Namespace) -> int:
    conf = cfg.build(ServingConfig, ENV_PREFIX, args)
    cfg.check_outputs(conf)
    if process_count(conf) > 1:
        return run_group(conf)  # a supervisor of that many processes like this one
    log = daemon.setup_logging("serving", conf.log_level)
    if not conf.port_shared:  # before a model loads: a second server on a served port loads nothing
        ports.check_free(conf.host, conf.port)
        if conf.rest_port > 0:
            ports.check_free(conf.host, conf.rest_port, "--rest-port")
    splitter = Splitter(conf.score_threads or os.cpu_count() or 1, conf.score_spin_us * 1e-6)
    part = ROUTER if conf.router else ShardPart(conf.shard_index, conf.shard_count)
    max_bytes = int(conf.max_request_mb * (1 << 20))
    predictor, scorer = (predict_pb2.DESCRIPTOR.services_by_name[n].full_name for n in ("Predictor", "ShardScorer"))
    # Refresh only makes serving read the repository again; the model path calls it
    needs = {f"/{predictor}/": "predict", f"/{predictor}/Refresh": "trainer", f"/{scorer}/": "predict"}
    guarded = daemon.guard(conf, conf.host, service_policy(needs))  # before the router opens its channels
    fanout = (
        FanOut(parse_shards(conf.shard_replicas), conf.fanout_deadline_ms / 1e3, conf.hedge_min_ms / 1e3, max_bytes)
        if conf.router
        else None
    )
    batching = DnnBatching(conf.dnn_batching, conf.dnn_batch_wait_ms / 1e3, conf.dnn_batch_items, conf.dnn_cuda_graphs)
    names = model_names(conf)
    budget = int(conf.model_memory_mb * (1 << 20))
    watchers = {
        # each model its own copies (a shared --copies-dir: a subfolder each), so one model's
        # swaps never remove another's files
        name: ModelWatcher(
            Repository(conf.repo, name),
            conf.poll_s,
            LocalCopies(Path(conf.copies_dir) / name if conf.copies_dir and len(names) > 1 else copies_root(conf)),
            splitter,
            part,
            batching,
            budget,
        )
        for name in names
    }
    watcher = watchers[names[0]]
    metrics.IN_FLIGHT.set_function(lambda: splitter.in_flight)  # read when scraped
    for w in watchers.values():
        w.start()
    router = Router(fanout, watcher) if fanout is not None else None
    services = [predict_pb2.DESCRIPTOR.services_by_name["Predictor"].full_name]
    if part not in (WHOLE, ROUTER):
        services.append(predict_pb2.DESCRIPTOR.services_by_name["ShardScorer"].full_name)

    shadow = ShadowScorer()
    servicer = PredictorServicer(watchers, conf.max_items, router, conf.strict_features, shadow)

    def register(s: grpc.Server) -> None:
        predict_pb2_grpc.add_PredictorServicer_to_server(servicer, s)
        if part not in (WHOLE, ROUTER):
            predict_pb2_grpc.add_ShardScorerServicer_to_server(ShardScorerServicer(watcher), s)

    served = daemon.serve(conf, "serving", register, services, guarded, max_message_bytes=max_bytes, share_port=conf.port_shared)
    port = served.port
    # the scoring services are ready once a (warmed) version serves: a readiness probe on
    # them keeps traffic away until then, while "" (liveness) says the process is up
    served.ready("")

    def on_switch() -> None:
        """Ready once a model serves and every other one serves or was refused a version
        (its status says why): one model over its budget keeps none of the others out of
        rotation, and a server with no version at all never looks ready."""
        serving_any = any(w.current is not None for w in watchers.values())
        if serving_any and all(w.current is not None or w.last_error for w in watchers.values()):
            served.ready(*services)

    for w in watchers.values():
        w.on_switch = on_switch
    on_switch()  # they may have switched before on_switch was set
    metrics_port = daemon.metrics_server(conf.host, conf.metrics_port)
    rest, rest_port = None, -1
    if conf.rest_port >= 0:
        front = RestFront(servicer, max_bytes, conf.max_concurrent, guarded["tokens"])
        rest, rest_port = serve_rest(
            front,
            conf.host,
            conf.rest_port,
            guarded["identity"],
            conf.port_shared,
            idle_s=conf.rest_idle_s,
            max_connections=conf.rest_max_connections,
        )
    log.info(
        "serving %s from %s on %s:%d (%s), REST on :%d, metrics on :%d",
        ", ".join(names),
        conf.repo,
        conf.host,
        port,
        "whole model" if part == WHOLE else f"shard {part}",
        rest_port,
        metrics_port,
    )
    # every object of start-up (imports, the first version) out of the collector's reach: a
    # full collection then walks only what came after, not 250k objects for tens of ms
    gc.freeze()
    daemon.write_ready_file(conf.ready_file, grpc_port=port, metrics_port=metrics_port, rest_port=rest_port)
    daemon.wait_for_stop_signal()
    if rest is not None:
        rest.shutdown()
    for w in watchers.values():
        w.stop()
    served.stop(grace_s=2)
    shadow.close()
    splitter.close()
    if fanout is not None:
        fanout.close()
    return 0
