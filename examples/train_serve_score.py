"""Train on a CSV, serve it, score it: the Python API end to end.

    .venv/bin/python examples/train_serve_score.py [clicks.csv --label clicked]

Without a file it writes a small synthetic CSV (a planted logistic model over a few
categorical columns) and uses that. The platform (2 PS shards, the model manager with its
quality gate, serving) runs as processes on this machine and stops at the end.
"""

from __future__ import annotations

import argparse
import csv as csv_module
import tempfile
from pathlib import Path

import numpy as np

import boundless


def synthetic_csv(path: Path, rows: int = 40_000, seed: int = 0) -> Path:
    """A header, a label column `clicked`, and four id columns whose planted weights make it."""
    rng = np.random.default_rng(seed)
    cols = {"user": 500, "ad": 200, "site": 50, "hour": 24}
    weights = {c: rng.normal(0, 1.0, n) for c, n in cols.items()}
    ids = {c: rng.integers(0, n, rows) for c, n in cols.items()}
    z = sum(weights[c][ids[c]] for c in cols) - 2.0
    clicked = rng.random(rows) < 1 / (1 + np.exp(-z))
    lines = ["clicked," + ",".join(cols)]
    lines += [",".join([str(int(clicked[i]))] + [f"{c[0]}{ids[c][i]}" for c in cols]) for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("csv", nargs="?", help="a CSV with a header (default: a synthetic one)")
    ap.add_argument("--label", default="clicked", help="the label column")
    ap.add_argument("--model", default="fm", help="lr, fm, ffm, wdl or deepfm")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="boundless-example-") as tmp:
        csv = Path(args.csv) if args.csv else synthetic_csv(Path(tmp) / "clicks.csv")
        with boundless.local_platform(shards=2, work_dir=Path(tmp) / "platform") as p:
            summary = p.train(str(csv), args.model, label=args.label, k=8)
            print(
                f"trained {summary.samples:,} samples at {summary.examples_per_s:,.0f}/s,"
                f" window AUC {summary.window_auc:.4f}, {summary.exports} export(s)"
            )
            version = p.wait_published()
            print(f"serving version {version}; versions {p.models.list()}")
            with open(csv, newline="", encoding="utf-8-sig") as fh:  # quoted fields as the trainer reads them
                lines = csv_module.reader(fh)
                header = next(lines)
                row = dict(zip(header, next(lines), strict=True))
            row.pop(args.label)
            pred = p.client.predict(items=[row, {**row, header[-1]: "unseen"}])
            print(f"scores of two items from version {pred.version}: {pred.scores.round(4).tolist()}")


if __name__ == "__main__":
    main()
