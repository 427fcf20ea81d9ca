"""Start-up of `boundless train`: the whole process, defaults, on a 200-line Frappe file, so
that what is timed is starting (imports, numba's target and cached kernels, the in-process
shards) and stopping, not training. Runs each tree given in turn, alternating (this machine
is noisy), and reports min and median seconds per model, and which of gRPC, protobuf and
torch the run loaded (a plain LR run should load none: tests/unit/test_layering.py).

    .venv/bin/python bench/bench_startup.py [TREE ...] [--reps 15] [--models lr,fm,deepfm]

TREE defaults to this checkout; another (`git worktree add /tmp/old REV`) runs with this
venv's Python, its first run (which may compile its kernels) not counted. Python writes no
bytecode cache when PYTHONDONTWRITEBYTECODE is set; the runs here unset it, as a user's
shell has it, and a first run per tree writes the cache. Asserts nothing.
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

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "frappe" / "frappe.validation.libfm"
PROBE = (
    "import sys, runpy\n"
    "sys.argv = ['boundless', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('boundless', run_name='__main__')\n"
    "except SystemExit:\n"
    "    loaded = sorted({m.split('.')[0] for m in sys.modules} & {'grpc', 'google', 'torch'})\n"
    "    print('LOADED', ','.join(loaded), file=sys.stderr)\n"
    "    raise\n"
)


def run(tree: Path, model: str, source: Path, env: dict[str, str]) -> tuple[float, str]:
    cmd = [sys.executable, "-c", PROBE, "train", "--model", model, "--ps", "local", "--source", str(source)]
    cmd += ["--no-follow", "--metrics-port", "-1"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{tree} {model}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    loaded = next((ln.split(" ", 1)[1] for ln in proc.stderr.splitlines() if ln.startswith("LOADED ")), "?")
    return wall, loaded or "none"


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("trees", nargs="*", type=Path, default=[ROOT])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--models", default="lr,fm,deepfm")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        source = Path(tmp) / "frappe200.libfm"
        source.write_text("".join(DATA.read_text().splitlines(keepends=True)[:200]))
        for model in args.models.split(","):
            for tree in args.trees:
                run(tree, model, source, env)  # bytecode and kernel caches
            walls: dict[Path, list[float]] = {t: [] for t in args.trees}
            loaded: dict[Path, str] = {}
            for _ in range(args.reps):
                for tree in args.trees:
                    wall, loaded[tree] = run(tree, model, source, env)
                    walls[tree].append(wall)
            for tree in args.trees:
                row = {
                    "min_s": min(walls[tree]),
                    "median_s": statistics.median(walls[tree]),
                    "loaded": loaded[tree],
                    "reps": args.reps,
                }
                results[f"{tree}:{model}"] = row
                times = f"min {row['min_s']:.2f} s, median {row['median_s']:.2f} s"
                print(f"{model} {tree}: {times}, loads {row['loaded']}", flush=True)
    out = ROOT / "bench" / "results" / "startup.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
