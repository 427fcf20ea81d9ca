"""A batch's calls to different tables run at once over remote shards
(PSClient.concurrently): their round trips overlap, none is left in flight when one fails,
and a push of several tables at once leaves the shards as pushes in turn do, compressors
seeded the same whichever table came first."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from ctr.model.optim import OptimizerSpec
from ctr.model.spec import TableSpec
from ps.api import DELTA
from ps.client import PSClient
from ps.server.local_transport import LocalTransport
from ps.server.shard import Shard

TABLES = [
    TableSpec("w", "sparse", 1, OptimizerSpec("ftrl", lr=0.05), "example"),
    TableSpec("v", "sparse", 4, OptimizerSpec("adagrad", lr=0.1), "example"),
    TableSpec("bias", "dense", 1, OptimizerSpec("ftrl", lr=0.5), "example"),
]


class Remote(LocalTransport):
    remote = True  # as a gRPC transport says: calls cross a network


def _client(remote: bool, codec: str = "none") -> tuple[PSClient, list[Shard]]:
    shards = [Shard(i, 2) for i in range(2)]
    client = PSClient((Remote if remote else LocalTransport)(shards), 2, push_codec=codec)
    client.control.declare(TABLES)
    return client, shards


@pytest.mark.parametrize("remote", [True, False])
def test_remote_calls_overlap_and_in_process_ones_run_in_turn(remote: bool) -> None:
    client, _ = _client(remote)
    running, most = [0], [0]
    lock = threading.Lock()

    def call(i: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return i

    assert client.concurrently(*(lambda i=i: call(i) for i in range(3))) == [0, 1, 2]  # in the calls' order
    assert most[0] == (3 if remote else 1)
    client.close()


def test_a_failing_call_is_raised_after_the_others_have_ended() -> None:
    client, _ = _client(True)
    ended = threading.Event()

    def slow() -> None:
        time.sleep(0.2)
        ended.set()

    def fails() -> None:
        raise RuntimeError("shard 1 refused")

    with pytest.raises(RuntimeError, match="shard 1 refused"):
        client.concurrently(fails, slow)
    assert ended.is_set()  # nothing of the batch is still in flight when the error is seen
    client.close()


def _push_all(client: PSClient, rng: np.random.Generator, together: bool) -> None:
    keys = np.sort(rng.choice(10_000, 600, replace=False).astype(np.uint64) + 1)
    w = np.column_stack([rng.normal(size=600) * 0.1, np.abs(rng.normal(size=600))])
    v = np.column_stack([rng.normal(size=(600, 4)) * 0.1, np.abs(rng.normal(size=(600, 4)))])
    calls = [
        lambda: client.push("w", keys, w, kind=DELTA, samples=1),
        lambda: client.push("v", keys, v, kind=DELTA, samples=1),
        lambda: client.push_dense("bias", np.array([[0.01, 0.2]]), kind=DELTA, samples=1),
    ]
    if together:
        client.concurrently(*calls)
    else:
        for c in reversed(calls):  # another first table: the compressors' seeds must not depend on it
            c()


def test_pushing_tables_at_once_leaves_what_pushing_them_in_turn_leaves() -> None:
    held = []
    for together in (True, False):
        client, shards = _client(True, codec="int8")  # stochastic rounding, by each table's seed
        rng = np.random.default_rng(7)
        for _ in range(5):
            _push_all(client, rng, together)
        reader = PSClient(LocalTransport(shards), 2)
        keys = np.arange(1, 10_001, dtype=np.uint64)
        held.append([reader.pull(t, keys, session=False, state=True)[0] for t in ("w", "v")])
        held[-1].append(reader.pull_dense("bias", state=True))
        client.close()
    for a, b in zip(*held, strict=True):
        np.testing.assert_array_equal(a, b)
