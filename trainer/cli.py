"""`boundless train`'s entry: arguments from the light config module; with --workers the
supervisor of local ranks, whose fork server starts before the trainer's heavy imports
(numba, the kernels)."""

from __future__ import annotations

import argparse

from ctr.runtime import config as cfg
from trainer.config import ENV_PREFIX, HELP_EXAMPLES, HELP_GROUPS, TrainerConfig
from trainer.openmp import bound_openmp_spin


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cfg.add_arguments(parser, TrainerConfig, HELP_GROUPS, HELP_EXAMPLES)


def run(args: argparse.Namespace) -> int:
    bound_openmp_spin()  # before torch loads (trainer.openmp)
    conf = cfg.build(TrainerConfig, ENV_PREFIX, args)
    cfg.check_outputs(conf)
    if conf.parallel.workers > 1:
        from trainer.local_ranks import supervise

        return supervise(conf)
    from trainer import daemon as server  # numba and the kernels load here

    return server.train(conf)
