"""JSON Lines as a source (`--format json`, told from a line's `{`): the rows of a csv
file written as one JSON object a line train the same model as the csv does, and a line
that is no sample is reported at file:line with why."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

AVAZU = "avazu_10k/train_rows1-9999.csv"


def _train(source: Path, out: Path, *args: str) -> tuple[dict[str, Any], str]:
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(source), "--ps", "local", "--no-follow"]
    proc = subprocess.run(
        [*cmd, "--metrics-port", "-1", "--metrics-out", str(out), *args], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stderr


def _number(text: str) -> Any:
    """A csv field as a JSON producer would write it: digits without a leading zero as a number."""
    return int(text) if text.isdigit() and (text == "0" or not text.startswith("0")) else text


def test_json_lines_train_as_the_csv_of_the_same_rows_and_bad_lines_are_named(data_dir: Path, tmp_path: Path) -> None:
    rows = list(csv.DictReader((data_dir / AVAZU).open()))
    names = [n for n in rows[0] if n != "id"]
    with (tmp_path / "rows.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(names)
        w.writerows([r[n] for n in names] for r in rows)
    lines = [json.dumps({n: _number(r[n]) for n in names}) for r in rows]
    lines.insert(100, '{"click": 1, "site_id": ')  # cut short: line 101
    lines.insert(200, '{"site_id": "85f751fd"}')  # no label: line 201
    (tmp_path / "rows.jsonl").write_text("\n".join(lines) + "\n")
    for model in ("lr", "ffm"):
        as_csv, _ = _train(tmp_path / "rows.csv", tmp_path / f"{model}.csv.json", "--model", model)
        as_json, err = _train(tmp_path / "rows.jsonl", tmp_path / f"{model}.jsonl.json", "--model", model)
        assert as_json["samples"] == as_csv["samples"] == len(rows) and as_json["bad_lines"] == 2
        for key in ("window_auc", "progressive_logloss", "sparse_rows"):
            assert as_json[key] == as_csv[key], (model, key)  # the same tokens in the same fields: the same model
        assert "rows.jsonl:101: not JSON: Expecting value" in err
        assert "rows.jsonl:201: no label 'click' in the object (its keys: site_id)" in err
