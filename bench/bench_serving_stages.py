"""The stages of one 200 x 500 request inside the prediction service, in process (no gRPC):
the protobuf parse of the request's bytes, decoding (zstd, varints, token hashing), the
renumbering in first-use order (ctr.model.first_use; FM and the DNNs look up the keys in
that order, the others do not use it), the 80k key lookups (for FFM, locating its rows),
scoring (renumbering included), and the whole servicer path from bytes to scores. Min /
median ms over --reps calls after a warm-up, on 1 and 2 scoring threads; the model is
bench_serving's (10M keys, two shard images). Asserts nothing; writes
bench/results/serving_stages.json.

    .venv/bin/python bench/bench_serving_stages.py [--models lr,fm] [--keys 10000000] [--reps 60] [--threads 1,2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from itertools import count
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_client import timed  # noqa: E402
from bench.serving_model import publish, requests, spec_for  # noqa: E402
from ctr.model.first_use import in_first_use_order  # noqa: E402
from ctr.repository.versions import MANIFEST, Repository  # noqa: E402
from protos import predict_pb2  # noqa: E402
from serving.loading.servable import ServableModel, load  # noqa: E402
from serving.request.encoding import (  # noqa: E402
    EncodedRequest,
    decode,
    field_hash_ids,  # noqa: E402
)
from serving.scoring.parallel import Splitter  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def stage_times(model: ServableModel, reqs: list[EncodedRequest], reps: int) -> dict[str, Any]:
    spec = model.spec
    hashes = field_hash_ids(tuple(spec.fields))
    wire = [
        predict_pb2.PredictRequest(
            item_count=r.item_count, context=r.context, items=r.items, tokens=r.tokens, compression=r.compression
        ).SerializeToString()
        for r in reqs
    ]
    decoded = [decode(r, max(1, spec.field_count), hashes, both=model.splitter.both) for r in reqs]
    # the keys the model looks up: FM's and the DNNs' in first-use order (ctr.model.first_use)
    looked_up = [in_first_use_order(d).keys if model.family.first_use else d.keys for d in decoded]
    cyc = count()

    def whole() -> Any:
        p = predict_pb2.PredictRequest.FromString(wire[next(cyc) % 8])
        enc = EncodedRequest(p.item_count, p.dictionary, p.values, p.context, p.items, p.fields, p.tokens, p.compression)
        scores = model.score(decode(enc, max(1, spec.field_count), hashes, both=model.splitter.both))
        return predict_pb2.PredictResponse(scores=scores.tolist(), model=model.name, version=model.version)

    stages = {
        "parse": lambda: predict_pb2.PredictRequest.FromString(wire[next(cyc) % 8]),
        "decode": lambda: decode(reqs[next(cyc) % 8], max(1, spec.field_count), hashes, both=model.splitter.both),
        "first_use_order": lambda: in_first_use_order(decoded[next(cyc) % 8]),
        # FFM scores its wide rows where they sit: its lookups only locate them
        "lookups": lambda: (model.locate if spec.type == "ffm" else model.rows)(looked_up[next(cyc) % 8]),
        "lookups_and_score": lambda: model.score(decoded[next(cyc) % 8]),
        "whole": whole,
    }
    out: dict[str, Any] = {}
    for name, fn in stages.items():
        for _ in range(8):
            fn()
        best, median = timed(fn, reps)
        out[name] = {"min_ms": best, "median_ms": median}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--models", default="lr,fm")
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--reps", type=int, default=60)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    results: dict[str, Any] = {}
    reqs = requests(8)
    with tempfile.TemporaryDirectory(prefix="bench-stages-") as tmp:
        for name in args.models.split(","):
            spec = spec_for(name, k=8 if name != "ffm" else 4, hidden=(256, 128))  # as bench_serving
            repo = Repository(Path(tmp) / name, "ctr")
            publish(repo, 1, spec, reqs, args.keys, shards=2)
            d = repo.path(1)
            manifest = json.loads((d / MANIFEST).read_text())
            for threads in [int(t) for t in args.threads.split(",")]:
                model = load(d, manifest, manifest, d, [], None, splitter=Splitter(threads))
                results[f"{name}_threads_{threads}"] = row = stage_times(model, reqs, args.reps)
                model.splitter.close()
                print(name, threads, json.dumps({k: round(v["median_ms"], 2) for k, v in row.items()}), flush=True)
    out = ROOT / "bench" / "results" / "serving_stages.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
