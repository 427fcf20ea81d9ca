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


# Idle OpenMP threads (torch's intra-op pool) sleep instead of spinning: a trainer shares its
# cores with its reader, pull and push threads and, on one host, the PS shards. Spinning
# took 63% of a DeepFM trainer's CPU over two shard processes on 2 cores, and passive waits
# trained 8% faster (docs/design/hybrid-training.md, "OpenMP threads wait passively"). Read
# when libgomp loads (with torch), so set before any import of it; a user's setting stays.
OPENMP_WAIT = ("OMP_WAIT_POLICY", "PASSIVE")


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault(*OPENMP_WAIT)
    conf = cfg.build(TrainerConfig, ENV_PREFIX, args)
    if conf.parallel.workers > 1:
        from trainer.local_ranks import supervise

        return supervise(conf)
    from trainer import daemon as server  # numba and the kernels load here

    return server.train(conf)
