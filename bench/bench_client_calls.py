"""CPU a batch of a DeepFM-like worker's pulls and pushes, client and shards together, in one
process (docs/design/call-overhead.md).

Two in-process shards behind a transport that says it is remote, so the client takes the
path it takes with shard processes (`auto` codecs, the pull cache, calls on its thread
pools) without gRPC's share. Each batch pulls the state of a batch's unique keys from the
tables `w` and `v` (k 8, 10 fields), adds the worker's unsent residuals, and pushes state
deltas: 2,560 features drawn Zipf-like from 5,400 keys (about 1,100 unique a batch, as
Frappe's 256-example batches). Protocols, alternating by round:

- `old`: fp64 state deltas, no pull cache (the protocol before issue 32);
- `bf16z`: `auto` as it starts, bf16z:rounded pushes, with the pull cache;
- `onebit`: 1-bit state deltas with error feedback, with the pull cache.

Process CPU (every thread), after 100 unmeasured batches.

    .venv/bin/python bench/bench_client_calls.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctr.model.spec import ModelSpec  # noqa: E402
from ps.api import DELTA  # noqa: E402
from ps.client import PSClient  # noqa: E402
from ps.server.local_transport import LocalTransport  # noqa: E402
from ps.server.shard import Shard  # noqa: E402

PROTOCOLS = {"old": "none", "bf16z": "auto", "onebit": "onebit"}
KEYS, FEATURES, WARM_UP = 5_400, 2_560, 100


class LoopbackTransport(LocalTransport):
    """In-process shards taken for remote ones: the client compresses and overlaps its
    calls as it does for shard processes."""

    remote = True


def run(protocol: str, batches: int, seed: int) -> float:
    """CPU milliseconds a batch."""
    spec = ModelSpec(type="deepfm", k=8, fields=tuple(f"f{i}" for i in range(10)), hidden=(16,))
    client = PSClient(LoopbackTransport([Shard(i, 2) for i in range(2)]), 2, push_codec=PROTOCOLS[protocol])
    client.control.declare(spec.tables())
    client.know(spec.tables())
    if protocol != "old":
        client.keep_rows()
    tables = [t for t in spec.tables() if t.kind != "dense"]
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(1, 2**62, KEYS, dtype=np.uint64))
    p = 1.0 / np.arange(1, keys.shape[0] + 1) ** 0.9
    draws = [np.unique(rng.choice(keys, FEATURES, p=p / p.sum())) for _ in range(batches + WARM_UP)]
    deltas = [rng.normal(scale=0.01, size=(d.shape[0], 2 * max(t.dim for t in tables))) for d in draws]

    def step(i: int) -> None:
        uniq = draws[i]
        for t in tables:
            rows, session = client.pull(t.name, uniq, state=True)
            unsent = client.unsent(t.name, uniq, rows.shape[1])
            if unsent is not None:
                rows += unsent
            delta = np.array(deltas[i][:, : rows.shape[1]])
            delta[:, t.dim :] = np.abs(delta[:, t.dim :])  # accumulators only grow
            client.push(t.name, uniq, delta, session, kind=DELTA, samples=256)

    try:
        for i in range(WARM_UP):
            step(i)
        started = time.process_time()
        for i in range(WARM_UP, WARM_UP + batches):
            step(i)
        return 1e3 * (time.process_time() - started) / batches
    finally:
        client.close()


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batches", type=int, default=600)
    args = ap.parse_args()
    got: dict[str, list[float]] = {p: [] for p in PROTOCOLS}
    for r in range(args.rounds):
        for protocol in PROTOCOLS:
            got[protocol].append(run(protocol, args.batches, seed=r))
            print(f"round {r} {protocol}: {got[protocol][-1]:.2f} CPU ms a batch", flush=True)
    for protocol, ms in got.items():
        print(f"{protocol}: median {statistics.median(ms):.2f} [{min(ms):.2f}-{max(ms):.2f}] CPU ms a batch")


if __name__ == "__main__":
    main()
