"""A PS shard killed with -9 comes back from RocksDB at its checkpoint cut."""

from __future__ import annotations

import json

import numpy as np

from boundless.processes import start
from ctr.routing import shard_of
from ps.client import PSClient


def test_checkpointed_rows_survive_kill_9(tmp_path):
    db = tmp_path / "ps0-db"
    shard = start("ps0", ["ps", "--shard-index", "0", "--shard-count", "1", "--data-dir", str(db)], tmp_path)
    try:
        shard.wait_ready()
        client = PSClient.connect([shard.address])
        keys = np.unique(np.random.default_rng(0).integers(1, 2**64 - 1, 5000, dtype=np.uint64))
        assert (shard_of(keys, 1) == 0).all()
        grads = np.random.default_rng(1).normal(size=(keys.shape[0], 1)).astype(np.float32)
        rows, session = client.pull("w", keys)
        client.push("w", keys, grads, session)
        client.push_dense("bias", np.array([0.7], np.float32))
        client.checkpoint(json.dumps({"file": "a", "offset": 123, "line": 4}).encode())
        at_cut, _ = client.pull("w", keys)
        bias_at_cut = client.pull_dense("bias")
        client.push("w", keys[:100], grads[:100])  # after the cut: must not survive the crash
        client.close()
        shard.kill()

        shard = start("ps0", ["ps", "--shard-index", "0", "--shard-count", "1", "--data-dir", str(db)], tmp_path)
        assert shard.wait_ready()["restored_rows"] == keys.shape[0]
        client = PSClient.connect([shard.address])
        after, _ = client.pull("w", keys)
        np.testing.assert_array_equal(after, at_cut)
        np.testing.assert_array_equal(client.pull_dense("bias"), bias_at_cut)
        status = client.status()[0]
        assert json.loads(status.checkpoint_offsets) == {"file": "a", "offset": 123, "line": 4}
        client.close()
    finally:
        shard.stop()
