"""Foundation benchmarks: hashmap lookups and memory, LR-FTRL training throughput on Frappe
(in-process PS vs 2 gRPC shard processes), and Predict latency for 200-item requests.

Writes JSON to bench/results/foundation.json; asserts nothing about speed.
Run: .venv/bin/python bench/bench_foundation.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from boundless.processes import start
from ctr.format.hashmap import CompactHashMap

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def hashmap() -> dict[str, float]:
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(1, 2**64 - 1, 10_000_000, dtype=np.uint64))
    m = CompactHashMap.from_rows(keys, np.zeros((keys.shape[0], 1), dtype=np.uint32))
    probe = keys[rng.permutation(keys.shape[0])[:2_000_000]]
    m.find(probe[:10])
    t = time.perf_counter()
    m.find(probe)
    hit = probe.shape[0] / (time.perf_counter() - t)
    small = keys[:100_000]
    ms = CompactHashMap.from_rows(small, np.zeros((small.shape[0], 1), dtype=np.uint32))
    q = small[rng.integers(0, small.shape[0], 2_000_000)]
    t = time.perf_counter()
    ms.find(q)
    cached = q.shape[0] / (time.perf_counter() - t)
    return {
        "keys": float(keys.shape[0]),
        "memory_ratio": m.nbytes / (keys.shape[0] * 12),
        "lookups_per_s_dram_1thread": hit,
        "lookups_per_s_cache_resident_1thread": cached,
    }


def train(ps: str, source: Path, out: Path) -> dict[str, float]:
    t = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "boundless",
            "train",
            "--source",
            str(source),
            "--ps",
            ps,
            "--no-follow",
            "--metrics-port",
            "-1",
            "--metrics-out",
            str(out),
            "--log-level",
            "WARNING",
        ],
        check=True,
        capture_output=True,
    )
    r = json.loads(out.read_text())
    r["wall_s"] = time.perf_counter() - t
    r["samples_per_s_wall"] = r["samples"] / r["wall_s"]
    return r


def main() -> None:
    results: dict[str, object] = {"hashmap": hashmap()}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        src = d / "frappe.libfm"
        src.write_text((DATA / "frappe/frappe.validation.libfm").read_text() + (DATA / "frappe/frappe.test.libfm").read_text())
        results["train_local_ps"] = train("local", src, d / "local.json")
        shards = [start(f"ps{i}", ["ps", "--shard-index", str(i), "--shard-count", "2"], d) for i in range(2)]
        try:
            for s in shards:
                s.wait_ready()
            results["train_grpc_2_shards"] = train(",".join(s.address for s in shards), src, d / "grpc.json")
        finally:
            for s in shards:
                s.stop()
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "foundation.json").write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
