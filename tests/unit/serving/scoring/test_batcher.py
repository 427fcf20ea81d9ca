"""The dynamic batcher of wdl and deepfm (serving.scoring.batcher), on the CPU: concurrent requests
share MLP passes and get the scores the unbatched path gives."""

from __future__ import annotations

import threading

import numpy as np

from ctr.model.spec import ModelSpec
from serving.scoring.batcher import DynamicBatcher
from serving.scoring.mlp import DeepScorer


def test_concurrent_requests_share_batches_and_score_as_alone():
    spec = ModelSpec("deepfm", k=4, fields=tuple(f"f{i}" for i in range(6)), hidden=(32, 16))
    rng = np.random.default_rng(0)
    dense = {"bias": np.zeros(1, np.float32)}
    for name, shape in spec.mlp_shapes():
        dense[name] = rng.normal(0, 0.3, size=shape).astype(np.float32)
    alone = DeepScorer(spec, dense)
    batcher = DynamicBatcher(max_wait_s=0.02, max_items=10_000)
    batched = DeepScorer(spec, dense, batcher)
    jobs = [
        (rng.normal(size=(n, 6, 4)).astype(np.float32), rng.normal(size=n).astype(np.float32)) for n in (1, 7, 50, 200, 3, 90)
    ]
    got: dict[int, np.ndarray] = {}
    start = threading.Barrier(len(jobs))

    def run(i: int) -> None:
        start.wait()
        got[i] = batched.predict(*jobs[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for i, (pooled, partial) in enumerate(jobs):
        np.testing.assert_allclose(got[i], alone.predict(pooled, partial), atol=1e-4)
    assert batcher.items == sum(p.shape[0] for p, _ in jobs) and batcher.batches < len(jobs)
    batcher.close()


def test_a_full_batch_goes_without_waiting_and_versions_never_mix():
    spec = ModelSpec("wdl", k=2, fields=("a", "b"), hidden=(8,))
    rng = np.random.default_rng(1)
    dense_a = {"bias": np.zeros(1, np.float32)} | {n: rng.normal(size=s).astype(np.float32) for n, s in spec.mlp_shapes()}
    dense_b = {"bias": np.zeros(1, np.float32)} | {n: rng.normal(size=s).astype(np.float32) for n, s in spec.mlp_shapes()}
    batcher = DynamicBatcher(max_wait_s=5.0, max_items=4)
    a, b = DeepScorer(spec, dense_a, batcher), DeepScorer(spec, dense_b, batcher)
    pooled = rng.normal(size=(4, 2, 2)).astype(np.float32)
    partial = np.zeros(4, np.float32)
    np.testing.assert_allclose(a.predict(pooled, partial), DeepScorer(spec, dense_a).predict(pooled, partial), atol=1e-4)
    np.testing.assert_allclose(b.predict(pooled, partial), DeepScorer(spec, dense_b).predict(pooled, partial), atol=1e-4)
    batcher.close()
