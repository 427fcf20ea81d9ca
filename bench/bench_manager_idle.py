"""The model manager's idle CPU against the history it has handled.

An exports folder holds N handled export folders (each with READY and an export.json) and
the repository N rejection records; `boundless model watch --poll-s 0.2` runs with nothing
new to do. The figure is the manager process's CPU time (user + system, /proc) over a
window after a warm-up, as a share of one core. With --old-tree the same runs use another
checkout of the code (the commit before the fix) in the same venv, alternating with the
current one, so both are measured side by side on the same machine.

    .venv/bin/python bench/bench_manager_idle.py [--history 0,2000,20000] [--window-s 10] [--old-tree DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")


def _history(work: Path, n: int) -> tuple[Path, Path]:
    exports, repo = work / "exports", work / "repo"
    (repo / "ctr" / "rejected").mkdir(parents=True)
    exports.mkdir()
    for i in range(n):
        name = f"{i + 1:020d}"
        (exports / name).mkdir()
        (exports / name / "export.json").write_text("{}")
        (exports / name / "READY").write_text(name)
        (repo / "ctr" / "rejected" / f"{name}.json").write_text(json.dumps({"export_id": name, "reason": "bench"}))
    last = f"{n:020d}" if n else ""
    (repo / "ctr" / "COUNTER.json").write_text(json.dumps({"next_version": 1, "handled_through": last}))
    return exports, repo


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def measure(tree: Path, n: int, window_s: float, warmup_s: float) -> float:
    """The manager's share of one core while idle over `window_s`."""
    with tempfile.TemporaryDirectory(prefix="bench-mgr-") as tmp:
        exports, repo = _history(Path(tmp), n)
        env = {**os.environ, "PYTHONPATH": str(tree)}
        cmd = [sys.executable, "-m", "boundless", "model", "watch", "--exports", str(exports), "--repo", str(repo)]
        cmd += ["--poll-s", "0.2", "--log-level", "WARNING"]
        if tree == ROOT:
            cmd += ["--keep-exports", "0", "--metrics-port", "-1"]  # the history stays for the whole window
        else:
            cmd += ["--metrics-port", "0"]  # before the fix, -1 was refused by the manager
        proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(warmup_s)
            if proc.poll() is not None:
                raise SystemExit(f"the manager in {tree} exited with {proc.returncode}")
            before = _cpu_s(proc.pid)
            time.sleep(window_s)
            return (_cpu_s(proc.pid) - before) / window_s
        finally:
            proc.terminate()
            proc.wait(30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    ap.add_argument("--history", default="0,2000,20000", help="handled exports (and rejection records) in the folders")
    ap.add_argument("--window-s", type=float, default=10.0)
    ap.add_argument("--warmup-s", type=float, default=4.0)
    ap.add_argument("--old-tree", type=Path, default=None, help="another checkout to run side by side (alternating)")
    ap.add_argument("--out", type=Path, default=None, help="write the results here as JSON")
    args = ap.parse_args()
    trees = [("current", ROOT)] + ([("old", args.old_tree.resolve())] if args.old_tree else [])
    rows = []
    for n in (int(x) for x in args.history.split(",")):
        for label, tree in trees:
            share = measure(tree, n, args.window_s, args.warmup_s)
            rows.append({"code": label, "history": n, "cpu_share": share})
            print(f"{label:8s} {n:>6d} handled exports: {100 * share:5.1f}% of a core while idle", flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
