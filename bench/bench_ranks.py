"""Trainer ranks (issue 31): LR and FFM with 1, 2 and 4 ranks, each its own process meeting
through torch.distributed's rendezvous, on 2 PS shard processes over gRPC; a folder of 8
files (Frappe repeated) split between the ranks. Per run: examples/s (the group's samples
over rank 0's training time) and progressive logloss (merged over the ranks), so scaling
and that every rank's share was trained show side by side. On a 2-core machine the ranks,
the shards and the OS share two cores: this shows correctness, not scaling.

Run: .venv/bin/python bench/bench_ranks.py [--copies 2] [--ranks 1,2,4] [--models lr,ffm]
     [--lines N (lines per file instead of Frappe x --copies)] [--train-args=--device=cuda]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.datasets import DATASETS  # noqa: E402
from boundless.processes import start  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(folder: Path, work: Path, model: str, ranks: int, extra: list[str]) -> dict[str, float]:
    shards = []
    for i in range(2):
        d = start(f"ps{i}-{model}-{ranks}", ["ps", "--shard-index", str(i), "--shard-count", "2"], work)
        d.wait_ready()
        shards.append(d)
    try:
        master = f"127.0.0.1:{_port()}"
        procs = []
        out = work / f"{model}-{ranks}.json"
        for rank in range(ranks):
            cmd = [sys.executable, "-m", "boundless", "train", "--source", str(folder), "--no-follow", "--format", "libsvm"]
            cmd += ["--ps", ",".join(s.address for s in shards), "--model", model, "--metrics-port", "-1", "--port", "-1"]
            cmd += ["--metrics-out", str(out)] if rank == 0 else []
            cmd += extra
            if ranks > 1:
                cmd += ["--rank", str(rank), "--world-size", str(ranks), "--master", master]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        assert [p.wait(3600) for p in procs] == [0] * ranks
        r = json.loads(out.read_text())
        return {"examples_per_s": r["examples_per_s"], "progressive_logloss": r["progressive_logloss"], "samples": r["samples"]}
    finally:
        for s in shards:
            s.stop()


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--copies", type=int, default=2, help="Frappe copies per file (8 files)")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--models", default="lr,ffm")
    ap.add_argument("--lines", type=int, default=0, help="lines per file (0: Frappe x --copies)")
    ap.add_argument("--train-args", default="", help="more `boundless train` flags, space-separated (e.g. --device=cuda)")
    args = ap.parse_args()
    lines = DATASETS["frappe"].lines() * args.copies
    lines = lines[: args.lines] if args.lines else lines
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        folder = work / "stream"
        folder.mkdir()
        for i in range(8):
            (folder / f"part{i}.libfm").write_text("\n".join(lines) + "\n")
        print("| model | ranks | samples | examples/s | progressive logloss |\n|---|---|---|---|---|")
        for model in args.models.split(","):
            for ranks in (int(r) for r in args.ranks.split(",")):
                r = run(folder, work, model, ranks, args.train_args.split())
                print(
                    f"| {model} | {ranks} | {r['samples']:,.0f} | {r['examples_per_s']:,.0f} | {r['progressive_logloss']:.4f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
