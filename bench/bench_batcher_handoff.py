"""The dynamic batcher's cost per request (serving.scoring.batcher), without a GPU: T threads each
submit 200-item requests for `--seconds` through a deepfm scorer whose MLP is tiny (2
fields, k = 2, one hidden layer of 4) and runs on the CPU, so the hand-offs are what is
timed. Prints requests/s and the mean batch; asserts nothing.

    .venv/bin/python bench/bench_batcher_handoff.py [--threads 4,16,64] [--seconds 2]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ctr.model.spec import ModelSpec  # noqa: E402
from serving.scoring.batcher import DynamicBatcher  # noqa: E402
from serving.scoring.mlp import DeepScorer  # noqa: E402


def run(threads: int, seconds: float) -> tuple[float, float]:
    """(requests/s, mean items per batch) of `threads` submitters."""
    spec = ModelSpec("deepfm", k=2, fields=("a", "b"), hidden=(4,))
    rng = np.random.default_rng(0)
    dense = {"bias": np.zeros(1, np.float32)} | {n: rng.normal(size=s).astype(np.float32) for n, s in spec.mlp_shapes()}
    batcher = DynamicBatcher(0.0002, 16384)
    scorer = DeepScorer(spec, dense, batcher)
    pooled, partial = rng.normal(size=(200, 2, 2)).astype(np.float32), np.zeros(200, np.float32)
    counts = [0] * threads
    end = time.perf_counter() + seconds

    def submit(i: int) -> None:
        while time.perf_counter() < end:
            scorer.predict(pooled, partial)
            counts[i] += 1

    workers = [threading.Thread(target=submit, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    batcher.close()
    return sum(counts) / seconds, batcher.items / max(1, batcher.batches)


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--threads", default="4,16,64")
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    for t in (int(x) for x in args.threads.split(",")):
        rate, batch = run(t, args.seconds)
        print(f"threads {t:3d}: {rate:9.0f} requests/s, {batch:8.0f} items per batch")


if __name__ == "__main__":
    main()
