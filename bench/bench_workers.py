"""Workers and bounded staleness (issue: data path, part 3), and PS key throughput.

1. SSP table: `boundless train --workers W --staleness s` for W in {1, 2} and s in
   {0, 1, 4, 16}, batches of 16384 (the default) and 4096 lines, on 2 fresh PS shard
   processes over gRPC, Frappe repeated to >= ROWS rows
   and split into 8 files (round-robin between workers). Whole-process examples/s,
   progressive logloss and window AUC, pull and push bytes.
2. gRPC against in-process: the W=2 runs against `--ps local` with one worker.
3. Pull and push keys/s through `ps.client.ps_client` as the shard count and keys per call vary
   (FTRL state pulls, state-delta pushes: what per-example training moves).

Records min/median over --reps (interleaved); writes bench/results/workers.json and prints
markdown; asserts nothing.
Run: .venv/bin/python bench/bench_workers.py [--reps 3] [--rows 1000000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.datasets import DATASETS  # noqa: E402
from boundless.processes import Daemon, start  # noqa: E402
from ctr.model.spec import ModelSpec  # noqa: E402
from ps.api import DELTA  # noqa: E402
from ps.client import PSClient

ROOT = Path(__file__).resolve().parents[1]


def write_folder(rows: int, work: Path, parts: int = 8) -> tuple[Path, int]:
    lines = DATASETS["frappe"].lines()
    times = -(-rows // len(lines))
    lines = lines * times
    folder = work / "stream"
    folder.mkdir()
    step = -(-len(lines) // parts)
    for i in range(parts):
        (folder / f"part{i:02d}.libfm").write_text("\n".join(lines[i * step : (i + 1) * step]) + "\n")
    return folder, len(lines)


def start_shards(n: int, work: Path, tag: str) -> list[Daemon]:
    shards = [start(f"{tag}-ps{i}", ["ps", "--shard-index", str(i), "--shard-count", str(n)], work) for i in range(n)]
    for s in shards:
        s.wait_ready()
    return shards


def train(folder: Path, ps: str, workers: int, staleness: int, batch: int, work: Path) -> dict[str, float]:
    out = work / "m.json"
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(folder), "--no-follow", "--format", "libsvm"]
    cmd += ["--ps", ps, "--workers", str(workers), "--staleness", str(staleness), "--metrics-port", "-1"]
    cmd += ["--batch-size", str(batch)]
    cmd += ["--metrics-out", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(proc.stderr[-2000:])
    m = json.loads(out.read_text())
    return {
        "examples_per_s": m["samples"] / wall,
        "loop_examples_per_s": m["examples_per_s"],  # the training loop alone: start-up and the ranks' fork left out
        "logloss": m["progressive_logloss"],
        "auc": m["window_auc"],
        "pull_mb": m["pull_bytes"] / 1e6,
        "push_mb": m["push_bytes"] / 1e6,
    }


def run_config(folder: Path, work: Path, workers: int, staleness: int, remote: bool, batch: int) -> dict[str, float]:
    if not remote:
        return train(folder, "local", workers, staleness, batch, work)
    shards = start_shards(2, work, f"w{workers}s{staleness}")
    try:
        return train(folder, ",".join(s.address for s in shards), workers, staleness, batch, work)
    finally:
        for s in shards:
            s.stop()


def key_throughput(work: Path, reps: int) -> list[dict[str, float]]:
    spec = ModelSpec("lr")
    rng = np.random.default_rng(0)
    out = []
    for n in (1, 2, 4):
        shards = start_shards(n, work, f"kt{n}")
        client = PSClient.connect([s.address for s in shards])
        try:
            client.control.declare(spec.tables())
            for size in (1024, 16384, 131072):
                pulls, pushes = [], []
                for _ in range(max(3, reps)):
                    keys = np.unique(rng.integers(1, 2**63, size, dtype=np.uint64))
                    t0 = time.perf_counter()
                    rows, session = client.pull("w", keys, state=True)
                    t1 = time.perf_counter()
                    client.push("w", keys, np.full_like(rows, 1e-3), session, kind=DELTA)
                    t2 = time.perf_counter()
                    pulls.append(keys.shape[0] / (t1 - t0))
                    pushes.append(keys.shape[0] / (t2 - t1))
                out.append(
                    {
                        "shards": n,
                        "keys": size,
                        "pull_keys_per_s": statistics.median(pulls),
                        "push_keys_per_s": statistics.median(pushes),
                    }
                )
        finally:
            client.close()
            for s in shards:
                s.stop()
    return out


def summary(runs: list[dict[str, float]]) -> dict[str, float]:
    speeds = [r["examples_per_s"] for r in runs]
    return {
        "min": min(speeds),
        "median": statistics.median(speeds),
        "loop_median": statistics.median(r["loop_examples_per_s"] for r in runs),
        "logloss": statistics.median(r["logloss"] for r in runs),
        "auc": statistics.median(r["auc"] for r in runs),
        "pull_mb": statistics.median(r["pull_mb"] for r in runs),
        "push_mb": statistics.median(r["push_mb"] for r in runs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--staleness", default="0,1,4,16")
    ap.add_argument("--batches", default="16384,4096")
    args = ap.parse_args()
    # the SSP table at the default batch size (16384) and at 4096, then in-process shards
    stale = [int(x) for x in args.staleness.split(",")]
    configs = [(w, s, True, b) for b in (int(x) for x in args.batches.split(",")) for w in (1, 2) for s in stale]
    configs += [(1, 0, False, 0), (2, 0, False, 0)]
    results: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        folder, rows = write_folder(args.rows, work)
        for _ in range(args.reps):
            for workers, s, remote, batch in configs:
                key = f"{'grpc2' if remote else 'local'} W={workers} s={s} batch={batch or 'default'}"
                results.setdefault(key, []).append(run_config(folder, work, workers, s, remote, batch))
                print(key, results[key][-1], flush=True)
        keys = key_throughput(work, args.reps)
    table = {k: summary(v) for k, v in results.items()}
    out = {"rows": rows, "reps": args.reps, "configs": table, "runs": results, "key_throughput": keys}
    (ROOT / "bench/results").mkdir(exist_ok=True)
    (ROOT / "bench/results/workers.json").write_text(json.dumps(out, indent=1))
    print(f"\nFrappe x{rows // 86582} ({rows} rows), 8 files; LR-FTRL; min/median examples/s over {args.reps} reps\n")
    print(
        "| PS | W | s | batch | examples/s min / median | training loop examples/s | progressive logloss | window AUC |"
        " pull MB | push MB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for k, r in table.items():
        ps, wk, sk, bk = k.split()
        print(
            f"| {ps} | {wk[2:]} | {sk[2:]} | {bk[6:]} | {r['min'] / 1e3:.0f}k / {r['median'] / 1e3:.0f}k"
            f" | {r['loop_median'] / 1e3:.0f}k | {r['logloss']:.4f}"
            f" | {r['auc']:.4f} | {r['pull_mb']:.0f} | {r['push_mb']:.0f} |"
        )
    base = table["local W=1 s=0 batch=default"]["median"]
    for k, r in table.items():
        if k.startswith("grpc2 W=2"):
            print(f"{k} / local W=1 (default batch): {r['median'] / base:.2f}x")
    print("\n| shards | keys per call | pull keys/s | push keys/s |\n|---|---|---|---|")
    for r in keys:
        print(f"| {r['shards']} | {r['keys']} | {r['pull_keys_per_s'] / 1e6:.2f}M | {r['push_keys_per_s'] / 1e6:.2f}M |")


if __name__ == "__main__":
    main()
