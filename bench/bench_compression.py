"""Compressed pushes (issue: compression): for every push codec, on Frappe (86,582 rows)
and Criteo 10k repeated 5 times, for LR, FFM and DeepFM, on 2 fresh PS shard processes over
gRPC with one worker: push and pull bytes per sample, progressive logloss and window AUC
(last 20,000 samples), and their difference from the fp32 run of the same configuration,
as the mean over seeds with the spread (seeds vary the compressors' stochastic rounding and
the embedding and MLP initialisation). Also encode and decode speed of every value codec in
millions of values per second on one core, and a plot of push bytes per sample against
dAUC (docs/compression.png). DeepFM also runs
with 1-bit Adam on its MLP (codec "PUSH|onebit-adam:100").

Push bytes count every byte of the push requests (headers, keys, subsets, values) while
training, flushes of evicted residuals included; the one-off drain of the remaining
residuals at the end of the run (`residual_drain_bytes`) and the dense pushes (bias, MLP)
are reported apart. Writes bench/results/compression.json; asserts nothing.
Run: .venv/bin/python bench/bench_compression.py [--seeds 3] [--models lr,ffm,deepfm]

Hierarchical push: with --workers W, a codec ending in "@agg" runs with --local-aggregate
(the workers sum their pushes in shared memory, worker 0 sends), e.g.
  --workers 2 --codecs fp32,onebit,fp32@agg,onebit@agg --out ... --plot ...
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
from bench.datasets import DATASETS  # noqa: E402
from boundless.processes import start  # noqa: E402
from ps.compression.payload import VALUE_CODECS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CODECS = ["fp32", "fp16", "bf16", "int8", "epgc8", "epgc9", "epgc11", "onebit", "topk:0.05+int8", "topk:0.01+onebit", "topk:0.01"]
REPEAT = {"frappe": 1, "criteo10k": 5}
SEED_FLAGS = {"lr": [], "ffm": ["--opt-v"], "deepfm": ["--opt-v", "--opt-mlp"]}
# DeepFM also runs with 1-bit Adam on its MLP ("PUSH|DENSE"), whose pushes dwarf the sparse ones
DNN_EXTRA = ["onebit|onebit-adam:100", "topk:0.01+onebit|onebit-adam:100"]
AGG = "@agg"  # a codec with this suffix runs with --local-aggregate (needs --workers >= 2)


def write_stream(name: str, work: Path, workers: int) -> tuple[Path, int]:
    """One file, or with several workers a folder of 4 files per worker (dealt out round-robin)."""
    ds = DATASETS[name]
    lines = ds.lines() * REPEAT[name]
    if workers == 1:
        path = work / f"{name}.txt"
        path.write_text("\n".join(lines) + "\n")
        return path, len(lines)
    folder = work / f"{name}-w{workers}"
    folder.mkdir()
    parts = 4 * workers
    step = -(-len(lines) // parts)
    for i in range(parts):
        (folder / f"part{i:02d}.txt").write_text("\n".join(lines[i * step : (i + 1) * step]) + "\n")
    return folder, len(lines)


def train(stream: Path, preset: str, model: str, codec: str, seed: int, work: Path, workers: int = 1) -> dict[str, float]:
    shards = [start(f"ps{i}", ["ps", "--shard-index", str(i), "--shard-count", "2"], work) for i in range(2)]
    try:
        for s in shards:
            s.wait_ready()
        out = work / "m.json"
        cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--format", preset, "--no-follow"]
        push, _, dense = codec.partition("|")
        if push.endswith(AGG):  # the workers sum their pushes before worker 0 sends them
            push = push.removesuffix(AGG)
            cmd.append("--local-aggregate")
        cmd += ["--ps", ",".join(s.address for s in shards), "--model", model, "--push-codec", push, "--seed", str(seed)]
        cmd += ["--dense-codec", dense or "fp32"]
        cmd += ["--window", "20000", "--metrics-port", "-1", "--metrics-out", str(out), "--workers", str(workers)]
        for flag in SEED_FLAGS[model]:
            cmd += [flag, f"seed={seed}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if proc.returncode:
            raise SystemExit(proc.stderr[-3000:])
        m = json.loads(out.read_text())
    finally:
        for s in shards:
            s.stop()
    n = m["samples"]
    sparse = m["push_bytes"] - m["residual_drain_bytes"] - m["dense_push_bytes"]
    return {
        "samples": n,
        "auc": m["window_auc"],
        "logloss": m["progressive_logloss"],
        "push_bytes_per_sample": sparse / n,
        "drain_bytes_per_sample": m["residual_drain_bytes"] / n,
        "dense_push_bytes_per_sample": m["dense_push_bytes"] / n,
        "pull_bytes_per_sample": m["pull_bytes"] / n,
        "residual_rows_peak": m["residual_rows_peak"],
        "residual_rows_cap": m["residual_rows_cap"],
        "aggregate_rows_in": m.get("aggregate_rows_in", 0.0),
        "aggregate_rows_out": m.get("aggregate_rows_out", 0.0),
    }


def summarize(runs: dict[str, list[dict[str, float]]]) -> list[dict[str, Any]]:
    base = runs["fp32"]
    rows = []
    for codec, rs in runs.items():
        d_auc = [r["auc"] - b["auc"] for r, b in zip(rs, base, strict=True)]
        d_ll = [r["logloss"] - b["logloss"] for r, b in zip(rs, base, strict=True)]
        push = statistics.mean(r["push_bytes_per_sample"] for r in rs)
        rows.append(
            {
                "codec": codec,
                "push_bytes_per_sample": push,
                "ratio": statistics.mean(b["push_bytes_per_sample"] for b in base) / push,
                "pull_bytes_per_sample": statistics.mean(r["pull_bytes_per_sample"] for r in rs),
                "drain_bytes_per_sample": statistics.mean(r["drain_bytes_per_sample"] for r in rs),
                "dense_push_bytes_per_sample": statistics.mean(r["dense_push_bytes_per_sample"] for r in rs),
                "auc": statistics.mean(r["auc"] for r in rs),
                "logloss": statistics.mean(r["logloss"] for r in rs),
                "d_auc": statistics.mean(d_auc),
                "d_auc_spread": [min(d_auc), max(d_auc)],
                "d_logloss": statistics.mean(d_ll),
                "residual_rows_peak": max(r["residual_rows_peak"] for r in rs),
                "residual_rows_cap": rs[0]["residual_rows_cap"],
                "aggregate_rows_in": statistics.mean(r.get("aggregate_rows_in", 0.0) for r in rs),
                "aggregate_rows_out": statistics.mean(r.get("aggregate_rows_out", 0.0) for r in rs),
            }
        )
    return rows


def codec_speed(reps: int) -> list[dict[str, float | str]]:
    """Encode and decode M values/s of each value codec on 2**20 gradient values."""
    rng = np.random.default_rng(0)
    out: list[dict[str, float | str]] = []
    for d in (2, 16):
        x = rng.normal(size=((1 << 20) // d, d)) * 0.01
        for name, codec in VALUE_CODECS.items():
            codec.encode(x[:64], rng)  # compile
            enc, dec = [], []
            for _ in range(reps):
                t = time.perf_counter()
                body, _ = codec.encode(x, rng)
                enc.append(time.perf_counter() - t)
                t = time.perf_counter()
                codec.decode(body, x.shape[0], d)
                dec.append(time.perf_counter() - t)
            out.append(
                {
                    "codec": name,
                    "cols": d,
                    "encode_mvals_max": x.size / min(enc) / 1e6,
                    "encode_mvals_median": x.size / statistics.median(enc) / 1e6,
                    "decode_mvals_max": x.size / min(dec) / 1e6,
                    "decode_mvals_median": x.size / statistics.median(dec) / 1e6,
                    "bits_per_value": 8 * len(body) / x.size,
                }
            )
    return out


def plot(results: dict[str, list[dict[str, Any]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6))
    markers = {"lr": "o", "ffm": "s", "deepfm": "^"}
    colors = {c: plt.get_cmap("tab20")(i) for i, c in enumerate(CODECS + DNN_EXTRA)}
    for key, rows in results.items():
        dataset, model = key.split("/")
        for r in rows:
            ax.scatter(
                r["push_bytes_per_sample"],
                r["d_auc"],
                marker=markers.get(model, "x"),
                color=colors.get(str(r["codec"]), "k"),
                edgecolors="k" if dataset == "frappe" else "none",
                s=50,
            )
    for c in CODECS + DNN_EXTRA:
        ax.scatter([], [], color=colors[c], label=c)
    for m, mk in markers.items():
        ax.scatter([], [], marker=mk, color="grey", label=m)
    ax.set_xscale("log")
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xlabel("sparse push bytes per sample (log)")
    ax.set_ylabel("window AUC minus the fp32 run's")
    ax.set_title("Push compression: bytes against dAUC (2 gRPC shards; outlined: Frappe, plain: Criteo 10k x5)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _runs_of_log(path: Path) -> dict[tuple[str, str, str, int], dict[str, float]]:
    """'DATASET MODEL CODEC SEED {json}' lines, as this script prints them."""
    out = {}
    for line in path.read_text().splitlines():
        parts = line.split(" ", 4)
        if len(parts) == 5 and parts[4].startswith("{") and parts[3].isdigit():
            out[(parts[0], parts[1], parts[2], int(parts[3]))] = json.loads(parts[4])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--models", default="lr,ffm,deepfm")
    ap.add_argument("--datasets", default="frappe,criteo10k")
    ap.add_argument("--codecs", default=",".join(CODECS))
    ap.add_argument("--speed-reps", type=int, default=7)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "compression.json"))
    ap.add_argument("--workers", type=int, default=1, help="worker processes; each sees only the others' sent updates")
    ap.add_argument("--resume-log", default=None, help="the printed run lines of an interrupted run: those runs are reused")
    ap.add_argument("--plot", default=None, help="the PNG to write (default: docs/compression.png, or _wW for W workers)")
    args = ap.parse_args()
    codecs = args.codecs.split(",")
    if codecs[0] != "fp32":
        codecs = ["fp32", *[c for c in codecs if c != "fp32"]]
    results: dict[str, list[dict[str, Any]]] = {}
    done = _runs_of_log(Path(args.resume_log)) if args.resume_log else {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in args.datasets.split(","):
            stream, _ = write_stream(name, work, args.workers)
            for model in args.models.split(","):
                model_codecs = codecs + (DNN_EXTRA if model == "deepfm" else [])
                runs: dict[str, list[dict[str, float]]] = {c: [] for c in model_codecs}
                for seed in range(args.seeds):
                    for codec in model_codecs:
                        key = (name, model, codec, seed)
                        if key not in done:
                            done[key] = train(stream, DATASETS[name].preset, model, codec, seed, work, args.workers)
                        runs[codec].append(done[key])
                        print(name, model, codec, seed, json.dumps(runs[codec][-1]), flush=True)
                results[f"{name}/{model}"] = summarize(runs)
    speed = codec_speed(args.speed_reps)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)  # bench/results is not in a fresh clone
    Path(args.out).write_text(json.dumps({"training": results, "speed": speed}, indent=1))
    default_plot = "compression.png" if args.workers == 1 else f"compression_w{args.workers}.png"
    plot(results, Path(args.plot) if args.plot else ROOT / "docs" / default_plot)
    for setup, rows in results.items():
        print(f"\n{setup}\n| codec | push B/sample | ratio | dense push B/sample | pull B/sample | dAUC (spread) | dlogloss |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            lo, hi = r["d_auc_spread"]
            print(
                f"| {r['codec']} | {r['push_bytes_per_sample']:.3f} | {r['ratio']:.1f}x |"
                f" {r['dense_push_bytes_per_sample']:.1f} | {r['pull_bytes_per_sample']:.1f} |"
                f" {r['d_auc']:+.4f} ({lo:+.4f}..{hi:+.4f}) | {r['d_logloss']:+.4f} |"
                + (f" rows in {r['aggregate_rows_in']:.0f} out {r['aggregate_rows_out']:.0f}" if r["aggregate_rows_in"] else "")
            )
    print("\n| codec | cols | encode M values/s max / median | decode | bits/value |\n|---|---|---|---|---|")
    for s in speed:
        print(
            f"| {s['codec']} | {s['cols']} | {s['encode_mvals_max']:.0f} / {s['encode_mvals_median']:.0f} |"
            f" {s['decode_mvals_max']:.0f} / {s['decode_mvals_median']:.0f} | {s['bits_per_value']:.2f} |"
        )


if __name__ == "__main__":
    main()
