"""`boundless train`'s entry: arguments from the light config module, and the workers'
fork server started before the trainer's heavy imports (numba, the kernels)."""

from __future__ import annotations

import argparse

from ctr.runtime import config as cfg
from trainer.config import ENV_PREFIX, HELP_EXAMPLES, HELP_GROUPS, TrainerConfig
from trainer.run.fork_server import start_fork_server


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cfg.add_arguments(parser, TrainerConfig, HELP_GROUPS, HELP_EXAMPLES)


def run(args: argparse.Namespace) -> int:
    conf = cfg.build(TrainerConfig, ENV_PREFIX, args)
    if conf.parallel.workers > 1:
        start_fork_server()
    from trainer import daemon as server  # numba and the kernels load here

    return server.train(conf)
