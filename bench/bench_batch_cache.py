"""The parsed-batch cache (`--batch-cache DIR`, issue: data path, part 5): whole-process time
of `boundless train --ps local` on each dataset repeated to >= 1M rows, parsing the text
against replaying the cache a first run wrote. Models: LR (training is cheap, so parsing
shows) and FFM (training dominates). The same progressive logloss is checked, not assumed.

Records min/median over --reps (interleaved); writes bench/results/batch_cache.json and
prints markdown; asserts nothing.
Run: .venv/bin/python bench/bench_batch_cache.py [--reps 3] [--datasets frappe,criteo10k,avazu10k]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.datasets import DATASETS  # noqa: E402
from ctr.data.schema import PRESETS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MIN_ROWS = 1_000_000


def write_repeated(name: str, work: Path) -> tuple[Path, int]:
    ds = DATASETS[name]
    lines = ds.lines()
    csv = PRESETS[ds.preset].format == "csv"
    body = lines[1:] if csv else lines
    reps = -(-MIN_ROWS // len(body))
    path = work / f"{name}.{'csv' if csv else 'txt'}"
    path.write_text("\n".join(([lines[0]] if csv else []) + body * reps) + "\n")
    return path, len(body) * reps


def run(stream: Path, fmt: str, model: str, cache: Path | None, work: Path) -> tuple[float, float, float]:
    out = work / "m.json"
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--no-follow", "--ps", "local"]
    cmd += ["--format", fmt, "--model", model, "--metrics-port", "-1", "--metrics-out", str(out)]
    if model == "ffm":
        cmd += ["--k", "4"]
    if cache is not None:
        cmd += ["--batch-cache", str(cache)]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, timeout=1800)
    wall = time.perf_counter() - t
    m = json.loads(out.read_text())
    return wall, m["samples"], m["progressive_logloss"]


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--datasets", default="frappe,criteo10k,avazu10k")
    ap.add_argument("--models", default="lr,ffm")
    ap.add_argument("--ffm-datasets", default="frappe", help="FFM runs only here (Criteo FFM trains at ~2k ex/s)")
    args = ap.parse_args()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in args.datasets.split(","):
            stream, rows = write_repeated(name, work)
            for model in args.models.split(","):
                if model == "ffm" and name not in args.ffm_datasets.split(","):
                    continue
                cache = work / f"cache-{name}-{model}"
                first = run(stream, DATASETS[name].preset, model, cache, work)  # parses and writes the cache
                size = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
                parse, replay, losses = [], [], set()
                for _ in range(args.reps):
                    w, n, loss = run(stream, DATASETS[name].preset, model, None, work)
                    parse.append(n / w)
                    losses.add(round(loss, 10))
                    w, n, loss = run(stream, DATASETS[name].preset, model, cache, work)
                    replay.append(n / w)
                    losses.add(round(loss, 10))
                key = f"{name} {model}"
                results[key] = {
                    "rows": rows,
                    "text_mb": stream.stat().st_size / 1e6,
                    "cache_mb": size / 1e6,
                    "first_run_examples_per_s": rows / first[0],
                    "parse": [min(parse), statistics.median(parse)],
                    "replay": [min(replay), statistics.median(replay)],
                    "same_logloss": len(losses) == 1,
                }
                print(key, results[key], flush=True)
                shutil.rmtree(cache)
            stream.unlink()
    (ROOT / "bench/results").mkdir(exist_ok=True)
    (ROOT / "bench/results/batch_cache.json").write_text(json.dumps(results, indent=1))
    print(f"\nWhole process, `--ps local`, min / median examples/s over {args.reps} reps\n")
    print("| data, model | rows | text MB | cache MB | parsing | from the cache | speed-up | first run (writes) | same logloss |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, r in results.items():
        p, c = r["parse"], r["replay"]
        assert isinstance(p, list) and isinstance(c, list)
        print(
            f"| {key} | {r['rows']:,} | {r['text_mb']:.0f} | {r['cache_mb']:.0f} | {p[0] / 1e3:.0f}k / {p[1] / 1e3:.0f}k"
            f" | {c[0] / 1e3:.0f}k / {c[1] / 1e3:.0f}k | {c[1] / p[1]:.2f}x | {r['first_run_examples_per_s'] / 1e3:.0f}k"
            f" | {'yes' if r['same_logloss'] else 'NO'} |"
        )


if __name__ == "__main__":
    main()
