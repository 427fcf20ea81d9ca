"""The MLP of wdl and deepfm on a CUDA device (serving.scoring.mlp_cuda): eager, replayed CUDA
graphs and the dynamic batcher all give the CPU path's scores to 1e-4, for batch sizes on
and off the captured sizes and past the device's capacity. Skipped without CUDA; the
bucket arithmetic is tested everywhere."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from ctr.model.spec import ModelSpec
from serving.scoring.batcher import DynamicBatcher
from serving.scoring.mlp import DeepScorer
from serving.scoring.mlp_cuda import SMALLEST_BUCKET, bucket_for, bucket_sizes

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_bucket_sizes_are_powers_of_two_up_to_the_first_that_holds_the_capacity():
    assert bucket_sizes(1) == [SMALLEST_BUCKET]
    assert bucket_sizes(16384) == [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    assert bucket_sizes(1000)[-1] == 1024
    sizes = bucket_sizes(5000)
    for n in (1, 63, 64, 65, 1000, 4096, 4097, 8192):
        b = bucket_for(n, sizes)
        assert b >= n and (b == SMALLEST_BUCKET or b // 2 < n)
    with pytest.raises(ValueError, match="exceed"):
        bucket_for(8193, sizes)


def _model(kind: str, fields: int, k: int, hidden: tuple[int, ...], seed: int) -> tuple[ModelSpec, dict[str, np.ndarray]]:
    spec = ModelSpec(kind, k=k, fields=tuple(f"f{i}" for i in range(fields)), hidden=hidden)
    rng = np.random.default_rng(seed)
    dense = {"bias": np.zeros(1, np.float32)} | {n: rng.normal(0, 0.2, size=s).astype(np.float32) for n, s in spec.mlp_shapes()}
    return spec, dense


@cuda
@pytest.mark.parametrize(("kind", "fields", "k", "hidden"), [("deepfm", 6, 4, (32, 16)), ("wdl", 60, 8, (256, 128))])
def test_gpu_scores_equal_the_cpu_path(kind: str, fields: int, k: int, hidden: tuple[int, ...]) -> None:
    spec, dense = _model(kind, fields, k, hidden, seed=fields)
    cpu = DeepScorer(spec, dense, on=torch.device("cpu"))
    graphed = DeepScorer(spec, dense, cuda_graphs=True, capacity=8192)  # 5000 items: two chunks of one pass
    eager = DeepScorer(spec, dense, cuda_graphs=False, capacity=1024)
    assert graphed.cuda is not None and graphed.cuda.graphs and eager.cuda is not None and not eager.cuda.graphs
    rng = np.random.default_rng(7)
    for n in (1000, 1, 63, 64, 65, 200, 1024, 3, 5000, 9000, 2):  # shrinking sizes leave stale padded rows behind
        pooled = rng.normal(0, 1, size=(n, fields, k)).astype(np.float32)
        partial = rng.normal(0, 1, size=n).astype(np.float32)
        want = cpu.predict(pooled, partial)
        for scorer in (graphed, eager):
            got = scorer.predict(pooled, partial)
            assert got.shape == (n,) and np.isfinite(got).all()
            np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


@cuda
def test_concurrent_requests_batched_on_the_gpu_score_as_alone_on_the_cpu():
    spec, dense = _model("deepfm", 20, 8, (64, 32), seed=3)
    cpu = DeepScorer(spec, dense, on=torch.device("cpu"))
    batcher = DynamicBatcher(max_wait_s=0.02, max_items=2048)
    gpu = DeepScorer(spec, dense, batcher, cuda_graphs=True, capacity=2048)
    other = DeepScorer(spec, _model("deepfm", 20, 8, (64, 32), seed=4)[1], batcher, capacity=2048)  # another version
    rng = np.random.default_rng(0)
    sizes = (1, 7, 200, 900, 90, 1500)
    jobs = [(rng.normal(size=(n, 20, 8)).astype(np.float32), rng.normal(size=n).astype(np.float32)) for n in sizes]
    got: dict[int, np.ndarray] = {}
    start = threading.Barrier(len(jobs))

    def run(i: int) -> None:
        start.wait()
        got[i] = (gpu if i % 3 else other).predict(*jobs[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    ref_other = DeepScorer(spec, _model("deepfm", 20, 8, (64, 32), seed=4)[1], on=torch.device("cpu"))
    for i, (pooled, partial) in enumerate(jobs):
        want = (cpu if i % 3 else ref_other).predict(pooled, partial)
        np.testing.assert_allclose(got[i], want, atol=1e-4, rtol=0)
    assert batcher.items == sum(p.shape[0] for p, _ in jobs) and batcher.batches < len(jobs)
    batcher.close()
