"""Hierarchical push (ps.client.local_aggregate): the sum kernel against numpy, the merge of
several workers' pushes and their sessions, the shard's union of sessions, and the round
protocol between threads standing for worker processes (a real barrier, real shared
memory)."""

from __future__ import annotations

import multiprocessing as mp
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctr.model.spec import ModelSpec
from ctr.routing import shard_of
from ps.client.local_aggregate import AggregationPlan, LocalAggregator, merge_pushes, sum_rows
from ps.client.push_path import PushBatch
from ps.server.shard import SessionExpired, Shard, ShardError


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 40), st.integers(0, 200), st.integers(1, 5), st.integers(0, 2**31))
def test_sum_rows_equals_numpy_add_at(count, n, cols, seed):
    rng = np.random.default_rng(seed)
    inverse = rng.integers(0, count, n).astype(np.int64)
    rows = rng.normal(size=(n, cols))
    expected = np.zeros((count, cols))
    np.add.at(expected, inverse, rows)
    np.testing.assert_allclose(sum_rows(inverse, rows, count), expected, rtol=1e-12, atol=1e-12)


def test_merge_names_every_session_only_where_all_parts_have_one():
    a = np.array([11, 12, 13, 14, 15, 16], dtype=np.uint64)
    b = np.array([13, 14, 17, 18, 19, 20], dtype=np.uint64)
    keys, rows, targets = merge_pushes(
        [(a, np.ones((6, 2)), np.array([5, 6], np.uint64)), (b, np.full((6, 2), 2.0), np.array([7, 0], np.uint64))], 2
    )
    np.testing.assert_array_equal(keys, np.union1d(a, b))
    np.testing.assert_array_equal(rows[:, 0], [3.0 if k in (13, 14) else 1.0 if k in a else 2.0 for k in keys])
    owner_a, owner_b = set(shard_of(a, 2).tolist()), set(shard_of(b, 2).tolist())
    for s in range(2):
        named = [sid for sid, owners in ((5 if s == 0 else 6, owner_a), (7 if s == 0 else 0, owner_b)) if s in owners]
        assert targets[s] == (() if 0 in named else tuple(named))


def test_a_push_may_name_several_sessions_and_the_shard_takes_their_union():
    s = Shard(0, 1)
    s.declare(ModelSpec("lr", fields=("a",)).tables())
    a, b = np.array([3, 9, 12], dtype=np.uint64), np.array([9, 40], dtype=np.uint64)
    sa, _ = s.pull("w", a, open_session=True)
    sb, _ = s.pull("w", b, open_session=True)
    np.testing.assert_array_equal(s.session("w", [sa, sb]).keys, [3, 9, 12, 40])
    with pytest.raises(SessionExpired):  # each session is used once
        s.session("w", [sa])
    sc, _ = s.pull("w", a, open_session=True)
    with pytest.raises(ShardError, match="opened on table 'w'"):
        s.session("bias", [sc])


Send = Callable[[PushBatch], tuple[np.ndarray, np.ndarray | None]]


def _batch(keys: np.ndarray, rows: np.ndarray, sessions: tuple[int, int], kind: str, samples: int = 0) -> PushBatch:
    """One worker's push of table w, naming a pull session per shard (0: none)."""
    return PushBatch("w", keys, rows, tuple((sid,) if sid else () for sid in sessions), kind, samples)


def _run(workers: int, jobs: list[Callable[[LocalAggregator], None]], send: Send, slot_bytes: int = 1 << 20) -> list[Any]:
    """Runs job i on aggregator i in its own thread; returns each job's exception or None."""
    plan = AggregationPlan.create(mp.get_context("fork"), workers, 2, slot_bytes, wait_s=0.005)
    aggs = [LocalAggregator(plan, i, send, residual_rows=1000) for i in range(workers)]
    errors: list[Any] = [None] * workers

    def one(i: int) -> None:
        try:
            jobs[i](aggs[i])
        except Exception as e:  # noqa: BLE001 - the test inspects it
            errors[i] = e
        finally:
            try:
                aggs[i].leave()
            except RuntimeError as e:
                errors[i] = errors[i] or e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a round never ended"
    plan.release()
    return errors


def test_every_pushed_row_reaches_the_leader_summed_even_across_chunks():
    rng = np.random.default_rng(3)
    sent: list[tuple[np.ndarray, np.ndarray]] = []
    truth: dict[int, np.ndarray] = {}
    pushes = []
    for _ in range(3):  # workers
        mine = []
        for _ in range(4):  # pushes each, of up to 600 rows: slots of 4 KiB hold 170 of them
            keys = np.unique(rng.integers(1, 2000, rng.integers(1, 600)).astype(np.uint64))
            rows = rng.normal(size=(keys.shape[0], 2))
            for k, r in zip(keys.tolist(), rows, strict=True):
                truth[k] = truth.get(k, 0.0) + r
            mine.append((keys, rows))
        pushes.append(mine)

    samples_sent = []

    def send(batch: PushBatch) -> tuple[np.ndarray, np.ndarray | None]:
        assert batch.table == "w" and batch.kind == "delta" and np.all(np.diff(batch.keys.astype(np.int64)) > 0)
        sent.append((batch.keys, batch.rows))
        samples_sent.append(batch.samples)
        return np.zeros(0, np.uint64), None

    def job(i: int) -> Callable[[LocalAggregator], None]:
        def run(agg: LocalAggregator) -> None:
            for keys, rows in pushes[i]:
                agg.push(_batch(keys, rows, (1, 2), "delta", 7))

        return run

    assert _run(3, [job(i) for i in range(3)], send, slot_bytes=0) == [None] * 3
    got: dict[int, np.ndarray] = {}
    for keys, rows in sent:
        for k, r in zip(keys.tolist(), rows, strict=True):
            got[k] = got.get(k, 0.0) + r
    assert got.keys() == truth.keys() and sum(samples_sent) == 3 * 4 * 7  # a push's samples count once
    for k in truth:
        np.testing.assert_allclose(got[k], truth[k], rtol=1e-12, atol=1e-12)


def test_a_worker_that_ends_early_keeps_the_rounds_going():
    sent: list[np.ndarray] = []

    def send(batch: PushBatch) -> tuple[np.ndarray, np.ndarray | None]:
        sent.append(batch.keys)
        return np.zeros(0, np.uint64), None

    def busy(agg: LocalAggregator) -> None:
        for i in range(20):
            agg.push(_batch(np.array([i + 1], np.uint64), np.ones((1, 1)), (0, 0), "delta"))

    assert _run(2, [lambda agg: None, busy], send) == [None, None]
    assert sorted(int(k[0]) for k in sent) == list(range(1, 21))


def test_the_leaders_residuals_become_every_workers_view():
    calls = []

    def send(batch: PushBatch) -> tuple[np.ndarray, np.ndarray | None]:
        calls.append(batch.keys)
        gone = np.array([7], np.uint64) if len(calls) == 2 else np.zeros(0, np.uint64)  # 7's residual was flushed
        return gone, batch.rows * 0.25  # a quarter of each row stays unsent

    views: dict[str, Any] = {}

    def other(agg: LocalAggregator) -> None:
        agg.push(_batch(np.array([7, 8], np.uint64), np.ones((2, 2)), (0, 0), "delta"))
        views["first"] = agg.unsent("w", np.array([7, 8, 9], np.uint64), 2)
        agg.push(_batch(np.array([8, 9], np.uint64), np.full((2, 2), 2.0), (0, 0), "delta"))
        views["w"] = agg.unsent("w", np.array([7, 8, 9, 10], np.uint64), 2)
        views["bias"] = agg.unsent("bias", np.array([1], np.uint64), 1)

    assert _run(2, [lambda agg: None, other], send) == [None, None]
    np.testing.assert_allclose(views["first"][:, 0], [0.25, 0.25, 0.0])
    np.testing.assert_allclose(views["w"][:, 1], [0.0, 0.5, 0.5, 0.0])
    assert views["bias"] is None  # a table without error feedback has no view


def test_a_failed_leader_push_fails_every_worker_instead_of_hanging():
    def send(batch: PushBatch) -> tuple[np.ndarray, np.ndarray | None]:
        raise ConnectionError("shard 1 is unreachable")

    def push(agg: LocalAggregator) -> None:
        agg.push(_batch(np.array([1, 2], np.uint64), np.ones((2, 1)), (0, 0), "gradient"))

    errors = _run(2, [push, push], send)
    assert isinstance(errors[0], ConnectionError) or "unreachable" in str(errors[0])
    assert errors[1] is not None and "aggregated push failed" in str(errors[1])
