"""Compressed text against plain text: the same rows (Criteo 10k repeated) as a plain TSV
file, a gzip file (level 6, gzip's default) and a zstd file (level 3, zstd's default),
trained by `boundless train --ps local` (LR, defaults), whole process, alternating --reps
times; reports examples/s in the trainer and the whole process's seconds, medians, and
checks every run trained the same. Writes bench/results/compressed.json; asserts nothing
about speed.

    .venv/bin/python bench/bench_compressed.py [--repeat 40] [--reps 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.datasets import DATA  # noqa: E402
from bench.whole_runs import alternating  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    text = (DATA / "criteo_10k/train_rows1-10000.tsv").read_bytes() * args.repeat
    with tempfile.TemporaryDirectory(prefix="bench-compressed-") as tmp:
        files = {"plain": Path(tmp) / "criteo.tsv", "gzip": Path(tmp) / "criteo.tsv.gz", "zstd": Path(tmp) / "criteo.tsv.zst"}
        files["plain"].write_bytes(text)
        files["gzip"].write_bytes(gzip.compress(text, compresslevel=6))
        files["zstd"].write_bytes(zstandard.ZstdCompressor(level=3).compress(text))
        result: dict[str, Any] = {
            "rows": text.count(b"\n"),
            "bytes": {name: path.stat().st_size for name, path in files.items()},
            **alternating(files, ["--format", "criteo"], args.reps, Path(tmp)),
        }
    losses = {result[name]["progressive_logloss"] for name in files}
    assert len(losses) == 1, losses  # the same training from every file
    for name in files:
        r = result[name]
        spread = ", ".join(f"{x['examples_per_s'] / 1e3:.0f}k" for x in r["runs"])
        print(
            f"| {name} | {result['bytes'][name]:,} | {r['examples_per_s']:,.0f} ({spread}) | {r['whole_s']:.1f} |",
            flush=True,
        )
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "compressed.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
