"""Trainer daemon: wiring of config, source, PS client, exporter and metrics."""

from __future__ import annotations

import argparse
import json
import signal
import threading
from pathlib import Path

import grpc
import yaml

from ctr import config as cfg
from ctr import daemon
from ctr.schema import PRESETS, FeatureSchema
from ps.client import PSClient
from ps.shard import parse_table_specs
from ps.tables import FtrlParams
from trainer import metrics
from trainer.config import TrainerConfig
from trainer.exporter import Exporter
from trainer.loop import LoopSettings, Trainer
from trainer.progressive import ProgressiveMetrics
from trainer.source import Position, StreamSource

ENV_PREFIX = "BOUNDLESS_TRAINER_"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cfg.add_arguments(parser, TrainerConfig)


def load_schema(conf: TrainerConfig) -> FeatureSchema | None:
    """The configured schema; None means detect it from the first line."""
    if conf.schema:
        return FeatureSchema.from_dict(yaml.safe_load(Path(conf.schema).read_text()) or {})
    if conf.format == "auto":
        return None
    if conf.format not in PRESETS:
        raise cfg.ConfigError(f"--format: unknown preset {conf.format!r}; known: auto, {', '.join(PRESETS)}")
    return PRESETS[conf.format]


def connect(conf: TrainerConfig) -> PSClient:
    if conf.ps == "local":
        specs = parse_table_specs(f"{conf.table}:sparse:1,{conf.bias_table}:dense:1")
        return PSClient.local(conf.local_shards, specs, FtrlParams(conf.alpha, conf.beta, conf.l1, conf.l2), conf.codec)
    addresses = [a.strip() for a in conf.ps.split(",") if a.strip()]
    client = PSClient.connect(addresses, conf.codec)
    for addr, ch in zip(addresses, client.transport.channels, strict=True):  # type: ignore[attr-defined]
        try:
            grpc.channel_ready_future(ch).result(timeout=30)
        except grpc.FutureTimeoutError:
            raise SystemExit(f"PS shard {addr} is not reachable") from None
    return client


def resume_position(client: PSClient) -> Position | None:
    """The stream position stored by the last checkpoint, if every shard agrees on it."""
    stored = {s.checkpoint_offsets for s in client.status()}
    if len(stored) != 1 or stored == {b""}:
        return None
    return Position(**json.loads(stored.pop()))


def run(args: argparse.Namespace) -> int:
    conf = cfg.build(TrainerConfig, ENV_PREFIX, args)
    log = daemon.setup_logging("trainer", conf.log_level)
    schema = load_schema(conf)
    client = connect(conf)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    start = resume_position(client) if conf.resume else None
    if start is not None:
        log.info("resuming stream at %s", start)
    metrics_port = daemon.metrics_server("127.0.0.1", conf.metrics_port) if conf.metrics_port >= 0 else -1
    source = StreamSource(conf.source, conf.follow, stop=stop.is_set, start=start)
    exporter = None
    if conf.export_dir:
        model = {"name": conf.model_name, "type": "lr", "table": conf.table, "bias_table": conf.bias_table, "dim": 1}
        exporter = Exporter(client, Path(conf.export_dir), model, schema.to_dict() if schema else {}, conf.full_every)
    settings = LoopSettings(
        conf.table,
        conf.bias_table,
        conf.batch_size,
        conf.max_samples,
        conf.idle_exit_s,
        conf.export_interval_s,
        conf.checkpoint_interval_s,
    )
    trainer = Trainer(client, schema, source, settings, ProgressiveMetrics(conf.window), exporter, stop.is_set)
    daemon.write_ready_file(conf.ready_file, metrics_port=metrics_port)
    result = trainer.run()
    result["bad_lines"] = float(trainer.bad_lines)
    result["exports"] = float(len(trainer.exports))
    metrics.WINDOW_AUC.set(result["window_auc"])
    metrics.WINDOW_LOGLOSS.set(result["window_logloss"])
    log.info("done: %s", json.dumps(result))
    if conf.metrics_out:
        Path(conf.metrics_out).write_text(json.dumps(result, indent=1))
    client.close()
    return 0
