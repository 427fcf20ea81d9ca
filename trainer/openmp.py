"""How torch's idle OpenMP threads wait, set before torch loads (libgomp reads it then).

They spin for 30,000 rounds (tens of microseconds), a tenth of libgomp's default, and then
sleep. A trainer is never alone on its cores (its reader, pull and push threads, on one host
the PS shards): the default spin took 63% of a DeepFM trainer's CPU beside two shard
processes on 2 cores, and sleeping at once (OMP_WAIT_POLICY=PASSIVE) made every one of the
MLP's many short parallel regions wake its threads through the kernel: 30-40% slower than
the short spin with in-process shards and 10-25% with shard processes
(docs/design/hybrid-training.md, "OpenMP threads spin briefly"). A user's GOMP_SPINCOUNT or
OMP_WAIT_POLICY stays; where torch has loaded already (a notebook that imported it) this
changes nothing.
"""

from __future__ import annotations

import os

SPIN_ROUNDS = "30000"


def bound_openmp_spin() -> None:
    """Sets GOMP_SPINCOUNT to SPIN_ROUNDS unless the user chose a spin count or a wait policy."""
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = SPIN_ROUNDS
