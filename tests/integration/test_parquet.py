"""Parquet sources: a Parquet file trains exactly as the CSV of the same rows does; a value
that cannot be a CSV field is counted and named by row group and column; a trainer killed
with -9 inside a Parquet file takes up at the cut's row and trains every row once."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from tests.integration.test_exactly_once import _timed_once, _trainer_killed

AVAZU = "avazu_10k/train_rows1-9999.csv"


def _as_parquet(csv: Path, out: Path, rows_per_group: int, repeat: int = 1) -> int:
    """The CSV's rows (every column a string, as the trainer reads them) in a Parquet file."""
    header = csv.read_text().splitlines()[0].split(",")
    table = pacsv.read_csv(csv, convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(header, pa.string())))
    table = pa.concat_tables([table] * repeat)
    pq.write_table(table, out, row_group_size=rows_per_group)
    return int(table.num_rows)


def _train(source: Path, out: Path, *args: str) -> tuple[dict, str]:
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(source), "--ps", "local", "--metrics-port", "-1"]
    proc = subprocess.run([*cmd, "--metrics-out", str(out), *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stderr


def test_parquet_trains_exactly_as_the_csv_of_its_rows(data_dir: Path, tmp_path: Path) -> None:
    csv = data_dir / AVAZU
    parquet = tmp_path / "avazu.parquet"
    rows = _as_parquet(csv, parquet, rows_per_group=700)
    from_csv, _ = _train(csv, tmp_path / "csv.json", "--model", "fm", "--k", "4")
    from_parquet, _ = _train(parquet, tmp_path / "parquet.json", "--model", "fm", "--k", "4")
    assert from_parquet["samples"] == from_csv["samples"] == rows
    for key in ("progressive_logloss", "window_auc", "window_logloss", "bad_lines"):
        assert from_parquet[key] == from_csv[key], key


def test_values_that_cannot_be_csv_fields_are_counted_by_row_group_and_column(tmp_path: Path) -> None:
    table = pa.table({"click": ["1", "0", "1", None] * 50, "site": ["a", "b,c", "d", "e"] * 50, "app": ["x"] * 200})
    path = tmp_path / "odd.parquet"
    pq.write_table(table, path, row_group_size=100)
    got, err = _train(path, tmp_path / "m.json", "--label", "click", "--max-bad-fraction", "0.5")
    assert "row group 0, column site: 25 value(s) with a comma" in err and "row group 1, column site" in err
    assert got["samples"] + got.get("held_out_samples", 0) == 150 and got["bad_lines"] == 50  # null labels: bad rows
    assert "row group 0, row 3" in err  # a bad row is named by its row group and row


def test_a_trainer_killed_inside_a_parquet_file_trains_every_row_once(data_dir: Path, tmp_path: Path) -> None:
    stream = tmp_path / "stream.parquet"
    total = _as_parquet(data_dir / AVAZU, stream, rows_per_group=4000, repeat=8)
    # batches of 64 keep 80,000 rows training for seconds (at the default batch a fast
    # machine finished them between two kills), so that the kills land inside the file
    slow = ("--batch-size", "64")
    expected, span = _timed_once(stream, tmp_path / "once", model=slow)
    kills, err, model = _trainer_killed(stream, tmp_path / "killed", random.Random(3), 3, span, slow)
    assert kills >= 2 and "the stream takes up at" in err, err[-3000:]
    assert model == expected
    assert json.loads((tmp_path / "killed" / "m.json").read_text())["samples"] == total
