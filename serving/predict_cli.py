"""`boundless predict`: scores the samples of a file through a running serving process."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ctr.batch import build_batch
from ctr.fields import FieldIndex
from ctr.formats import ParseError, make_parser, resolve_fields
from ctr.metrics import auc, logloss
from ctr.schema import PRESETS, detect_schema
from serving.client import PredictClient, encode_batch


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", required=True, help="serving HOST:PORT")
    parser.add_argument("--data", required=True, type=Path, help="file of labelled samples")
    parser.add_argument("--format", default="auto", help="schema preset or auto")
    parser.add_argument("--model", default="ctr")
    parser.add_argument("--items", type=int, default=200, help="items per request")
    parser.add_argument("--limit", type=int, default=0, help="score at most this many samples (0: all)")
    parser.add_argument("--scores", action="store_true", help="print one score per line")


def run(args: argparse.Namespace) -> int:
    lines = args.data.read_text().splitlines()
    if not lines:
        raise ValueError(f"{args.data}: empty")
    schema = detect_schema(lines[0]) if args.format == "auto" else PRESETS[args.format]
    header = lines[0] if schema.format == "csv" else None
    client = PredictClient(args.address, args.model)
    served = list(client.status().fields)  # the served model's field list: its indices
    fields = FieldIndex(served, frozen=True) if served else resolve_fields(schema, lines[:2000], freeze=False)
    parse = make_parser(schema, fields, header)
    body = lines[1:] if header else lines
    start = 2 if header else 1
    samples = []
    for i, line in enumerate(body[: args.limit or None]):
        try:
            samples.append(parse(line))
        except ParseError as e:
            print(f"{args.data}:{i + start}: {e}", file=sys.stderr)
    labels, scores = [], []
    version = 0
    for lo in range(0, len(samples), args.items):
        batch = build_batch(samples[lo : lo + args.items], fields.ids())
        pred = client.predict_encoded(encode_batch(batch))
        version = pred.version
        labels.extend(batch.labels.tolist())
        scores.extend(pred.scores.tolist())
        if args.scores:
            print("\n".join(f"{s:.6f}" for s in pred.scores))
    client.close()
    print(
        f"scored {len(scores)} samples with {args.model} version {version}: "
        f"AUC {auc(labels, scores):.4f}  logloss {logloss(labels, scores):.4f}",
        file=sys.stderr,
    )
    return 0
