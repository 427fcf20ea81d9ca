"""`--push-codec auto` (docs/design/auto-codec.md): uncompressed in-process; over a network,
1-bit state deltas on each table while they carry at most half of fp64's bytes, judged at
each checkpoint cut, and back to fp64 (then tried again later) where they do not. Whatever
it chooses, the shards hold every update exactly after each cut."""

from __future__ import annotations

import numpy as np

from ctr.model.optim import OptimizerSpec
from ctr.model.spec import TableSpec
from ps.api import DELTA
from ps.client import PSClient
from ps.client.push_compression import AUTO_BACKOFF, AUTO_MIN_ROWS
from ps.server.local_transport import LocalTransport
from ps.server.shard import Shard

FTRL = TableSpec("w", "sparse", 1, OptimizerSpec("ftrl", lr=0.05), "example")


class Remote(LocalTransport):
    remote = True  # as a gRPC transport says: calls cross a network


def _client(remote: bool = True, codec: str = "auto") -> tuple[PSClient, list[Shard]]:
    shards = [Shard(i, 2) for i in range(2)]
    client = PSClient((Remote if remote else LocalTransport)(shards), 2, push_codec=codec)
    client.control.declare([FTRL])
    return client, shards


def _held(shards: list[Shard], keys: np.ndarray) -> np.ndarray:
    reader = PSClient(LocalTransport(shards), 2)
    rows, _ = reader.pull("w", np.sort(keys), session=False, state=True)
    return rows


def _push_window(client: PSClient, keys: np.ndarray, times: int, truth: dict[int, np.ndarray], rng) -> None:
    """Pushes each key `times` times in batches of at most 1,000 keys, then cuts."""
    for _ in range(times):
        for start in range(0, keys.shape[0], 1000):
            part = np.sort(keys[start : start + 1000])
            delta = np.column_stack([rng.normal(size=part.shape[0]) * 0.1, np.abs(rng.normal(size=part.shape[0]))])
            client.push("w", part, delta, kind=DELTA, samples=1)
            for k, row in zip(part.tolist(), delta, strict=True):
                truth[k] = truth.get(k, 0.0) + row
    client.flush_residuals("cut")


def _exact(shards: list[Shard], truth: dict[int, np.ndarray]) -> None:
    keys = np.array(sorted(truth), dtype=np.uint64)
    np.testing.assert_allclose(_held(shards, keys), np.array([truth[k] for k in keys.tolist()]), rtol=1e-12, atol=1e-12)


def test_auto_is_uncompressed_in_process_and_with_none() -> None:
    for remote, codec in ((False, "auto"), (True, "none")):
        client, _ = _client(remote, codec)
        client.push("w", np.array([3], dtype=np.uint64), np.array([[0.1, 1.0]]), kind=DELTA)
        assert client.codecs()["push:w"] == "fp64" and "auto:w" not in client.codecs()


def test_rows_pushed_many_times_between_cuts_stay_onebit() -> None:
    rng = np.random.default_rng(0)
    client, shards = _client()
    truth: dict[int, np.ndarray] = {}
    hot = np.unique(rng.integers(1, 1 << 40, size=200, dtype=np.uint64))
    for _ in range(3):
        _push_window(client, hot, AUTO_MIN_ROWS // hot.shape[0] + 1, truth, rng)
        _exact(shards, truth)
    codecs = client.codecs()
    assert codecs["push:w"] == "onebit", codecs
    assert codecs["auto:w"].startswith("onebit: ") and "fewer value bytes" in codecs["auto:w"], codecs
    assert client.compression.choices["w"].ratio > 8  # 1-bit signs: far under half of fp64's bytes
    assert client.compression_stats()["auto_switches"] == 0


def test_rows_pushed_once_between_cuts_go_back_to_fp64_and_onebit_is_tried_again() -> None:
    rng = np.random.default_rng(1)
    client, shards = _client()
    truth: dict[int, np.ndarray] = {}
    fresh = iter(range(1, 1 << 30, 1))

    def window() -> None:
        keys = np.array([next(fresh) for _ in range(AUTO_MIN_ROWS + 500)], dtype=np.uint64)
        _push_window(client, keys, 1, truth, rng)  # a long tail: each row once, its residual drained at the cut
        _exact(shards, truth)

    window()
    choice = client.compression.choices["w"]
    assert client.codecs()["push:w"] == "fp64" and not choice.compress
    assert 0 < choice.ratio < 2  # the cut's exact drain costs what fp64 pushes would have
    assert "trying it again in" in client.codecs()["auto:w"]
    for _ in range(AUTO_BACKOFF[0]):  # waits its backoff under fp64, exact all along
        assert client.codecs()["push:w"] == "fp64"
        window()
    assert client.codecs()["push:w"] == "onebit"  # tried again
    window()  # fails again: the wait doubles
    assert client.codecs()["push:w"] == "fp64" and choice.wait == 2 * AUTO_BACKOFF[0]
    assert client.compression_stats()["auto_switches"] == 3
