"""Parquet sources: a Parquet file trains exactly as the CSV of the same rows does, values
with commas and quotes too, list columns as multi-valued fields; a line break in a value is
counted and named by row group and column; a trainer killed
with -9 inside a Parquet file takes up at the cut's row and trains every row once."""

from __future__ import annotations

import csv as csv_module
import io
import json
import math
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ctr.data.parquet_text import ParquetText
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


def test_commas_and_quotes_train_as_they_stand_and_line_breaks_are_counted(tmp_path: Path) -> None:
    rng = random.Random(5)
    sites = ["a", "b,c", 'd "q"', "e", "Mozilla/5.0 (KHTML, like Gecko)"]
    rows = [(str(int(rng.random() < 0.3)), rng.choice(sites), rng.choice("xyz")) for _ in range(400)]
    table = pa.table({"click": [r[0] for r in rows], "site": [r[1] for r in rows], "app": [r[2] for r in rows]})
    pq.write_table(table, tmp_path / "quoted.parquet", row_group_size=100)
    with open(tmp_path / "quoted.csv", "w", newline="") as fh:  # the same rows as Python's csv writes them
        writer = csv_module.writer(fh)
        writer.writerow(["click", "site", "app"])
        writer.writerows(rows)
    with ParquetText(tmp_path / "quoted.parquet") as text:  # the text the parser reads holds the values as they are
        rendered = b"".join(iter(text.read, b"")).decode()
    assert [tuple(r) for r in csv_module.reader(io.StringIO(rendered))] == [("click", "site", "app"), *rows]
    from_parquet, err = _train(tmp_path / "quoted.parquet", tmp_path / "p.json", "--model", "fm", "--k", "4")
    from_csv, _ = _train(tmp_path / "quoted.csv", tmp_path / "c.json", "--model", "fm", "--k", "4")
    assert from_parquet["bad_lines"] == from_csv["bad_lines"] == 0 and "written with _" not in err
    for key in ("samples", "progressive_logloss", "window_auc"):
        assert from_parquet[key] == from_csv[key], key

    table = pa.table({"click": ["1", "0", "1", None] * 50, "site": ["a", "b\nc", "d,e", "f"] * 50, "app": ["x"] * 200})
    path = tmp_path / "odd.parquet"
    pq.write_table(table, path, row_group_size=100)
    got, err = _train(path, tmp_path / "m.json", "--label", "click", "--max-bad-fraction", "0.5")
    assert "row group 0, column site: 25 value(s) with a line break" in err and "row group 1, column site" in err
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


def test_float_and_bool_values_render_as_python_writes_them(tmp_path: Path) -> None:
    """A float id (a column with nulls read into pandas is float) renders "15706.0", as
    pandas' to_csv writes it and a client's str() sends it, not Arrow's "15706"; booleans
    "True"; NaN, like null, is a missing feature."""
    floats = [15706.0, None, math.nan, 1e20, 0.1]
    bools = [True, False, None, True, False]
    table = pa.table({"click": ["1", "0", "1", "0", "1"], "f": pa.array(floats), "b": pa.array(bools), "i": [1, 2, None, 4, 5]})
    pq.write_table(table, tmp_path / "typed.parquet")
    with ParquetText(tmp_path / "typed.parquet") as text:
        rendered = b"".join(iter(text.read, b"")).decode()

    def python(v: object) -> str:
        return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)

    columns = [table.column(n).to_pylist() for n in ("click", "f", "b", "i")]
    rows = [(c, python(f), python(b), python(i)) for c, f, b, i in zip(*columns, strict=True)]
    assert [tuple(r) for r in csv_module.reader(io.StringIO(rendered))][1:] == rows


def test_a_list_column_trains_as_a_multi_valued_field_as_the_csv_of_its_joined_values(tmp_path: Path) -> None:
    """A list of strings or of ids is one field of several values: the Parquet file trains
    as the CSV whose cells join them by '|' under a schema naming those fields multi-valued
    (a null value or an empty list adds nothing, a null list is a missing field); a struct
    column is left out, named."""
    rng = random.Random(11)
    rows = []
    for _ in range(3000):
        tags = rng.sample(["sport", "news", "kids", "music", "auto"], rng.randint(0, 3))
        hist = [rng.randint(1, 40) for _ in range(rng.randint(0, 4))] if rng.random() > 0.1 else None
        click = int(rng.random() < (0.6 if "sport" in tags else 0.2) + (0.2 if hist and 7 in hist else 0.0))
        rows.append((str(click), rng.choice("abc"), tags, hist))
    hist_col = [None if h is None else [None if v == 5 else v for v in h] for h in (r[3] for r in rows)]  # nulls inside
    assert any(h and None in h for h in hist_col) and any(h == [] for h in hist_col) and None in hist_col
    table = pa.table(
        {
            "click": [r[0] for r in rows],
            "site": [r[1] for r in rows],
            "tags": pa.array([r[2] for r in rows], pa.list_(pa.string())),
            "hist": pa.array(hist_col, pa.list_(pa.int64())),
            "meta": pa.array([{"a": 1}] * len(rows), pa.struct([("a", pa.int64())])),
        }
    )
    pq.write_table(table, tmp_path / "lists.parquet", row_group_size=700)
    with open(tmp_path / "lists.csv", "w", newline="") as fh:
        writer = csv_module.writer(fh)
        writer.writerow(["click", "site", "tags", "hist"])
        for (label, site, row_tags, _), values in zip(rows, hist_col, strict=True):
            cell = "" if values is None else "|".join("" if v is None else str(v) for v in values)
            writer.writerow([label, site, "|".join(row_tags), cell])
    (tmp_path / "schema.yaml").write_text("format: csv\nlabel: click\nmulti_valued: [tags, hist]\n")
    args = ("--model", "fm", "--k", "4", "--holdout-samples", "0")
    from_parquet, err = _train(tmp_path / "lists.parquet", tmp_path / "p.json", *args)
    from_csv, _ = _train(tmp_path / "lists.csv", tmp_path / "c.json", *args, "--schema", str(tmp_path / "schema.yaml"))
    assert from_parquet["model"]["fields"] == ["site", "tags", "hist"]
    assert from_parquet["samples"] == from_csv["samples"] == len(rows) and from_parquet["bad_lines"] == 0
    for key in ("progressive_logloss", "window_auc"):
        assert from_parquet[key] == from_csv[key], key
    assert "column(s) meta (struct<a: int64>) are not trained" in err
    # each value a feature of its own: the joined text as one token learns less
    (tmp_path / "single.yaml").write_text("format: csv\nlabel: click\n")
    as_one, _ = _train(tmp_path / "lists.csv", tmp_path / "j.json", *args, "--schema", str(tmp_path / "single.yaml"))
    assert from_csv["progressive_logloss"] < as_one["progressive_logloss"]
    # eval and predict read the Parquet file as the trainer does: its samples are the CSV's
    from ctr.data.fields import FieldIndex
    from ctr.data.formats import list_columns, make_parser, read_lines
    from ctr.data.schema import FeatureSchema

    pq_lines, csv_lines = read_lines(str(tmp_path / "lists.parquet")), read_lines(str(tmp_path / "lists.csv"))
    assert list_columns(str(tmp_path / "lists.parquet")) == ("tags", "hist") and list_columns(str(tmp_path / "lists.csv")) == ()
    schema = FeatureSchema(format="csv", label="click", multi_valued=(("tags", "|"), ("hist", "|")))
    fields = FieldIndex(["site", "tags", "hist"], frozen=True)
    parse_pq = make_parser(replace(schema, multi_valued=()), fields, pq_lines[0], list_columns(str(tmp_path / "lists.parquet")))
    parse_csv = make_parser(schema, fields, csv_lines[0])
    assert len(pq_lines) == len(csv_lines) == len(rows) + 1
    assert [parse_pq(line) for line in pq_lines[1:]] == [parse_csv(line) for line in csv_lines[1:]]


def test_a_damaged_parquet_file_is_named_and_the_next_tells_the_format(tmp_path: Path, caplog) -> None:
    """The format was peeked from the first file: a damaged one stopped the run with
    pyarrow's words and no file name."""
    import logging

    import pytest

    from trainer.input.source import StreamSource

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.parquet").write_bytes(b"hello")
    pq.write_table(pa.table({"label": [1, 0], "site": ["x", "y"]}), folder / "b.parquet")
    with caplog.at_level(logging.ERROR, logger="trainer"):
        assert StreamSource(str(folder), follow=False).peek()[0] == "label,site"  # b.parquet's header
    assert f"{folder / 'a.parquet'}: cannot be read" in caplog.text
    with pytest.raises(ValueError, match=r"a.parquet: cannot be read \(Parquet file size is 5 bytes"):
        StreamSource(str(folder / "a.parquet"), follow=False).peek()
