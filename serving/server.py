"""Prediction-service daemon: wiring of config, repository watcher, gRPC and metrics."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ctr import config as cfg
from ctr import daemon
from modelmgr.repository import Repository
from protos import predict_pb2, predict_pb2_grpc
from serving.config import ServingConfig
from serving.local_copies import LocalCopies
from serving.parallel import Splitter
from serving.service import PredictorServicer
from serving.watcher import ModelWatcher

ENV_PREFIX = "BOUNDLESS_SERVING_"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cfg.add_arguments(parser, ServingConfig)


def run(args: argparse.Namespace) -> int:
    conf = cfg.build(ServingConfig, ENV_PREFIX, args)
    log = daemon.setup_logging("serving", conf.log_level)
    copies = LocalCopies(Path(conf.copies_dir) if conf.copies_dir else None)
    splitter = Splitter(conf.score_threads or os.cpu_count() or 1)
    watcher = ModelWatcher(Repository(conf.repo, conf.model), conf.poll_s, copies, splitter)
    watcher.start()
    name = predict_pb2.DESCRIPTOR.services_by_name["Predictor"].full_name
    server, port, _ = daemon.grpc_server(
        conf.host,
        conf.port,
        conf.workers,
        lambda s: predict_pb2_grpc.add_PredictorServicer_to_server(PredictorServicer(watcher, conf.max_items), s),
        [name],
        max_message_bytes=int(conf.max_request_mb * (1 << 20)),
        max_concurrent=conf.max_concurrent,
    )
    metrics_port = daemon.metrics_server(conf.host, conf.metrics_port)
    log.info("serving %s from %s on %s:%d, metrics on :%d", conf.model, conf.repo, conf.host, port, metrics_port)
    daemon.write_ready_file(conf.ready_file, grpc_port=port, metrics_port=metrics_port)
    daemon.wait_for_stop_signal()
    watcher.stop()
    server.stop(grace=2).wait()
    splitter.close()
    return 0
