"""`boundless eval`: scores a published version on a file of labelled samples, offline, as
serving would score them (the version's files, loaded as serving loads them; no daemon).

The lines are parsed under the version's own feature transform and field list (its
manifest), so the figures are those of the model a client gets. Prints AUC, logloss and
calibration (mean prediction over the file's CTR); --json prints them as one object."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from ctr.data.batch import build_batch
from ctr.data.fields import FieldIndex
from ctr.data.formats import list_columns, make_parser, read_lines
from ctr.data.quality import auc, logloss
from ctr.data.sample_file import MAX_BAD_FRACTION, check_bad, check_fields, figure, parse_file
from ctr.data.schema import FeatureSchema, detect_schema
from ctr.repository.versions import Repository
from ctr.runtime import strict_json
from modelmgr.publish.evaluate import load_published, scores

CHUNK = 8192  # lines parsed, hashed and scored at once


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repo", required=True, help="model repository: a folder or s3://bucket/prefix")
    parser.add_argument("--model-name", default="ctr", help="the model's name in the repository")
    parser.add_argument("--version", type=int, default=0, help="the version to score (default: the one serving serves)")
    parser.add_argument("--data", required=True, help="file of labelled samples ('-' reads standard input)")
    parser.add_argument("--limit", type=int, default=0, help="score at most this many samples (0: all)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--max-bad-fraction",
        type=float,
        default=MAX_BAD_FRACTION,
        help="refuse the file when more than this share of its lines is bad",
    )


def run(args: argparse.Namespace) -> int:
    if "://" not in args.repo and not Path(args.repo).is_dir():
        raise ValueError(f"--repo {args.repo}: no such folder")
    repo = Repository(args.repo, args.model_name)
    versions = repo.versions()
    if not versions:
        raise ValueError(f"--repo {args.repo}: model {args.model_name!r} has no published version")
    version = args.version or repo.target() or versions[-1]
    if version not in versions:
        raise ValueError(f"--version {version}: not a version of {args.model_name!r} (versions {versions[0]}..{versions[-1]})")
    broken = repo.broken(version)
    if broken is not None:
        raise ValueError(f"version {version} cannot be loaded: {broken}")
    manifest = repo.manifest(version)
    lines = read_lines(args.data)
    if not lines:
        raise ValueError(f"--data {args.data}: empty")
    raw_schema = manifest.get("schema") or {}
    schema = FeatureSchema.from_dict(raw_schema) if raw_schema else detect_schema(lines[0])
    fields = FieldIndex(list(manifest["spec"].get("fields") or []), frozen=bool(manifest["spec"].get("fields")))
    header = lines[0] if schema.format == "csv" else None
    parse = make_parser(schema, fields, header, list_columns(args.data))
    body = lines[1:] if header else lines
    first = 2 if header else 1
    model = load_published(repo, version)
    labels: list[np.ndarray] = []
    predictions: list[np.ndarray] = []
    parsed = parse_file(body[: args.limit or None], parse, args.data, first)
    check_bad(parsed, args.data, args.max_bad_fraction)
    note = check_fields(parsed.samples, fields, args.data, args.model_name)
    bad = parsed.bad
    for lo in range(0, len(parsed.samples), CHUNK):
        batch = build_batch(parsed.samples[lo : lo + CHUNK], fields.ids())
        labels.append(batch.labels)
        predictions.append(scores(model, batch))
    y = np.concatenate(labels)
    p = np.concatenate(predictions)
    ctr = float(y.mean())
    doc = {
        "model": args.model_name,
        "version": version,
        "samples": len(y),
        "bad_lines": bad,
        "dropped_features": fields.dropped,
        "auc": auc(y, p),
        "logloss": logloss(y, p),
        "calibration": float(p.mean()) / ctr if ctr > 0 else float("inf"),
        "ctr": ctr,
        "mean_prediction": float(p.mean()),
    }
    if note:
        print(note, file=sys.stderr)
    if args.json:
        print(strict_json.dumps(doc))
    else:
        print(
            f"{args.model_name} version {version} on {len(y)} samples of {args.data}: AUC {figure(doc['auc'])}"
            f"  logloss {doc['logloss']:.6f}  calibration {figure(doc['calibration'], 3)}"
            f" (mean prediction {doc['mean_prediction']:.4f},"
            f" CTR {ctr:.4f})" + (f"; {bad} bad lines skipped" if bad else "")
        )
    return 0
