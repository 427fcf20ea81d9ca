"""Request-client benchmark (issue: a vectorized request client): time and bytes to encode
a 200-item x 500-feature request, 100 shared context features (20 fields x 5 values) plus
400 per item (40 fields x 10 values), values drawn from per-field Zipf(1.2) vocabularies
of 100k ids. Dict input (a Python loop over features) against columnar numpy input, as a
token dictionary with zstd (the default) and as hashed keys.
Prints min/median over repetitions and writes bench/results/client.json; asserts nothing.
Run: .venv/bin/python bench/bench_client.py [--reps 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serving.client import RequestEncoder  # noqa: E402
from serving.client.predict_client import Value

ROOT = Path(__file__).resolve().parents[1]
ITEMS, CTX_FIELDS, CTX_PER, ITEM_FIELDS, ITEM_PER, VOCAB = 200, 20, 5, 40, 10, 100_000


def timed(fn, reps: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1e3, statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    ctx_names = [f"u{i}" for i in range(CTX_FIELDS)]
    item_names = [f"i{i}" for i in range(ITEM_FIELDS)]
    context = {f: np.minimum(rng.zipf(1.2, CTX_PER), VOCAB) for f in ctx_names}
    items = {f: np.minimum(rng.zipf(1.2, (ITEMS, ITEM_PER)), VOCAB) for f in item_names}
    enc = RequestEncoder(None, ctx_names + item_names)
    # the dict path takes one value per field name: name each of a field's values apart
    dict_fields = [f"{f}.{j}" for f in item_names for j in range(ITEM_PER)]
    dict_enc = RequestEncoder(None, [f"{f}.{j}" for f in ctx_names for j in range(CTX_PER)] + dict_fields)
    dict_items: list[dict[str, Value]] = [
        {f"{f}.{j}": str(items[f][i, j]) for f in item_names for j in range(ITEM_PER)} for i in range(ITEMS)
    ]
    dict_ctx: dict[str, Value] = {f"{f}.{j}": str(context[f][j]) for f in ctx_names for j in range(CTX_PER)}
    features = ITEMS * ITEM_FIELDS * ITEM_PER + CTX_FIELDS * CTX_PER
    enc.encode_columns(items, context)  # compile and warm up
    col = timed(lambda: enc.encode_columns(items, context), args.reps)
    enc.encode_columns(items, context, tokens=False)
    hashed = timed(lambda: enc.encode_columns(items, context, tokens=False), args.reps)
    dct = timed(lambda: dict_enc.encode(dict_items, dict_ctx), max(3, args.reps // 10))
    result = {
        "features": features,
        "columnar_ms_min": col[0],
        "columnar_ms_median": col[1],
        "hashed_columns_ms_min": hashed[0],
        "hashed_columns_ms_median": hashed[1],
        "hashed_bytes": enc.encode_columns(items, context, tokens=False).nbytes,
        "dict_ms_min": dct[0],
        "dict_ms_median": dct[1],
        "bytes": enc.encode_columns(items, context).nbytes,
        "naive_bytes": features * 12,  # a uint64 key and a float32 value per feature
    }
    out = ROOT / "bench" / "results" / "client.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
