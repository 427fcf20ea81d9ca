"""Two revisions of Boundless side by side: `boundless train --ps local` as a whole process
from each revision's tree, alternating runs on the same rows (this machine is noisy), the
trainer's examples/s and the wall time, min and median. For a change that should not change
speed (a restructuring): run it before and after, in one run.

    .venv/bin/python bench/bench_revisions.py OLD_TREE NEW_TREE [--reps 5] [--models lr,fm,ffm] [--min-rows 1000000]

Each tree is a checkout (`git worktree add /tmp/old REV`); both run with this venv's Python.
A first run of each tree compiles its numba kernels and is not counted."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_datapath import write_repeated  # noqa: E402

MODELS = {"lr": ["--model", "lr"], "fm": ["--model", "fm", "--k", "4"], "ffm": ["--model", "ffm", "--k", "4"]}


def run(tree: Path, stream: Path, flags: list[str], out: Path) -> tuple[float, float, float]:
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--no-follow", "--ps", "local"]
    cmd += ["--metrics-port", "-1", "--port", "-1", "--metrics-out", str(out), *flags]
    start = time.perf_counter()
    subprocess.run(cmd, cwd=tree, check=True, capture_output=True, timeout=600)
    wall = time.perf_counter() - start
    m = json.loads(out.read_text())
    return float(m["examples_per_s"]), wall, float(m["progressive_logloss"])


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--models", default="lr,fm,ffm")
    ap.add_argument("--dataset", default="frappe")
    ap.add_argument("--min-rows", type=int, default=1_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        stream, _, _, rows = write_repeated(args.dataset, work, args.min_rows)
        print(f"{args.dataset}: {rows:,} rows; medians of {args.reps} alternating runs [min-max]\n")
        print("| model | tree | examples/s in the trainer | whole process s | progressive logloss |\n|---|---|---|---|---|")
        for model in args.models.split(","):
            got: dict[str, list[tuple[float, float, float]]] = {"old": [], "new": []}
            for name in got:  # compile and cache each tree's kernels first
                run(getattr(args, name), stream, MODELS[model], work / "m.json")
            for _ in range(args.reps):
                for name in got:
                    got[name].append(run(getattr(args, name), stream, MODELS[model], work / "m.json"))
            for name, runs in got.items():
                eps = [r[0] for r in runs]
                wall = [r[1] for r in runs]
                print(
                    f"| {model} | {name} | {statistics.median(eps):,.0f} [{min(eps):,.0f}-{max(eps):,.0f}]"
                    f" | {statistics.median(wall):.2f} [{min(wall):.2f}-{max(wall):.2f}] | {runs[-1][2]:.4f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
