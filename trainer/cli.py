"""`boundless train`'s entry: arguments from the light config module; with --workers the
supervisor of local ranks, whose fork server starts before the trainer's heavy imports
(numba, the kernels)."""

from __future__ import annotations

import argparse
import os

from ctr.runtime import config as cfg
from trainer.config import ENV_PREFIX, HELP_EXAMPLES, HELP_GROUPS, TrainerConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cfg.add_arguments(parser, TrainerConfig, HELP_GROUPS, HELP_EXAMPLES)


# Idle OpenMP threads (torch's intra-op pool) spin for 30,000 rounds (tens of
# microseconds), a tenth of libgomp's default, and then sleep. A trainer is never alone on
# its cores (its reader, pull and push threads, on one host the PS shards): the default
# spin took 63% of a DeepFM trainer's CPU beside two shard processes on 2 cores, and
# sleeping at once (OMP_WAIT_POLICY=PASSIVE) made every one of the MLP's many short
# parallel regions wake its threads through the kernel, 30-40% slower than the short spin
# with in-process shards and 10-25% with shard processes (docs/design/hybrid-training.md,
# "OpenMP threads spin briefly"). libgomp reads it when it loads (with torch), so it is set
# before any import of it; a user's GOMP_SPINCOUNT or OMP_WAIT_POLICY stays.
OPENMP_SPIN = ("GOMP_SPINCOUNT", "30000")


def bound_openmp_spin() -> None:
    """Sets OPENMP_SPIN unless the user chose a spin count or a wait policy."""
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        os.environ[OPENMP_SPIN[0]] = OPENMP_SPIN[1]


def run(args: argparse.Namespace) -> int:
    bound_openmp_spin()
    conf = cfg.build(TrainerConfig, ENV_PREFIX, args)
    if conf.parallel.workers > 1:
        from trainer.local_ranks import supervise

        return supervise(conf)
    from trainer import daemon as server  # numba and the kernels load here

    return server.train(conf)
