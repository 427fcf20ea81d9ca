"""Hashmap lookups: a 10M-key table of 1 float32 per key (LR rows) in DRAM, random hits in
random order, on 1 and 2 threads (the serving kernels release the GIL), for

- BucketMap (ctr.format.bucket_map): serving's images since issue 10, bucketized cuckoo; 1-word
  rows in the line layout (5 keys and their rows a 64-byte bucket, load 0.98) since
  2026-11-25, and in the wide layout before (8 keys, then their rows, load 0.95);
- CompactHashMap (ctr.format.hashmap): the earlier images, linear probing at 0.88;
- a Python dict, and numba's typed Dict looked up inside a compiled loop.

Also bytes per key against the raw 12 (8-byte key, 4-byte row). Min and median over
--reps; writes bench/results/lookups.json; asserts nothing.

    .venv/bin/python bench/bench_lookups.py [--keys 10000000] [--probes 2000000] [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numba as nb
import numpy as np
from numba import types
from numba.typed import Dict

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ctr.format import bucket_kernels  # noqa: E402
from ctr.format.bucket_map import IMAGE_LOAD, BucketMap, aligned_zeros, buckets_for  # noqa: E402
from ctr.format.hashmap import CompactHashMap  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@nb.njit(nogil=True)
def typed_dict_lookups(d: Dict, keys: np.ndarray) -> float:  # type: ignore[type-arg]
    acc = 0.0
    for k in keys:
        acc += d.get(k, 0.0)
    return acc


@nb.njit
def fill_typed_dict(d: Dict, keys: np.ndarray, values: np.ndarray) -> None:  # type: ignore[type-arg]
    for i in range(keys.shape[0]):
        d[keys[i]] = values[i]


def rate(fn: Callable[[np.ndarray], object], probe: np.ndarray, threads: int, reps: int) -> tuple[float, float]:
    """(best, median) lookups/s with probe split over `threads` threads."""
    parts = np.array_split(probe, threads)
    out = []
    for _ in range(reps):
        workers = [threading.Thread(target=fn, args=(p,)) for p in parts]
        t = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        out.append(probe.shape[0] / (time.perf_counter() - t))
    return max(out), statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--probes", type=int, default=2_000_000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(1, 2**64 - 1, args.keys, dtype=np.uint64))
    rows = np.asarray(rng.random(keys.shape[0], dtype=np.float32)).reshape(-1, 1)
    probe = keys[rng.integers(0, keys.shape[0], args.probes)]
    raw = keys.shape[0] * 12
    results: dict[str, object] = {"keys": int(keys.shape[0]), "probes": int(probe.shape[0])}

    bucket = BucketMap.from_rows(keys, rows.view(np.uint32))
    bucket.get(probe[:16])
    results["bucket_map"] = {
        "bytes_per_raw": bucket.nbytes / raw,
        "1_thread": rate(bucket.get, probe, 1, args.reps),
        "2_threads": rate(bucket.get, probe, 2, args.reps),
    }
    # the same table as serving holds an image: a file mapped read-only (the page cache may
    # map it with 2 MB pages, as this machine's kernel does; anonymous memory here has 4 KB)
    with tempfile.TemporaryDirectory(prefix="bench-lookups-") as tmp:
        path = Path(tmp) / "line.table"
        bucket.table.tofile(path)
        mapped = BucketMap(1, table=np.memmap(path, dtype=np.uint32, mode="r", shape=bucket.table.shape), size=bucket.size)
        mapped.get(probe[:16])
        results["bucket_map_file"] = {
            "bytes_per_raw": mapped.nbytes / raw,
            "1_thread": rate(mapped.get, probe, 1, args.reps),
            "2_threads": rate(mapped.get, probe, 2, args.reps),
        }
        del mapped
    wide_table = aligned_zeros(buckets_for(keys.shape[0], IMAGE_LOAD, bucket_kernels.B), bucket_kernels.B * 3)
    _, _, lost = bucket_kernels.put_rows(
        wide_table, keys, rows.view(np.uint32), 1, np.empty(1, np.uint32), bucket_kernels.FILL_KICKS
    )
    assert lost == 0, "the wide table could not hold every key"
    wide = BucketMap(1, table=wide_table)
    wide.get(probe[:16])
    results["bucket_map_wide"] = {
        "bytes_per_raw": wide.nbytes / raw,
        "1_thread": rate(wide.get, probe, 1, args.reps),
        "2_threads": rate(wide.get, probe, 2, args.reps),
    }
    linear = CompactHashMap.from_rows(keys, rows.view(np.uint32))
    linear.find(probe[:16])
    results["compact_hashmap_linear_probing"] = {
        "bytes_per_raw": linear.nbytes / raw,
        "1_thread": rate(lambda p: linear.rows[linear.find(p)], probe, 1, args.reps),
        "2_threads": rate(lambda p: linear.rows[linear.find(p)], probe, 2, args.reps),
    }
    small = probe[: args.probes // 10]
    py = dict(zip(keys.tolist(), rows[:, 0].tolist(), strict=True))
    results["python_dict"] = {"1_thread": rate(lambda p: [py.get(k, 0.0) for k in p.tolist()], small, 1, max(1, args.reps // 2))}
    typed = Dict.empty(key_type=types.uint64, value_type=types.float32)
    fill_typed_dict(typed, keys, np.ascontiguousarray(rows[:, 0]))
    typed_dict_lookups(typed, probe[:16])
    results["numba_typed_dict"] = {
        "1_thread": rate(lambda p: typed_dict_lookups(typed, p), probe, 1, args.reps),
        "2_threads": rate(lambda p: typed_dict_lookups(typed, p), probe, 2, args.reps),
    }
    out = ROOT / "bench" / "results" / "lookups.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
