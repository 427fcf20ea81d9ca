"""Parquet against CSV: the same rows (Avazu 10k repeated, every column a string) as a CSV
file and as a Parquet file, trained by `boundless train --ps local` (LR, defaults), whole
process, alternating --reps times; reports examples/s in the trainer and the whole
process's seconds, medians, and checks both runs trained the same. Writes
bench/results/parquet.json; asserts nothing about speed.

    .venv/bin/python bench/bench_parquet.py [--repeat 40] [--reps 3] [--rows-per-group 65536]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.datasets import DATA  # noqa: E402
from bench.whole_runs import alternating, kept  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows-per-group", type=int, default=65536)
    args = ap.parse_args()
    src = DATA / "avazu_10k/train_rows1-9999.csv"
    lines = src.read_text().splitlines()
    with tempfile.TemporaryDirectory(prefix="bench-parquet-") as tmp:
        csv = Path(tmp) / "avazu.csv"
        csv.write_text("\n".join([lines[0], *(lines[1:] * args.repeat)]) + "\n")
        header = lines[0].split(",")
        table = pacsv.read_csv(csv, convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(header, pa.string())))
        parquet = Path(tmp) / "avazu.parquet"
        pq.write_table(table, parquet, row_group_size=args.rows_per_group)
        result: dict[str, Any] = {
            "rows": int(table.num_rows),
            "bytes": {"csv": csv.stat().st_size, "parquet": parquet.stat().st_size},
            **alternating({"csv": csv, "parquet": parquet}, [], args.reps, Path(tmp)),
        }
    kept(result, ("csv", "parquet"), "parquet.json")


if __name__ == "__main__":
    main()
