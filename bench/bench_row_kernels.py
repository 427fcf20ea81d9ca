"""The kernels that visit rows at random ids, timed in one process at a push's and a pull's
size: the compact hashmap's find and insert, the error-feedback memory's gather and
scatter, the pull cache's kept-row kernels and the shard's row kernels
(docs/design/prefetched-gathers.md), a training batch's sorted unique keys and a call's
split of its keys by shard.

    .venv/bin/python bench/bench_row_kernels.py [TREE ...] [--reps 5] [--keys 75000] [--rows 400000] [--width 2]

Each TREE (default: this checkout; another from `git worktree add /tmp/old REV`) runs in
its own process with this venv's Python, the trees alternating `--reps` times (this
machine is noisy); a process times every kernel over 30 calls of `--keys` sorted random
keys among `--rows` held ones (`--width` float64 columns a kept row or residual: LR's 2 by
default, a DeepFM embedding's 17 with k 8; the shard's state one wider), its first
call per kernel (which may compile) not counted. Reports each kernel's median ms per call
per tree, as the median over the repetitions [min-max]. Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CALLS = 30


def _median_ms(fn: Callable[[int], object], calls: int) -> float:
    fn(0)  # compiles (or loads the cache)
    times = []
    for i in range(calls):
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def measure(n_keys: int, n_rows: int, width: int) -> dict[str, float]:
    """Every kernel's median ms per call, in this process (the tree on PYTHONPATH)."""
    from ctr.data.unique import sorted_unique_inverse
    from ctr.format.hashmap import CompactHashMap
    from ps.client import kept_kernels as kk
    from ps.client.push_path import split_by_shard
    from ps.compression.residual_kernels import put_at, rows_at
    from ps.server import kernels as sk

    rng = np.random.default_rng(0)
    held = np.unique(rng.integers(1, 1 << 62, size=n_rows, dtype=np.int64).astype(np.uint64))
    n = held.shape[0]
    entry = rng.permutation(n).astype(np.int64)  # ids are random against the keys' order
    index = CompactHashMap(2, capacity=64)
    index.insert_ids(held, entry)
    calls = [np.sort(rng.choice(held, n_keys, replace=False)) for _ in range(CALLS + 1)]
    ids = [index.find_ids(k) for k in calls]
    fresh = [np.unique(rng.integers(1, 1 << 62, size=n_keys, dtype=np.int64).astype(np.uint64)) for _ in range(CALLS + 1)]

    rows2 = rng.normal(size=(n, width))
    last = np.zeros(n, dtype=np.int64)
    values = rng.normal(size=(n_keys, width))
    valid = np.ones(n, dtype=np.bool_)
    row_id = np.arange(n, dtype=np.int64)
    stamp = np.zeros(n, dtype=np.int64)
    drop = np.zeros(n_keys, dtype=np.bool_)
    state = np.abs(rng.normal(size=(n, width + 1)))
    meta = np.zeros((n, sk.META_WORDS), dtype=np.uint32)
    writer = np.zeros(n, dtype=np.uint64)
    before = np.zeros(n, dtype=np.uint64)
    params = np.array([0.05, 1.0, 1.0, 1.0, 0.01], dtype=np.float64)
    deltas = rng.normal(size=(n_keys, width + 1)) * 1e-3
    none = np.zeros(0, dtype=np.int64)

    # a batch: 16,384 lines of 39 features, Zipf-distributed over the held keys
    with_new = [np.union1d(calls[i], fresh[i][: max(1, n_keys // 100)]) for i in range(CALLS + 1)]  # 1% new to the worker
    batches = [held[np.minimum(rng.zipf(1.2, size=16_384 * 39) - 1, n - 1)] for _ in range(CALLS + 1)]

    def insert(i: int) -> None:
        m = CompactHashMap(2, capacity=64)
        m.reserve(2 * n_keys)
        m.insert(fresh[i])

    kernels: dict[str, Callable[[int], object]] = {
        "batch sorted_unique_inverse (639k features)": lambda i: sorted_unique_inverse(batches[i]),
        "push or pull split_by_shard (2 shards)": lambda i: split_by_shard(calls[i], 2),
        "hashmap find_ids": lambda i: index.find_ids(calls[i]),
        "hashmap insert (empty map)": insert,
        "residuals rows_at": lambda i: rows_at(rows2, ids[i], width),
        "residuals put_at": lambda i: put_at(rows2, last, ids[i], values, 7),
        "kept take_known": lambda i: kk.take_known(index.slots, valid, row_id, rows2, calls[i]),
        "kept add_deltas": lambda i: kk.add_deltas(index.slots, valid, rows2, calls[i], values, drop, stamp, 3),
        "kept set_rows": lambda i: kk.set_rows(index.slots, valid, rows2, stamp, calls[i], values),
        "kept leased_copies": lambda i: kk.leased_copies(index.slots, valid, row_id, stamp, rows2, calls[i], 0),
        "kept leased_copies, 1% new keys": lambda i: kk.leased_copies(index.slots, valid, row_id, stamp, rows2, with_new[i], 0),
        "shard gather_state": lambda i: sk.gather_state(state, ids[i], calls[i], 1, params),
        "shard merge_deltas": lambda i: sk.merge_deltas(state, meta, ids[i], deltas, 5, 0),
        "shard push_conflicts": lambda i: sk.push_conflicts(writer, before, meta, ids[i], np.uint64(1), none, False),
        "shard mark_writer": lambda i: sk.mark_writer(writer, before, meta, ids[i], np.uint64(1 + i % 2)),
    }
    return {name: _median_ms(lambda i, f=fn: f(1 + i % CALLS), CALLS) for name, fn in kernels.items()}  # type: ignore[misc]


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("trees", nargs="*", type=Path, default=[ROOT])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--keys", type=int, default=75_000)
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--width", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.keys, args.rows, args.width)))
        return
    runs: dict[Path, list[dict[str, float]]] = {t: [] for t in args.trees}
    for _ in range(args.reps):
        for tree in args.trees:
            cmd = [
                sys.executable,
                __file__,
                "--child",
                "--keys",
                str(args.keys),
                "--rows",
                str(args.rows),
                "--width",
                str(args.width),
            ]
            env = {**os.environ, "PYTHONPATH": str(tree.resolve())}  # that tree's packages, before this venv's
            out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=True, timeout=600)
            runs[tree].append(json.loads(out.stdout.strip().splitlines()[-1]))
    names = list(runs[args.trees[0]][0])
    print(
        f"{args.keys} sorted random keys of {args.rows} held, {args.width} columns,"
        f" median ms per call over {args.reps} alternating runs [min-max]"
    )
    print("| kernel | " + " | ".join(str(t) for t in args.trees) + " |")
    print("|---|" + "---|" * len(args.trees))
    for name in names:
        cells = []
        for tree in args.trees:
            vals = [r[name] for r in runs[tree]]
            cells.append(f"{statistics.median(vals):.2f} [{min(vals):.2f}-{max(vals):.2f}]")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
