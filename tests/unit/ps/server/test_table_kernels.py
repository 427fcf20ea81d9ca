"""The shard table's bookkeeping kernels for clients that keep rows (ps.server.kernels:
row_seqs, push_conflicts, mark_writer), and the check of a call's keys (key_fault),
against plain references."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ctr.routing import shard_of
from ps.server.kernels import (
    KEY_ZERO,
    KEYS_ELSEWHERE,
    KEYS_OK,
    KEYS_UNSORTED,
    key_fault,
    key_fault_reference,
    mark_writer,
    push_conflicts,
    push_conflicts_reference,
    row_seqs,
)

ROWS = 80  # calls longer than GATHER_AHEAD (32) ids: the kernels' prefetches run too


def _table(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    writer = rng.integers(0, 3, ROWS).astype(np.uint64)  # clients 1 and 2, 0: anonymous
    before = rng.integers(0, 8, ROWS).astype(np.uint64)
    meta = np.zeros((ROWS, 4), dtype=np.uint32)
    seq = rng.integers(0, 1 << 34, ROWS)  # past 32 bits: the high word counts
    meta[:, 2], meta[:, 3] = seq & 0xFFFFFFFF, seq >> 32
    return writer, before, meta


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 1000),
    st.lists(st.tuples(st.integers(-1, ROWS - 1), st.integers(-1, 9)), max_size=ROWS),
    st.integers(1, 2),
    st.booleans(),
)
def test_conflicts_equal_the_reference(seed, pushed, client, with_recorded):
    writer, before, meta = _table(seed)
    found = np.array([f for f, _ in pushed], dtype=np.int64)
    recorded = np.array([r for _, r in pushed], dtype=np.int64)
    # a recorded sequence equal to the row's own, sometimes: the unchanged case
    if with_recorded and pushed:
        here = found >= 0
        recorded[here & (recorded == 9)] = row_seqs(meta, found[here & (recorded == 9)])
    got = push_conflicts(writer, before, meta, found, np.uint64(client), recorded, with_recorded)
    expected = push_conflicts_reference(writer, before, meta, found, np.uint64(client), recorded if with_recorded else None)
    assert got.tolist() == expected.tolist()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 1000), st.lists(st.integers(0, ROWS - 1), unique=True, max_size=ROWS), st.integers(1, 2))
def test_mark_writer_keeps_the_last_foreign_sequence(seed, ids, client):
    writer, before, meta = _table(seed)
    idx = np.array(ids, dtype=np.int64)
    seqs = meta[:, 2].astype(np.int64) | (meta[:, 3].astype(np.int64) << 32)
    expected_before = before.copy()
    foreign = idx[writer[idx] != np.uint64(client)]
    expected_before[foreign] = seqs[foreign].astype(np.uint64)
    mark_writer(writer, before, meta, idx, np.uint64(client))
    assert before.tolist() == expected_before.tolist()
    assert all(writer[i] == client for i in ids)
    assert row_seqs(meta, idx).tolist() == seqs[idx].tolist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=12), st.integers(1, 5), st.booleans(), st.booleans())
def test_key_fault_equals_its_reference(raw: list[int], count: int, owned: bool, ordered: bool) -> None:
    keys = np.array(raw, dtype=np.uint64)
    if ordered:
        keys = np.unique(keys)
    index = 0
    if owned and keys.shape[0]:  # often every key on one shard: the answer is then not KEYS_ELSEWHERE
        index = int(shard_of(keys[:1], count)[0])
        keys = keys[shard_of(keys, count) == index]
    assert key_fault(keys, count, index) == key_fault_reference(keys, count, index)


def test_key_fault_names_each_fault() -> None:
    keys = np.array([5, 9, 300, 2**63], dtype=np.uint64)
    assert key_fault(keys, 1, 0) == KEYS_OK
    assert key_fault(keys[::-1].copy(), 1, 0) == KEYS_UNSORTED
    assert key_fault(np.array([5, 5], dtype=np.uint64), 1, 0) == KEYS_UNSORTED  # a repeat
    assert key_fault(np.array([0, 5], dtype=np.uint64), 1, 0) == KEY_ZERO
    mixed = np.unique(np.arange(1, 40, dtype=np.uint64))
    assert key_fault(mixed, 2, 0) == KEYS_ELSEWHERE
    assert key_fault(mixed[shard_of(mixed, 2) == 1], 2, 1) == KEYS_OK
    assert key_fault(np.zeros(0, dtype=np.uint64), 3, 2) == KEYS_OK
