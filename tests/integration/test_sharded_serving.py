"""Sharded serving with real processes: two serving shards (`serve --shard-index i --shard-count 2`) behind a
router give the scores of one process holding the whole model, for every model type; a
slow replica is hedged around; a dead shard fails the request in time, never hangs. The
whole-model process batches deepfm's MLP (serving.scoring.batcher), the router does not."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest

from bench.serving_model import publish, requests, spec_for
from bench.slow_proxy import SlowProxy
from boundless.processes import Daemon, start
from ctr.repository.versions import Repository
from serving.client import PredictClient


def _ready(d: Daemon) -> None:
    d.wait_ready()
    PredictClient(d.address).wait_for_model()


def _serve(name: str, repo: str | Path, run: Path, *extra: str) -> Daemon:
    return start(name, ["serve", "--repo", str(repo), "--poll-s", "0.2", *extra], run)


@pytest.mark.parametrize("model", ["lr", "fm", "ffm", "wdl", "deepfm"])
def test_two_shards_behind_a_router_score_as_one_process(tmp_path, model):
    spec = spec_for(model, k=4, hidden=(16, 8))
    reqs = requests(3, seed=7, items=20)
    repo = Repository(tmp_path / "repo", "ctr")
    publish(repo, 1, spec, reqs, keys=40_000, shards=4)
    shards = [_serve(f"shard{i}", repo.root, tmp_path, "--shard-index", str(i), "--shard-count", "2") for i in range(2)]
    whole = _serve("whole", repo.root, tmp_path, "--dnn-batching", "on")  # batched MLP on the CPU for wdl, deepfm
    daemons = [*shards, whole]
    try:
        for d in shards:
            _ready(d)
        addresses = ",".join(d.address for d in shards)
        router = _serve("router", repo.root, tmp_path, "--router", "--shard-replicas", addresses, "--fanout-deadline-ms", "10000")
        daemons.append(router)
        _ready(router)
        _ready(whole)
        # the first sharded request compiles the shard and router paths' kernels, which
        # warm_kernels does not run: on a fresh install under the suite's load, past 10 s once
        one, sharded = PredictClient(whole.address, timeout=120), PredictClient(router.address, timeout=120)
        for r in reqs:
            a, b = one.predict_encoded(r), sharded.predict_encoded(r)
            assert a.version == b.version == 1
            np.testing.assert_allclose(b.scores, a.scores, atol=1e-5)
        with pytest.raises(grpc.RpcError) as e:  # a shard alone cannot score
            PredictClient(shards[0].address).predict_encoded(reqs[0])
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        for d in daemons:
            d.stop()


def test_a_slow_replica_is_hedged_and_a_dead_shard_fails_in_time(tmp_path):
    spec = spec_for("lr", k=4, hidden=())
    reqs = requests(2, seed=3, items=20)
    repo = Repository(tmp_path / "repo", "ctr")
    publish(repo, 1, spec, reqs, keys=20_000, shards=2)

    def part(i: int) -> list[str]:
        return ["--shard-index", str(i), "--shard-count", "2"]

    replicas = [[_serve(f"shard{i}-{r}", repo.root, tmp_path, *part(i)) for r in range(2)] for i in range(2)]
    daemons = [d for pair in replicas for d in pair]
    proxy = None
    try:
        for d in daemons:
            _ready(d)
        # shard 0's first replica answers 3 s late, past the router's 2 s fan-out deadline:
        # a call that waited for it would fail, so every success below was hedged
        proxy = SlowProxy(replicas[0][0].address, 3.0)
        shards = f"{proxy.address}|{replicas[0][1].address},{replicas[1][0].address}|{replicas[1][1].address}"
        router = _serve("router", repo.root, tmp_path, "--router", "--shard-replicas", shards, "--fanout-deadline-ms", "2000")
        daemons.append(router)
        _ready(router)
        client = PredictClient(router.address)
        for i in range(4):  # the first calls load every replica's kernels: not what is timed
            client.predict_encoded(reqs[i % 2])
        for i in range(12):  # each succeeds only by a hedge: the slow replica answers past the deadline
            assert client.predict_encoded(reqs[i % 2]).version == 1
        for d in replicas[1]:
            d.kill()  # shard 1 is gone: every request fails within the deadline, none hangs
        with pytest.raises(grpc.RpcError) as e:  # the router answers, within its deadline (pytest-timeout guards a hang)
            client.predict_encoded(reqs[0])
        assert e.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    finally:
        if proxy is not None:
            proxy.close()
        for d in daemons:
            d.stop()
