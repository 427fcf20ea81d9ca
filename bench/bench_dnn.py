"""DNN training side by side (issue 31): Boundless's Wide&Deep and DeepFM against
DeepCTR-Torch and TorchRec (EmbeddingBagCollection + MLP) on the same rows, in one run,
all on this machine's CPU unless --device says otherwise.

- Boundless: `boundless train --ps local` (whole process), one online pass in stream order;
  AUC progressive over the last 20%; examples/s in the trainer.
- Peers (bench/.peers-venv, bench/install_peers.sh): one epoch over the first 80% of the
  same rows (same fields, same ids), batch 256, scoring the last 20%.
Every system runs once per round, in turn, for --reps rounds (this machine is noisy: a
peer's speed has swung 10x between runs of a day); the table gives medians. With
--peer-seeds S the peers run S times a round, seeded 0..S-1 (their AUC moves with the seed
of their initial weights; Boundless's initial rows come from the keys, so it has no seed to
vary): their AUC is the median over every run, and the range is printed beside it.

Writes bench/results/dnn.json and prints a markdown table; asserts nothing about speed.
Run: .venv/bin/python bench/bench_dnn.py [--reps 3] [--datasets frappe,criteo10k] [--device cpu] [--peer-seeds 1]
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
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_models import peer  # noqa: E402
from bench.datasets import DATASETS, encode_ids, write_stream  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
K, HIDDEN = "16", "400,400,400"


def boundless(stream: Path, fmt: str, rows: int, model: str, device: str, work: Path) -> dict[str, float]:
    out = work / f"run-{time.time_ns()}.json"
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--no-follow", "--ps", "local"]
    cmd += [
        "--format",
        fmt,
        "--metrics-port",
        "-1",
        "--port",
        "-1",
        "--metrics-out",
        str(out),
        "--window",
        str(max(1, rows // 5)),
    ]
    cmd += ["--model", model, "--k", K, "--hidden", HIDDEN, "--device", device]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, timeout=3600)
    wall = time.perf_counter() - started
    r = json.loads(out.read_text())
    return {
        "auc": r["window_auc"],
        "logloss": r["window_logloss"],
        "examples_per_s": r["examples_per_s"],
        "wall_s": wall,
        "device": r.get("device", "cpu"),
    }


def constant_logloss(labels: np.ndarray) -> float:
    """Logloss on the last 20% of predicting the first 80%'s positive rate: what a model
    must beat to have learned anything (rare positives make a small logloss easy)."""
    cut = int(len(labels) * 0.8)
    p = float(np.clip(labels[:cut].mean(), 1e-6, 1 - 1e-6))
    y = labels[cut:]
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def values_of(runs: list[dict[str, float] | None], key: str) -> list[float]:
    """`key` of every run that reported it (a peer without its environment reports nothing)."""
    return [float(r[key]) for r in runs if r and key in r]


def median(runs: list[dict[str, float] | None], key: str) -> float | None:
    values = values_of(runs, key)
    return statistics.median(values) if values else None


def spread(runs: list[dict[str, float] | None], key: str) -> tuple[float, float] | None:
    values = values_of(runs, key)
    return (min(values), max(values)) if values else None


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--datasets", default="frappe,criteo10k")
    ap.add_argument("--models", default="deepfm,wdl")
    ap.add_argument("--device", default="cpu", help="Boundless's --device (the peers run on the CPU)")
    ap.add_argument("--peer-seeds", type=int, default=1, help="runs of each peer a round, seeded 0..S-1")
    args = ap.parse_args()
    results: dict[str, dict[str, dict[str, Any]]] = {}
    constants: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in args.datasets.split(","):
            ds = DATASETS[name]
            stream = write_stream(ds, work)
            labels, ids, _ = encode_ids(ds)
            constants[name] = constant_logloss(np.asarray(labels, dtype=np.float64))
            npz = work / f"{name}.npz"
            np.savez(npz, labels=labels, ids=ids)
            for model in args.models.split(","):
                runs: dict[str, list[dict[str, float] | None]] = {"boundless": [], "deepctr-torch": [], "torchrec": []}
                for _ in range(args.reps):
                    runs["boundless"].append(boundless(stream, ds.preset, len(labels), model, args.device, work))
                    for seed in range(args.peer_seeds):
                        runs["deepctr-torch"].append(peer("run_deepctr.py", str(npz), K, HIDDEN, model, seed=seed))
                        runs["torchrec"].append(peer("run_torchrec.py", str(npz), model, K, HIDDEN, seed=seed))
                key = f"{name}/{model}"
                results[key] = {
                    system: {
                        "auc": median(r, "auc"),
                        "auc_range": spread(r, "auc"),
                        "logloss": median(r, "logloss"),
                        "examples_per_s": median(r, "examples_per_s"),
                        "runs": r,
                    }
                    for system, r in runs.items()
                }
                print(
                    key,
                    json.dumps({s: {m: v[m] for m in ("auc", "logloss", "examples_per_s")} for s, v in results[key].items()}),
                    flush=True,
                )
    out = ROOT / "bench" / "results" / "dnn.json"
    out.parent.mkdir(exist_ok=True)  # ignored by git: a fresh clone has no results folder
    out.write_text(json.dumps(results, indent=1))
    print(
        "\n| dataset / model | system | AUC, last 20% (median [min-max]) | logloss, last 20% (median) | examples/s (median) |"
        "\n|---|---|---|---|---|"
    )
    for key, systems in results.items():
        for system, v in systems.items():
            auc, span, rate, loss = v["auc"], v["auc_range"], v["examples_per_s"], v["logloss"]
            shown = "-" if auc is None else f"{auc:.4f}" + (f" [{span[0]:.4f}-{span[1]:.4f}]" if span else "")
            loss_shown = "-" if loss is None else f"{loss:.5f}"
            print(f"| {key} | {system} | {shown} | {loss_shown} | {rate if rate is None else f'{rate:,.0f}'} |")
    for name, loss in constants.items():
        print(f"{name}: a constant (the first 80%'s positive rate) scores logloss {loss:.5f} on the last 20%")


if __name__ == "__main__":
    main()
