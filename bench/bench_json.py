"""JSON Lines against CSV: the same rows (Avazu 10k repeated, its numbers as JSON numbers,
without the id column) as a CSV file, as one flat JSON object a line, and as objects whose
features sit in a nested object ({"click": 0, "ad": {"hour": ...}}: fields "ad.hour"...),
trained by `boundless train --ps local` (LR, defaults), whole process, alternating --reps
times; reports examples/s in the trainer and the whole process's seconds, medians, and
checks every run trained the same. Writes bench/results/json_lines.json; asserts nothing
about speed.

    .venv/bin/python bench/bench_json.py [--repeat 20] [--reps 3]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.datasets import DATA  # noqa: E402
from bench.whole_runs import alternating, kept  # noqa: E402


def _number(text: str) -> Any:
    return int(text) if text.isdigit() and (text == "0" or not text.startswith("0")) else text


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    rows = list(csv.DictReader((DATA / "avazu_10k/train_rows1-9999.csv").open()))
    names = [n for n in rows[0] if n != "id"]
    with tempfile.TemporaryDirectory(prefix="bench-json-") as tmp:
        as_csv, as_json = Path(tmp) / "avazu.csv", Path(tmp) / "avazu.jsonl"
        with as_csv.open("w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(names)
            for _ in range(args.repeat):
                w.writerows([r[n] for n in names] for r in rows)
        one = "".join(json.dumps({n: _number(r[n]) for n in names}) + "\n" for r in rows)
        as_json.write_text(one * args.repeat)
        as_nested = Path(tmp) / "avazu-nested.jsonl"
        nest = "".join(
            json.dumps({"click": _number(r["click"]), "ad": {n: _number(r[n]) for n in names if n != "click"}}) + "\n"
            for r in rows
        )
        as_nested.write_text(nest * args.repeat)
        sources = {"csv": as_csv, "json": as_json, "json_nested": as_nested}
        result: dict[str, Any] = {
            "rows": len(rows) * args.repeat,
            "bytes": {name: path.stat().st_size for name, path in sources.items()},
            **alternating(sources, [], args.reps, Path(tmp)),
        }
    kept(result, tuple(sources), "json_lines.json")


if __name__ == "__main__":
    main()
