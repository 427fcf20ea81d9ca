"""The error-feedback memory (slots behind a hash index) against a plain dict that does
what it promises: every row put is taken back, drained or evicted exactly once, evictions
take the least recently pushed, and what leaves comes out sorted by key."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ps.compression.residual_kernels import put_at, put_at_reference, rows_at, rows_at_reference
from ps.compression.residuals import ResidualStore

ops = st.lists(
    st.tuples(
        st.sampled_from(["put", "keep", "drain_since", "drop", "bound"]),
        st.lists(st.integers(1, 40), min_size=0, max_size=12, unique=True),
        st.integers(0, 10),
    ),
    max_size=40,
)


def _check_sorted_and_equal(keys: np.ndarray, rows: np.ndarray, ref: dict[int, tuple[np.ndarray, int]]) -> None:
    assert keys.tolist() == sorted(keys.tolist())
    for k, row in zip(keys.tolist(), rows, strict=True):
        np.testing.assert_array_equal(row, ref[k][0])


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(1, 30))
def test_store_matches_a_dict_of_rows_and_ticks(sequence, capacity):
    store = ResidualStore(capacity)
    ref: dict[int, tuple[np.ndarray, int]] = {}  # key -> (row, last push's tick)
    tick = 0
    rng = np.random.default_rng(len(sequence))
    for op, raw, arg in sequence:
        keys = np.array(sorted(raw), dtype=np.uint64)
        if op in ("put", "keep", "bound"):
            slots = None
            if op == "bound":  # as a push with rows past the residual bound: one lookup, some
                # keys dropped by their slots, the rest put back into theirs
                _, found = store.take_slots(keys, 3)
                over = np.arange(keys.shape[0]) % 2 == 1
                store.drop_slots(found[over])
                for k in keys[over].tolist():
                    ref.pop(k, None)
                keys, slots = keys[~over], found[~over]
            rows = rng.normal(size=(keys.shape[0], 3))
            touch = op != "keep"
            if touch:
                tick += 1
            gone_keys, gone_rows = store.put(keys, rows, touch=touch, slots=slots)
            for k, row in zip(keys.tolist(), rows, strict=True):
                ref[k] = (row, tick if touch else ref.get(k, (None, 0))[1])
            # the evicted are the least recently pushed, and leave with their rows
            _check_sorted_and_equal(gone_keys, gone_rows, ref)
            left = set(ref) - set(gone_keys.tolist())
            if gone_keys.shape[0]:
                assert max(ref[k][1] for k in gone_keys.tolist()) <= min(ref[k][1] for k in left)
            for k in gone_keys.tolist():
                del ref[k]
            assert len(ref) <= capacity
        elif op == "drain_since":
            keys_out, rows_out = store.take_pushed_since(arg)
            assert set(keys_out.tolist()) == {k for k, (_, last) in ref.items() if last > arg}
            _check_sorted_and_equal(keys_out, rows_out, ref)
            for k in keys_out.tolist():
                del ref[k]
        else:
            store.drop(keys)
            for k in keys.tolist():
                ref.pop(k, None)
        assert store.items()[0].tolist() == sorted(ref)
        _check_sorted_and_equal(*store.items(), ref)
        probe = np.arange(1, 42, dtype=np.uint64)
        want = np.array([ref[k][0] if k in ref else np.zeros(3) for k in probe.tolist()])
        np.testing.assert_array_equal(store.take(probe, 3), want)


def test_freed_slots_are_reused_before_the_buffer_grows():
    store = ResidualStore(1000)
    store.put(np.arange(1, 101, dtype=np.uint64), np.ones((100, 2)))
    before = store.nbytes
    for round_ in range(20):  # drain and refill: the same number of rows, new keys each time
        store.take_pushed_since(0)
        start = 1000 * (round_ + 1)
        store.put(np.arange(start, start + 100, dtype=np.uint64), np.ones((100, 2)))
    assert len(store) == 100
    assert store.nbytes <= before * 2  # the index may grow once; the row buffer does not


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-1, 9), max_size=30), st.integers(1, 4))
def test_rows_at_equals_its_reference(at, cols):
    rows = np.random.default_rng(len(at)).normal(size=(10, cols))
    idx = np.array(at, dtype=np.int64)
    np.testing.assert_array_equal(rows_at(rows, idx, cols), rows_at_reference(rows, idx, cols))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=30, unique=True), st.integers(1, 4), st.integers(-1, 5))
def test_put_at_equals_its_reference(at, cols, tick):
    rng = np.random.default_rng(len(at))
    rows, last = rng.normal(size=(10, cols)), rng.integers(0, 3, size=10)
    idx, values = np.array(at, dtype=np.int64), rng.normal(size=(len(at), cols))
    want_rows, want_last = rows.copy(), last.copy()
    put_at(rows, last, idx, values, tick)
    put_at_reference(want_rows, want_last, idx, values, tick)
    np.testing.assert_array_equal(rows, want_rows)
    np.testing.assert_array_equal(last, want_last)
