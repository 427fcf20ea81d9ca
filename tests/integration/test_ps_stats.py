"""`boundless ps stats`: per-table digests and samples of running shards; the same model
held by one shard or split over two has the same digest."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from boundless.processes import start
from ctr.model.spec import ModelSpec
from ps.api import DELTA
from ps.client import PSClient

SPEC = ModelSpec("fm", k=4)


def _train(client: PSClient, shift: float = 0.0) -> None:
    """Two deterministic batches of 100 samples each."""
    client.control.declare(SPEC.tables())
    rng = np.random.default_rng(0)
    for _ in range(2):
        keys = np.unique(rng.integers(1, 2**64 - 1, 3000, dtype=np.uint64))
        grads = rng.normal(size=(keys.shape[0], 4)).astype(np.float32) + np.float32(shift)
        _, session = client.pull("v", keys)
        client.push("v", keys, grads, session, samples=100)
        state, session = client.pull("w", keys, state=True)
        client.push("w", keys, np.full_like(state, 0.01), session, kind=DELTA, samples=100)
        client.push_dense("bias", np.array([0.5], np.float32), samples=100)


def _stats(addresses: list[str], *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "boundless", "ps", "stats", ",".join(addresses), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_one_shard_and_two_shards_holding_one_model_have_one_digest(tmp_path):
    layouts = [(n, i) for n in (1, 2) for i in range(n)]
    shards = [start(f"ps{n}{i}", ["ps", "--shard-index", str(i), "--shard-count", str(n)], tmp_path) for n, i in layouts]
    try:
        for s in shards:
            s.wait_ready()
        one, two = [shards[0].address], [shards[1].address, shards[2].address]
        for addresses in (one, two):
            client = PSClient.connect(addresses)
            _train(client)
            client.close()
        a, b = (json.loads(p.stdout) for p in (_stats(one, "--json"), _stats(two, "--json")))
        for name in ("w", "v", "bias"):
            assert a["tables"][name]["digest"] == b["tables"][name]["digest"], name
            assert a["tables"][name]["rows"] == b["tables"][name]["rows"] > 0
        assert a["tables"]["v"]["samples"] == [200] and b["tables"]["v"]["samples"] == [200, 200]
        assert a["tables"]["bias"]["samples"] == [200] and max(b["tables"]["bias"]["samples"]) == 200
        assert [s["shard_index"] for s in b["shards"]] == [0, 1]

        client = PSClient.connect(one)
        client.push_dense("bias", np.array([1e-6], np.float32))  # one tiny step more
        client.close()
        again = json.loads(_stats(one, "--json").stdout)
        assert again["tables"]["bias"]["digest"] != a["tables"]["bias"]["digest"]
        assert again["tables"]["v"]["digest"] == a["tables"]["v"]["digest"]

        text = _stats(two)
        assert text.returncode == 0 and "model (all shards):" in text.stdout and b["tables"]["v"]["digest"] in text.stdout
        shards[0].stop()
        down = _stats(one)
        assert down.returncode != 0 and f"shard {one[0]}: UNAVAILABLE" in down.stderr
    finally:
        for s in shards:
            s.stop()
