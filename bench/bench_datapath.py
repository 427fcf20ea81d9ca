"""Data-path benchmark (issue: a training data path faster than Vowpal Wabbit), side by
side with the peers in one run, whole process wall time for everyone.

- LR-FTRL against Vowpal Wabbit (default and --ftrl): each dataset repeated to >= 1M rows,
  `boundless train --ps local` with its defaults and with VW's FTRL setting (no l1/l2).
- FM and FFM against xLearn (one epoch over the same rows, libffm input).
Records min/median examples/s over the repetitions (interleaved) and progressive logloss.
Writes bench/results/datapath.json and prints markdown tables; asserts nothing.
Run: .venv/bin/python bench/bench_datapath.py [--reps 5] [--datasets frappe,criteo10k,avazu10k]
     [--min-rows 1000000] [--skip-xlearn] [--out datapath.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.datasets import DATASETS, encode_ids, write_libffm, write_vw  # noqa: E402
from ctr.data.schema import PRESETS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "bench" / ".peers-venv" / "bin" / "python"
MIN_ROWS = 1_000_000
OURS = {
    "boundless lr (defaults)": ["--model", "lr"],
    "boundless lr (VW's FTRL: no l1/l2)": ["--model", "lr", "--opt-w", "ftrl l1=0 l2=0"],
}


def write_repeated(name: str, work: Path, min_rows: int = MIN_ROWS) -> tuple[Path, Path, Path, int]:
    """The dataset repeated to >= min_rows rows: our stream file, VW text, libffm."""
    ds = DATASETS[name]
    labels, ids, _ = encode_ids(ds)
    reps = -(-min_rows // len(labels))
    lines = ds.lines()
    csv = PRESETS[ds.preset].format == "csv"
    stream = work / f"{name}.{'csv' if csv else 'txt'}"
    body = lines[1:] if csv else lines
    stream.write_text("\n".join(([lines[0]] if csv else []) + body * reps) + "\n")
    vw, ffm = work / f"{name}.vw", work / f"{name}.ffm"
    write_vw(np.tile(labels, reps), np.tile(ids, (reps, 1)), vw)
    write_libffm(np.tile(labels, reps), np.tile(ids, (reps, 1)), ffm)
    return stream, vw, ffm, len(labels) * reps


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    t = time.perf_counter()
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800, env=env)
    return time.perf_counter() - t, proc.stdout


def ours(stream: Path, fmt: str, flags: list[str], work: Path) -> tuple[float, float]:
    out = work / "run.json"
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--no-follow", "--ps", "local"]
    wall, _ = timed([*cmd, "--format", fmt, "--metrics-port", "-1", "--metrics-out", str(out), *flags])
    return wall, float(json.loads(out.read_text())["progressive_logloss"])


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--datasets", default="frappe,criteo10k,avazu10k")
    ap.add_argument("--skip-xlearn", action="store_true")
    ap.add_argument("--no-peers", action="store_true", help="Boundless rows only (no bench/.peers-venv here)")
    ap.add_argument("--min-rows", type=int, default=MIN_ROWS, help="repeat each dataset to at least this many rows")
    ap.add_argument("--out", default="datapath.json", help="file name under bench/results")
    args = ap.parse_args()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in args.datasets.split(","):
            stream, vw, ffm, rows = write_repeated(name, work, args.min_rows)
            walls: dict[str, list[float]] = {}
            losses: dict[str, float] = {}
            for _ in range(args.reps):
                for label, extra in () if args.no_peers else (("vw default", []), ("vw --ftrl", ["--ftrl"])):
                    wall, out = timed([str(PEERS), str(ROOT / "bench/peers/run_vw.py"), str(vw), *extra])
                    walls.setdefault(label, []).append(wall)
                    losses[label] = json.loads(out)["progressive_logloss"]
                for label, flags in OURS.items():
                    wall, loss = ours(stream, DATASETS[name].preset, flags, work)
                    walls.setdefault(label, []).append(wall)
                    losses[label] = loss
                if not args.skip_xlearn:
                    env = {**os.environ, "USER": os.environ.get("USER", "root")}
                    for kind in ("fm", "ffm"):
                        if not args.no_peers:
                            wall, _ = timed(
                                [str(PEERS), str(ROOT / "bench/peers/run_xlearn.py"), str(ffm), str(ffm), "4", "1", kind], env
                            )
                            walls.setdefault(f"xlearn {kind} (1 epoch)", []).append(wall)
                        wall, loss = ours(stream, DATASETS[name].preset, ["--model", kind, "--k", "4"], work)
                        walls.setdefault(f"boundless {kind} k=4", []).append(wall)
                        losses[f"boundless {kind} k=4"] = loss
            results[name] = {
                "rows": rows,
                "runs": {
                    label: {
                        "examples_per_s_min": rows / max(w),
                        "examples_per_s_median": rows / statistics.median(w),
                        "wall_s_median": statistics.median(w),
                        "progressive_logloss": losses.get(label),
                    }
                    for label, w in walls.items()
                },
            }
            print(name, json.dumps(results[name]), flush=True)
    path = ROOT / "bench" / "results" / args.out
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(results, indent=1))
    for name, res in results.items():
        print(f"\n{name} ({res['rows']} rows)\n\n| run | examples/s min | median | progressive logloss |\n|---|---|---|---|")
        for label, r in res["runs"].items():
            shown = "" if r["progressive_logloss"] is None else f"{r['progressive_logloss']:.4f}"
            print(f"| {label} | {r['examples_per_s_min']:,.0f} | {r['examples_per_s_median']:,.0f} | {shown} |")


if __name__ == "__main__":
    main()
