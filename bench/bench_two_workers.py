"""The mini-batch gap with two workers: two `boundless train` processes share 2 PS shard
processes over gRPC, each reading alternate lines of the stream, against one process
reading the whole stream. (A stand-in for `--workers 2`, which the trainer does not have
yet.) Progressive logloss of the two is the sample-weighted mean of theirs.

Writes bench/results/two_workers.json; asserts nothing about speed.
Run: .venv/bin/python bench/bench_two_workers.py [--models lr,ffm]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.datasets import DATASETS  # noqa: E402
from boundless.processes import start  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def train(addresses: str, sources: list[Path], flags: list[str], work: Path) -> list[dict[str, float]]:
    procs = []
    for i, src in enumerate(sources):
        out = work / f"w{i}.json"
        cmd = [sys.executable, "-m", "boundless", "train", "--source", str(src), "--no-follow", "--ps", addresses]
        cmd += ["--format", "libsvm", "--metrics-port", "-1", "--metrics-out", str(out), *flags]
        procs.append((subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), out))
    results = []
    for p, out in procs:
        _, err = p.communicate(timeout=1800)
        if p.returncode:
            raise RuntimeError(err.decode()[-2000:])
        results.append(json.loads(out.read_text()))
    return results


def run(model: str, flags: list[str], lines: list[str], work: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    for workers in (1, 2):
        shards = [start(f"ps{i}-{workers}", ["ps", "--shard-index", str(i), "--shard-count", "2"], work) for i in range(2)]
        try:
            for s in shards:
                s.wait_ready()
            sources = []
            for w in range(workers):
                path = work / f"{model}-{workers}-{w}.libfm"
                path.write_text("\n".join(lines[w::workers]) + "\n")
                sources.append(path)
            res = train(",".join(s.address for s in shards), sources, ["--model", model, *flags], work)
        finally:
            for s in shards:
                s.stop()
        n = sum(r["samples"] for r in res)
        out[f"workers{workers}"] = sum(r["progressive_logloss"] * r["samples"] for r in res) / n
    out["gap"] = out["workers2"] - out["workers1"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--models", default="lr,ffm")
    args = ap.parse_args()
    lines = DATASETS["frappe"].lines()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            for label, flags in {"per-example": [], "summed": ["--update", "batch"]}.items():
                key = f"{model} {label}"
                results[key] = run(model, flags, lines, Path(tmp))
                print(key, json.dumps(results[key]), flush=True)
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "two_workers.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
