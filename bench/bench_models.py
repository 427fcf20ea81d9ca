"""Models benchmark (issue: every model end to end), side by side with the peers in one run.

- Quality and speed of each model, one online pass in stream order through `boundless
  train --ps local` (whole process): progressive logloss over the stream, progressive AUC
  over the last 20%, examples/s (min/median over repetitions).
- The mini-batch gap: LR-FTRL progressive logloss at batch 1 and 256, with per-example
  updates (the default) and with summed batch gradients, beside Vowpal Wabbit.
- Peers on the same rows: xLearn FFM (trains on the first 80%, scores the last 20%), from
  bench/.peers-venv (bench/install_peers.sh). The DNN models and their peers: bench/bench_dnn.py.

Writes bench/results/models.json and prints markdown tables; asserts nothing about speed.
Run: .venv/bin/python bench/bench_models.py [--reps 3] [--datasets frappe,criteo10k,avazu10k]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.datasets import DATASETS, encode_ids, write_libffm, write_stream, write_vw  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "bench" / ".peers-venv" / "bin" / "python"
# label -> trainer flags; defaults everywhere (wdl and deepfm: bench/bench_dnn.py)
MODELS: dict[str, list[str]] = {
    "lr": ["--model", "lr"],
    "fm": ["--model", "fm", "--k", "8"],
    "ffm": ["--model", "ffm", "--k", "8"],
}


def train(stream: Path, fmt: str, rows: int, flags: list[str], reps: int, work: Path) -> dict[str, float]:
    walls, rates, runs = [], [], []
    for _ in range(reps):
        out = work / f"run-{time.time_ns()}.json"
        cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--no-follow", "--ps", "local"]
        cmd += ["--format", fmt, "--metrics-port", "-1", "--metrics-out", str(out), "--window", str(max(1, rows // 5)), *flags]
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, timeout=1800)
        walls.append(time.perf_counter() - t)
        result = json.loads(out.read_text())
        rates.append(result["examples_per_s"])
        runs.append(result)
    return {
        "auc_last20": statistics.median(r["window_auc"] for r in runs),
        "progressive_logloss": statistics.median(r["progressive_logloss"] for r in runs),
        "examples_per_s_median": statistics.median(rates),
        "examples_per_s_max": max(rates),
        "wall_s_min": min(walls),
        "wall_s_median": statistics.median(walls),
        "whole_process_examples_per_s_median": rows / statistics.median(walls),
        "reps": reps,
    }


def peer(script: str, *args: str, seed: int = 0) -> dict[str, float] | None:
    """A peer's script in the peers' environment (None without one); `seed` goes to it as
    PEER_SEED (the scripts that read it seed their models with it)."""
    if not PEERS.exists():
        return None
    env = {**os.environ, "USER": os.environ.get("USER", "root") or "root", "PEER_SEED": str(seed)}
    proc = subprocess.run(
        [str(PEERS), str(ROOT / "bench" / "peers" / script), *args], capture_output=True, text=True, env=env, timeout=3600
    )
    if proc.returncode != 0:
        return {"error": proc.stderr[-500:]}  # type: ignore[dict-item]
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--datasets", default="frappe,criteo10k,avazu10k")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated labels of MODELS")
    args = ap.parse_args()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in args.datasets.split(","):
            ds = DATASETS[name]
            stream = write_stream(ds, work)
            labels, ids, _ = encode_ids(ds)
            rows = labels.shape[0]
            res: dict[str, object] = {"rows": rows}
            for model in args.models.split(","):
                res[model] = train(stream, DATASETS[name].preset, rows, MODELS[model], args.reps, work)
                print(name, model, json.dumps(res[model]), flush=True)
            gap = {}
            for label, flags in {
                "batch1": ["--batch-size", "1"],
                "batch256_per_example": ["--batch-size", "256"],
                "batch256_summed": ["--batch-size", "256", "--update", "batch"],
            }.items():
                gap[label] = train(stream, DATASETS[name].preset, rows, ["--model", "lr", *flags], 1, work)["progressive_logloss"]
            vw_file = work / f"{name}.vw"
            write_vw(labels, ids, vw_file)
            for label, extra in {"vw_default": [], "vw_ftrl": ["--ftrl"]}.items():
                out = peer("run_vw.py", str(vw_file), *extra)
                gap[label] = out["progressive_logloss"] if out and "progressive_logloss" in out else float("nan")
            res["batch_gap"] = gap
            print(name, "gap", json.dumps(gap), flush=True)
            cut = int(rows * 0.8)
            tr, te = work / f"{name}.train.ffm", work / f"{name}.test.ffm"
            write_libffm(labels[:cut], ids[:cut], tr)
            write_libffm(labels[cut:], ids[cut:], te)
            res["xlearn_ffm"] = peer("run_xlearn.py", str(tr), str(te), "4", "10")
            print(name, "peers", json.dumps({"xlearn_ffm": res["xlearn_ffm"]}), flush=True)
            results[name] = res
    out_dir = ROOT / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "models.json").write_text(json.dumps(results, indent=1))
    print_tables(results)


def print_tables(results: dict[str, dict]) -> None:
    print(
        "\n| dataset | model | AUC last 20% | progressive logloss | examples/s (trainer, median) | whole process s (min/median) |"
    )
    print("|---|---|---|---|---|---|")
    for name, res in results.items():
        for model in MODELS:
            if model in res:
                r = res[model]
                print(
                    f"| {name} | {model} | {r['auc_last20']:.4f} | {r['progressive_logloss']:.4f} | "
                    f"{r['examples_per_s_median']:,.0f} | {r['wall_s_min']:.1f} / {r['wall_s_median']:.1f} |"
                )
    print("\n| dataset | LR-FTRL batch 1 | batch 256, per-example | batch 256, summed | VW default | VW --ftrl |")
    print("|---|---|---|---|---|---|")
    for name, res in results.items():
        g = res["batch_gap"]
        print(
            f"| {name} | {g['batch1']:.4f} | {g['batch256_per_example']:.4f} | {g['batch256_summed']:.4f} | "
            f"{g['vw_default']:.4f} | {g['vw_ftrl']:.4f} |"
        )
    print("\n| dataset | peer | AUC (last 20%, held out) | examples/s | settings |")
    print("|---|---|---|---|---|")
    for name, res in results.items():
        for key in ("xlearn_ffm",):
            p = res.get(key) or {}
            if "auc" in p:
                print(f"| {name} | {key} | {p['auc']:.4f} | {p['examples_per_s']:,.0f} | k={p['k']}, {p['epochs']} epochs |")


if __name__ == "__main__":
    main()
