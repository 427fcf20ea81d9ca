"""`boundless predict`: scores the samples of a file through a running serving process.

The lines are parsed under the served version's own feature transform (ModelStatus: its
format, numeric bucketing, skipped columns and crosses) and field list, so they are scored
exactly as the trainer saw such samples, unless --format names another preset."""

from __future__ import annotations

import argparse
import sys

import grpc

from ctr.data.batch import build_batch
from ctr.data.fields import FieldIndex
from ctr.data.formats import ParsedSample, list_columns, make_parser, read_lines, resolve_fields
from ctr.data.quality import auc, logloss
from ctr.data.sample_file import MAX_BAD_FRACTION, check_bad, check_fields, figure, parse_file
from ctr.data.schema import DELIMITED, PRESETS, FeatureSchema, detect_schema
from protos import predict_pb2
from serving.client.predict_client import PredictClient, encode_batch, schema_of


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", required=True, help="serving HOST:PORT")
    parser.add_argument("--data", required=True, help="file of labelled samples ('-' reads standard input)")
    parser.add_argument(
        "--format", default="model", help="model: the served version's own transform (default); auto, or a schema preset"
    )
    parser.add_argument("--model-name", default="ctr", help="the served model's name")
    parser.add_argument(
        "--version-label",
        default="",
        help="score with the version this label names (stable, or a canary's label: boundless model label), not the routed one",
    )
    parser.add_argument("--version", type=int, default=0, help="score with this version, if serving has it loaded")
    parser.add_argument("--items", type=int, default=200, help="items per request")
    parser.add_argument("--limit", type=int, default=0, help="score at most this many samples (0: all)")
    parser.add_argument("--scores", action="store_true", help="print one score per sample line, in order ('nan' for a bad line)")
    parser.add_argument("--timeout-s", type=float, default=10.0, help="deadline of each call")
    parser.add_argument(
        "--max-bad-fraction",
        type=float,
        default=MAX_BAD_FRACTION,
        help="refuse the file when more than this share of its lines is bad",
    )


def schema_for(fmt: str, served: FeatureSchema, first_line: str) -> FeatureSchema:
    if fmt == "model":
        return served if served.format != "kv" or "=" in first_line else detect_schema(first_line)
    if fmt == "auto" or fmt in DELIMITED:
        return detect_schema(first_line, None, DELIMITED.get(fmt))
    if fmt not in PRESETS:
        raise ValueError(f"--format {fmt!r}: not model, auto, {', '.join(DELIMITED)} or a preset ({', '.join(PRESETS)})")
    return PRESETS[fmt]


def run(args: argparse.Namespace) -> int:
    lines = read_lines(args.data)
    if not lines:
        raise ValueError(f"--data {args.data}: empty")
    client = PredictClient(args.address, args.model_name, timeout=args.timeout_s)
    try:
        return _score(args, client, lines)
    except grpc.RpcError as e:
        raise ValueError(f"serving at {args.address}: {e.code().name}: {e.details()}") from None  # type: ignore[attr-defined]
    finally:
        client.close()


def parse_samples(
    lines: list[str],
    status: predict_pb2.ModelStatusResponse,
    fmt: str,
    limit: int = 0,
    where: str = "data",
    max_bad_fraction: float = MAX_BAD_FRACTION,
    lists: tuple[str, ...] = (),
) -> tuple[list[ParsedSample], FieldIndex, list[int]]:
    """A file's samples parsed under the served version's transform and field list (or the
    format `fmt` names), and the bad lines' indices among its sample lines; the first bad
    lines are reported as where:line, all are skipped, and a file with more than
    max_bad_fraction of them is refused (ValueError)."""
    schema = schema_for(fmt, schema_of(status.transform), lines[0])
    header = lines[0] if schema.format == "csv" else None
    served = list(status.fields)  # the served model's field list: its indices
    fields = FieldIndex(served, frozen=True) if served else resolve_fields(schema, lines[:2000], freeze=False)
    parse = make_parser(schema, fields, header, lists)  # lists: a Parquet file's list columns
    body = lines[1:] if header else lines
    start = 2 if header else 1
    parsed = parse_file(body[: limit or None], parse, where, start)
    check_bad(parsed, where, max_bad_fraction)
    return parsed.samples, fields, parsed.bad_at


def _aligned(scores: list[float], bad_at: list[int]) -> list[str]:
    """The scores as text, with "nan" where the file had a bad line."""
    bad = set(bad_at)
    it = iter(scores)
    return ["nan" if i in bad else f"{next(it):.6f}" for i in range(len(scores) + len(bad))]


def _score(args: argparse.Namespace, client: PredictClient, lines: list[str]) -> int:
    samples, fields, bad_at = parse_samples(
        lines, client.status(), args.format, args.limit, args.data, args.max_bad_fraction, list_columns(args.data)
    )
    note = check_fields(samples, fields, args.data, args.model_name)  # before any request: refused at once
    labels, scores = [], []
    version, label = 0, ""
    for lo in range(0, len(samples), args.items):
        batch = build_batch(samples[lo : lo + args.items], fields.ids())
        pred = client.predict_encoded(encode_batch(batch), label=args.version_label, version=args.version)
        version, label = pred.version, pred.label
        labels.extend(batch.labels.tolist())
        scores.extend(pred.scores.tolist())
    if args.scores:  # a line per sample line, "nan" for a bad one: the scores line up with the file's rows
        print("\n".join(_aligned(scores, bad_at)))
    if note:
        print(note, file=sys.stderr)
    print(
        f"scored {len(scores)} samples with {args.model_name} version {version} ({label}): "
        f"AUC {figure(auc(labels, scores))}  logloss {logloss(labels, scores):.6f}",
        file=sys.stderr,
    )
    return 0
