"""DeepFM's MLP in serving on a GPU (serving.scoring.mlp_cuda, serving.scoring.batcher), in process:

1. one pass of n items (pinned copy in, MLP, copy out): eager kernels against replayed
   CUDA graphs, and torch on the CPU, in ms and items/s; and the host copy alone;
2. the dynamic batcher under T threads that each submit 200-item requests in a loop:
   items/s and each request's wait (p50/p99);
3. the stages of a whole 200 x 500 request (decode, lookups, pooling, MLP) on a published
   model, so the end-to-end figures of bench_serving.py can be read;
4. the largest |GPU score - CPU score| over all of the above's inputs.

The model is bench_serving's DeepFM (60 fields, k = 8, hidden 256,128). Needs CUDA; prints
a table and writes bench/results/gpu_dnn.json; asserts nothing about speed.

    python3 bench/bench_gpu_dnn.py [--seconds 3] [--threads 1,4,16,64] [--keys 2000000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_client import timed  # noqa: E402
from bench.serving_model import dense_weights, publish, requests, spec_for  # noqa: E402
from ctr.model.dnn import deep_inputs  # noqa: E402
from ctr.repository.versions import MANIFEST, Repository  # noqa: E402
from serving.config import DnnBatching  # noqa: E402
from serving.loading.servable import load  # noqa: E402
from serving.request.encoding import (
    decode,  # noqa: E402
    field_hash_ids,  # noqa: E402
)
from serving.scoring import batcher as batching  # noqa: E402
from serving.scoring.mlp import DeepScorer  # noqa: E402
from serving.scoring.parallel import Splitter  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPEC = spec_for("deepfm", k=8, hidden=(256, 128))


def inputs(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    pooled = rng.normal(0, 0.3, size=(n, SPEC.field_count, SPEC.k)).astype(np.float32)
    return pooled, rng.normal(0, 0.5, size=n).astype(np.float32)


def timed_ms(fn: Any, reps: int) -> tuple[float, float]:
    """(min, median) ms of `reps` calls after one to warm up (kernels, graphs, caches)."""
    fn()
    return timed(fn, reps)


def one_pass(dense: dict[str, np.ndarray], cpu: DeepScorer, rng: np.random.Generator, worst: list[float]) -> list[dict[str, Any]]:
    graphed = DeepScorer(SPEC, dense, cuda_graphs=True)
    eager = DeepScorer(SPEC, dense, cuda_graphs=False)
    rows = []
    for n in (200, 1000, 4096, 16384):
        pooled, partial = inputs(n, rng)
        ref = cpu.predict(pooled, partial)
        row: dict[str, Any] = {"items": n}
        pinned = torch.empty((n, SPEC.field_count * SPEC.k), dtype=torch.float32, pin_memory=True).numpy()
        row["host_copy_min_ms"], row["host_copy_median_ms"] = timed_ms(
            lambda p=pooled, dst=pinned: np.copyto(dst, p.reshape(p.shape[0], -1)), 100
        )
        for label, scorer, reps in (("graphs", graphed, 300), ("eager", eager, 300), ("cpu", cpu, 20)):
            got = scorer.predict(pooled, partial)
            worst.append(float(np.abs(got - ref).max()))
            lo, med = timed_ms(lambda s=scorer, p=pooled, z=partial: s.predict(p, z), reps)
            row[f"{label}_min_ms"], row[f"{label}_median_ms"] = lo, med
            row[f"{label}_items_per_s"] = n / (med / 1e3)
        rows.append(row)
        print("pass", json.dumps(row), flush=True)
    return rows


def batched(
    dense: dict[str, np.ndarray], cpu: DeepScorer, threads: list[int], seconds: float, worst: list[float]
) -> list[dict[str, Any]]:
    rows = []
    for wait_ms in (0.2, 0.5):
        for t in threads:
            row = batcher_run(dense, cpu, t, wait_ms, seconds, worst)
            rows.append(row)
            print("batcher", json.dumps(row), flush=True)
    return rows


def batcher_run(
    dense: dict[str, np.ndarray], cpu: DeepScorer, t: int, wait_ms: float, seconds: float, worst: list[float]
) -> dict[str, Any]:
    """t threads submit 200-item requests for `seconds` through one batcher."""
    b = batching.DynamicBatcher(wait_ms / 1e3, 16384)
    scorer = DeepScorer(SPEC, dense, b, cuda_graphs=True)
    rng = np.random.default_rng(t)
    jobs = [inputs(200, rng) for _ in range(8)]
    for p, z in jobs[:2]:
        worst.append(float(np.abs(scorer.predict(p, z) - cpu.predict(p, z)).max()))
    lat: list[list[float]] = [[] for _ in range(t)]
    go = threading.Barrier(t + 1)
    end = [0.0]

    def run(i: int) -> None:
        go.wait()
        j = i
        while time.perf_counter() < end[0]:
            p, z = jobs[j % len(jobs)]
            s = time.perf_counter()
            scorer.predict(p, z)
            lat[i].append((time.perf_counter() - s) * 1e3)
            j += 1

    workers = [threading.Thread(target=run, args=(i,)) for i in range(t)]
    for w in workers:
        w.start()
    end[0] = time.perf_counter() + seconds
    go.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    wall = time.perf_counter() - t0
    ms = np.concatenate([np.array(x) for x in lat])
    b.close()
    return {
        "threads": t,
        "wait_ms": wait_ms,
        "items_per_s": b.items / wall,
        "requests_per_s": ms.shape[0] / wall,
        "mean_batch_items": b.items / max(1, b.batches),
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
    }


def stages(keys: int) -> dict[str, Any]:
    """Median ms of each stage of a 200 x 500 request on a published DeepFM version."""
    reqs = requests(8)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        repo = Repository(Path(tmp) / "repo", "ctr")
        publish(repo, 1, SPEC, reqs, keys, shards=2)
        d = repo.path(1)
        manifest = json.loads((d / MANIFEST).read_text())
        out: dict[str, Any] = {}
        for threads in (1, 2, 4, 16):
            model = load(d, manifest, manifest, d, [], None, splitter=Splitter(threads), batching=DnnBatching("off"))
            out[f"threads_{threads}"] = stage_times(model, reqs)
            print("stages", threads, json.dumps(out[f"threads_{threads}"]), flush=True)
            model.splitter.close()
        return out


def stage_times(model: Any, reqs: list[Any]) -> dict[str, Any]:
    hashes = field_hash_ids(tuple(SPEC.fields))
    dec = [decode(r, SPEC.field_count, hashes, both=model.splitter.both) for r in reqs]
    rows = [model.rows(q.keys) for q in dec]
    emb_at = model.columns["v"][0]
    cyc = iter(range(10**9))

    def pool(i: int) -> Any:
        q = dec[i]
        return deep_inputs(
            q.context, q.item_offsets, q.item_indices, q.values, q.fields, rows[i], emb_at,
            SPEC.k, SPEC.field_count, model.bias, True, SPEC.pair_norm,
        )  # fmt: skip

    def decoded() -> Any:
        return decode(reqs[next(cyc) % 8], SPEC.field_count, hashes, both=model.splitter.both)

    pooled = [pool(i) for i in range(len(reqs))]
    row = {
        "decode": timed_ms(decoded, 40),
        "lookups": timed_ms(lambda: model.rows(dec[next(cyc) % 8].keys), 40),
        "pooling": timed_ms(lambda: pool(next(cyc) % 8), 40),
        "mlp": timed_ms(lambda: model.net.predict(*pooled[next(cyc) % 8]), 40),
        "whole": timed_ms(lambda: model.score(decoded()), 40),
    }
    return {k: {"min_ms": v[0], "median_ms": v[1]} for k, v in row.items()}


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--threads", default="1,4,16,64")
    ap.add_argument("--keys", type=int, default=2_000_000)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu_dnn: no CUDA device")
    dense = dense_weights(SPEC, np.random.default_rng(1))
    cpu = DeepScorer(SPEC, dense, on=torch.device("cpu"))
    rng = np.random.default_rng(0)
    worst: list[float] = []
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    results["pass"] = one_pass(dense, cpu, rng, worst)
    results["batcher"] = batched(dense, cpu, [int(t) for t in args.threads.split(",")], args.seconds, worst)
    results["stages"] = stages(args.keys)
    results["max_abs_diff_vs_cpu"] = max(worst)
    print("max |GPU - CPU| score:", max(worst))
    out = ROOT / "bench" / "results" / "gpu_dnn.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
