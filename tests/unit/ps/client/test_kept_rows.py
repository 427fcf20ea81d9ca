"""Rows a client keeps between pulls (docs/design/pull-cache.md): what a kept pull returns is
always what the shards hold, whoever else writes, and a row a client holds does not travel."""

from __future__ import annotations

import numpy as np
import pytest

from ctr.model.optim import OptimizerSpec
from ctr.model.spec import TableSpec
from ps.api import DELTA, Lifecycle
from ps.client import PSClient
from ps.server.local_transport import LocalTransport
from ps.server.shard import Shard

FTRL = TableSpec("w", "sparse", 1, OptimizerSpec("ftrl", lr=0.05), "example")
ADAGRAD_V = TableSpec("v", "sparse", 4, OptimizerSpec("adagrad", lr=0.05, init_std=0.01), "example")


def _shards(n: int = 2, lifecycle: Lifecycle | None = None, lease_s: float = 1.0, quiet_s: float | None = None) -> list[Shard]:
    """quiet_s: how long a client must have written a table alone before a write lease (None:
    two leases; 0: at once, so that a short test sees leases)."""
    return [Shard(i, n, lifecycle=lifecycle, lease_s=lease_s, lease_quiet_s=quiet_s) for i in range(n)]


def _client(shards: list[Shard], keep: bool, push_codec: str = "auto", seed: int = 0) -> PSClient:
    client = PSClient(LocalTransport(shards), len(shards), push_codec=push_codec, seed=seed)
    client.control.declare([FTRL, ADAGRAD_V])
    if keep:
        client.keep_rows()
    return client


def _truth(shards: list[Shard], table: str, keys: np.ndarray) -> np.ndarray:
    """The rows as the shards hold them, read without any client's copy."""
    reader = PSClient(LocalTransport(shards), len(shards))
    rows, _ = reader.pull(table, keys, session=False, state=True)
    return rows


def _keys(rng: np.random.Generator, pool: np.ndarray, n: int) -> np.ndarray:
    return np.unique(rng.choice(pool, size=n))


@pytest.mark.parametrize("table", ["w", "v"])
def test_one_client_keeps_bit_identical_rows_and_sends_each_row_once(table: str) -> None:
    rng = np.random.default_rng(1)
    pool = np.unique(rng.integers(1, 1 << 40, size=300, dtype=np.uint64))
    kept_shards, plain_shards = _shards(quiet_s=0.0), _shards()
    kept, plain = _client(kept_shards, keep=True), _client(plain_shards, keep=False)
    width = (FTRL if table == "w" else ADAGRAD_V).width
    for _ in range(30):
        keys = _keys(rng, pool, 80)
        a, sa = kept.pull(table, keys, state=True)
        b, sb = plain.pull(table, keys, state=True)
        np.testing.assert_array_equal(a, b)  # bit for bit: the copy follows the shard's arithmetic
        delta = rng.normal(size=(keys.shape[0], width)) * 0.1
        delta[:, -1] = np.abs(delta[:, -1])  # accumulators grow
        kept.push(table, keys, delta, sa, kind=DELTA, samples=1)
        plain.push(table, keys, delta, sb, kind=DELTA, samples=1)
    np.testing.assert_array_equal(_truth(kept_shards, table, pool), _truth(plain_shards, table, pool))
    stats = kept.compression_stats()
    assert stats["kept_rows_changed"] == 0  # nobody else wrote
    assert stats["rows_pulled"] <= 300  # each row's values travelled at most once (after it was stored)
    # held rows go as ids, or not at all while a write lease holds (write-leases.md)
    assert stats["kept_rows_sent_as_ids"] + stats["rows_leased"] > 1000
    assert stats["pulls_leased"] > 0
    assert kept.wire.total(("sparse_pull",)) < plain.wire.total(("sparse_pull",)) / 3


@pytest.mark.parametrize("codec", ["auto", "onebit"])
def test_a_pull_never_returns_a_row_older_than_another_clients_acknowledged_push(codec: str) -> None:
    rng = np.random.default_rng(2)
    pool = np.unique(rng.integers(1, 1 << 40, size=60, dtype=np.uint64))  # few keys: the clients collide often
    shards = _shards()
    clients = [_client(shards, keep=True, push_codec=codec, seed=i) for i in range(3)]
    for _ in range(200):
        c = clients[int(rng.integers(0, 3))]
        keys = _keys(rng, pool, 20)
        rows, session = c.pull("w", keys, state=True)
        np.testing.assert_array_equal(rows, _truth(shards, "w", keys))
        if rng.random() < 0.8:
            delta = rng.normal(size=(keys.shape[0], FTRL.width)) * 0.1
            delta[:, 1] = np.abs(delta[:, 1])
            c.push("w", keys, delta, session if rng.random() < 0.7 else None, kind=DELTA, samples=1)
        if rng.random() < 0.1:
            c.drain_residuals("cut")
    assert sum(c.compression_stats()["kept_rows_changed"] for c in clients) > 0
    assert sum(c.compression_stats()["kept_rows_stale"] for c in clients) > 0  # dropped copies asked for by id


def test_a_push_between_a_pull_and_its_push_is_seen_as_a_conflict() -> None:
    shards = _shards(1)
    a, b = _client(shards, keep=True, seed=1), _client(shards, keep=True, seed=2)
    keys = np.array([5, 9, 17], dtype=np.uint64)
    ones = np.tile([0.1, 1.0], (3, 1))
    for c in (a, b):  # both hold the rows
        rows, s = c.pull("w", keys, state=True)
        c.push("w", keys, ones, s, kind=DELTA)
    rows, sa = a.pull("w", keys, state=True)
    rows_b, sb = b.pull("w", keys[:1], state=True)
    b.push("w", keys[:1], ones[:1], sb, kind=DELTA)  # lands between a's pull and a's push
    a.push("w", keys, ones, sa, kind=DELTA)
    sent_as_ids, stale = a.cache.counts["kept_rows_sent_as_ids"], a.cache.counts["kept_rows_stale"]
    got, _ = a.pull("w", keys, state=True)
    np.testing.assert_array_equal(got, _truth(shards, "w", keys))
    np.testing.assert_allclose(got[:, 1], [4.0, 3.0, 3.0])  # two pushes each, b one more on key 5
    # a dropped its copy of key 5 but still knew its row id: it asked for the row by id
    assert a.cache.counts["kept_rows_sent_as_ids"] - sent_as_ids == 3
    assert a.cache.counts["kept_rows_stale"] - stale == 1


def test_rows_evicted_on_a_shard_are_pulled_again_by_key() -> None:
    shards = _shards(1, Lifecycle(max_rows=40))
    client = _client(shards, keep=True)
    rng = np.random.default_rng(3)
    pool = np.unique(rng.integers(1, 1 << 40, size=200, dtype=np.uint64))
    for _ in range(40):
        keys = _keys(rng, pool, 30)
        rows, session = client.pull("w", keys, state=True)
        np.testing.assert_array_equal(rows, _truth(shards, "w", keys))
        client.push("w", keys, np.tile([0.01, 0.5], (keys.shape[0], 1)), session, kind=DELTA)


def test_a_write_lease_skips_pulls_and_another_writer_waits_for_it() -> None:
    """docs/design/write-leases.md: a client alone on a table reads the rows it holds from
    its copies; another client's push waits until that lease has run out, and the holder's
    next pull then brings the row it changed."""
    shards = _shards(1, quiet_s=0.0)  # 1 s leases: a stall between two rounds does not end one
    a, b = _client(shards, keep=True, seed=1), _client(shards, keep=True, seed=2)
    keys = np.arange(10, 60, dtype=np.uint64)
    for _ in range(4):
        rows, session = a.pull("w", keys, state=True)
        np.testing.assert_array_equal(rows, _truth(shards, "w", keys))
        a.push("w", keys, np.tile([0.01, 0.5], (keys.shape[0], 1)), session, kind=DELTA)
    leased = a.cache.counts["pulls_leased"]
    assert leased >= 2  # every pull after the first push's reply
    rows_b, sb = b.pull("w", keys[:5], state=True)
    b.push("w", keys[:5], np.tile([0.2, 1.0], (5, 1)), sb, kind=DELTA)  # acknowledged after a's lease ended
    assert shards[0].leases.waits == 1
    rows, _ = a.pull("w", keys, state=True)
    np.testing.assert_array_equal(rows, _truth(shards, "w", keys))
    np.testing.assert_allclose(rows[:5, 1], 4 * 0.5 + 1.0)
    assert a.cache.counts["pulls_leased"] == leased  # that pull went to the shard


def test_a_shard_that_evicts_grants_no_lease_and_every_pull_reads_its_rows() -> None:
    """Rows the client holds leave the shard (a row cap evicts the least recently updated)
    and come back in the next batch: under a lease that batch would read them from copies of
    rows the shard no longer holds. Evictions happen at update counts, the same whenever a
    shard died (exactly once), so such a shard grants no lease rather than hold them back."""
    shards = _shards(1, Lifecycle(max_rows=40), quiet_s=0.0)
    client = _client(shards, keep=True)
    hot, held = np.arange(1, 31, dtype=np.uint64), np.arange(100, 110, dtype=np.uint64)
    for new in range(5):
        batches = [np.union1d(hot, held)] * 4  # 40 rows: a lease would serve these from copies
        batches.append(np.union1d(hot, np.arange(1000 * (new + 1), 1000 * (new + 1) + 5, dtype=np.uint64)))
        for keys in batches:  # the last one passes the cap: `held`, updated least recently, goes
            rows, session = client.pull("w", keys, state=True)
            np.testing.assert_array_equal(rows, _truth(shards, "w", keys))
            client.push("w", keys, np.tile([0.01, 0.5], (keys.shape[0], 1)), session, kind=DELTA)
    assert shards[0].rows.evicted.get("w", 0) > 0
    assert client.cache.counts["pulls_leased"] == 0


def test_a_client_past_its_row_bound_starts_over_and_stays_exact() -> None:
    shards = _shards()
    client = _client(shards, keep=False)
    client.keep_rows(max_rows=50)
    rng = np.random.default_rng(4)
    pool = np.unique(rng.integers(1, 1 << 40, size=400, dtype=np.uint64))
    for _ in range(20):
        keys = _keys(rng, pool, 60)
        rows, session = client.pull("w", keys, state=True)
        np.testing.assert_array_equal(rows, _truth(shards, "w", keys))
        client.push("w", keys, np.tile([0.01, 0.5], (keys.shape[0], 1)), session, kind=DELTA)
    assert client.compression_stats()["kept_restarts"] > 0


def test_absent_keys_do_not_travel_and_read_as_the_shards_initial_rows() -> None:
    shards = _shards()
    client = _client(shards, keep=True)
    keys = np.array([3, 8, 1 << 33, 1 << 50], dtype=np.uint64)
    rows, _ = client.pull("v", keys, state=True)
    np.testing.assert_array_equal(rows, _truth(shards, "v", keys))
    assert client.compression_stats()["initial_rows_made"] == 4
    assert client.compression_stats()["rows_pulled"] == 0


def test_pulls_that_overlap_the_last_push_keep_exact_rows_and_rows_travel_once() -> None:
    """The trainer's pipeline pulls batch i+1 before batch i's push lands."""
    rng = np.random.default_rng(5)
    pool = np.unique(rng.integers(1, 1 << 40, size=120, dtype=np.uint64))
    shards = _shards()
    client = _client(shards, keep=True)
    waiting = None  # the batch pulled and not pushed yet
    for _ in range(40):
        keys = _keys(rng, pool, 60)
        rows, session = client.pull("w", keys, state=True)
        np.testing.assert_array_equal(rows, _truth(shards, "w", keys))
        if waiting is not None:
            client.push("w", *waiting, kind=DELTA)
        waiting = (keys, np.tile([0.01, 0.5], (keys.shape[0], 1)), session)
    stats = client.compression_stats()
    assert stats["rows_pulled"] <= pool.shape[0] // 4, stats  # kept from their first push's reply on


def _one_bit_pushes(client: PSClient, keys: np.ndarray, rounds: int) -> np.ndarray:
    """Rounds of FTRL deltas pushed in 1 bit (residuals owed); returns their sum."""
    rng = np.random.default_rng(6)
    total = np.zeros((keys.shape[0], FTRL.width))
    for _ in range(rounds):
        delta = rng.normal(size=(keys.shape[0], FTRL.width)) * 0.1
        delta[:, 1] = np.abs(delta[:, 1])
        total += delta
        _, session = client.pull("w", keys, state=True)
        client.push("w", keys, delta, session, kind=DELTA)
    return total


def test_drained_rows_go_by_row_id_and_land_as_their_keys_would() -> None:
    """A drain names no pull session: the rows whose ids the client keeps go by id (a bit
    each, dense), the others by key, and the shards end bit for bit as with keys only."""
    keys = np.unique(np.random.default_rng(7).integers(1, 1 << 62, size=3000, dtype=np.uint64))  # hashed keys
    by_id, by_key = _shards(), _shards()
    a, b = _client(by_id, keep=True, push_codec="onebit"), _client(by_key, keep=False, push_codec="onebit")
    total = _one_bit_pushes(a, keys, 4)
    _one_bit_pushes(b, keys, 4)
    extra = np.arange(5001, 5101, dtype=np.uint64)  # rows only pushed without a session: ids unknown
    for c in (a, b):
        c.push("w", extra, np.tile([0.01, 0.5], (extra.shape[0], 1)), None, kind=DELTA)
    drained = {}
    as_ids = a.compression_stats()["rows_pushed_as_ids"]  # the pushes a write lease sent by id
    for name, c in (("id", a), ("key", b)):
        c.drain_residuals("end")
        drained[name] = c.wire.total(("drain_end",))
    np.testing.assert_array_equal(_truth(by_id, "w", keys), _truth(by_key, "w", keys))
    np.testing.assert_array_equal(_truth(by_id, "w", extra), _truth(by_key, "w", extra))
    np.testing.assert_allclose(_truth(by_id, "w", keys), total, rtol=0, atol=1e-9)  # every update, once
    assert a.compression_stats()["rows_pushed_as_ids"] - as_ids == keys.shape[0]  # the extra rows went by key
    assert drained["id"] < drained["key"] - 6 * keys.shape[0]  # an id costs a bit here, a hashed key 7-8 bytes


def test_a_drain_to_a_shard_whose_rows_moved_sends_the_keys() -> None:
    shards = _shards(1)
    other = _client(shards, keep=False)
    other.push("w", np.array([7], dtype=np.uint64), np.array([[0.1, 1.0]]), None, kind=DELTA)  # row 0
    client = _client(shards, keep=True, push_codec="onebit")
    keys = np.arange(100, 600, dtype=np.uint64)
    total = _one_bit_pushes(client, keys, 3)
    table = shards[0].sparse["w"]
    table.delete_rows(table.find(np.array([7], dtype=np.uint64)))  # the last row moves into its hole
    client.drain_residuals("end")
    np.testing.assert_allclose(_truth(shards, "w", keys), total, rtol=0, atol=1e-9)
    stats = client.compression_stats()
    assert stats["row_ids_moved"] == 1 and stats["rows_pushed_as_ids"] == 0


def test_a_pull_that_names_no_id_still_learns_that_the_rows_moved() -> None:
    """Rows move on a shard (a delete) while a client holds ids of them; its next pull of a
    shard's keys holds only keys it has never seen, so no id travels and the shard cannot
    answer `stale`: the reply's layout tells the client its other ids are void."""
    shards = _shards(1)
    client = _client(shards, keep=True)
    held = np.arange(100, 160, dtype=np.uint64)
    rows, session = client.pull("w", held, state=True)
    client.push("w", held, np.tile([0.01, 0.5], (held.shape[0], 1)), session, kind=DELTA)
    client.pull("w", held, state=True)  # the ids are known now
    table = shards[0].sparse["w"]
    table.delete_rows(table.find(held[:5]))  # five rows go: the last ones move into their holes
    fresh = np.arange(900, 910, dtype=np.uint64)
    client.pull("w", fresh, state=True)  # names no id
    np.testing.assert_array_equal(client.pull("w", held, state=True)[0], _truth(shards, "w", held))
    before = _truth(shards, "w", held[5:])
    client.push("w", held[5:], np.tile([0.01, 0.5], (55, 1)), None, kind=DELTA)  # no session: by id where trusted
    np.testing.assert_allclose(_truth(shards, "w", held[5:])[:, 1], before[:, 1] + 0.5)  # on these rows, not others
