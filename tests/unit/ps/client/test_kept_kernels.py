"""The kept-rows kernels against their plain references."""

from __future__ import annotations

import numpy as np

from ctr.format.hashmap import CompactHashMap
from ps.client import kept_kernels as kk

Table = tuple[CompactHashMap, dict[int, int], np.ndarray, np.ndarray, np.ndarray]


def _table(rng: np.random.Generator, n: int, width: int) -> Table:
    keys = np.unique(rng.integers(1, 1 << 60, size=n, dtype=np.uint64))
    index = CompactHashMap(2, capacity=16)
    slots = index.insert(keys)
    entries = rng.permutation(keys.shape[0]).astype(np.int64)
    index.words[slots] = entries.view(np.uint32).reshape(-1, 2)
    valid = np.asarray(rng.random(keys.shape[0]) < 0.7, dtype=np.bool_)
    row_id = np.asarray(rng.integers(0, 1 << 20, size=keys.shape[0]), dtype=np.int64)
    row_id[rng.random(keys.shape[0]) < 0.1] = -1  # ids a layout change took away
    rows = rng.normal(size=(keys.shape[0], width))
    return index, dict(zip(keys.tolist(), entries.tolist(), strict=True)), valid, row_id, rows


def test_entries_and_take_known_match_the_reference() -> None:
    rng = np.random.default_rng(0)
    index, entries, valid, row_id, rows = _table(rng, 500, 3)
    known = np.array(sorted(entries), dtype=np.uint64)
    keys = np.unique(np.concatenate([rng.choice(known, 200), rng.integers(1, 1 << 60, size=50, dtype=np.uint64)]))
    want = np.array([entries.get(int(k), -1) for k in keys.tolist()], dtype=np.int64)
    np.testing.assert_array_equal(index.find_ids(keys), want)
    got = kk.take_known(index.slots, valid, row_id, rows, keys)
    ref = kk.take_known_reference(entries, valid, row_id, rows, keys)
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_array_equal(g, r)
    known_at, fresh = got[0], got[1]
    assert 0 < int(fresh.sum()) < int(known_at.sum()) < keys.shape[0]  # every case is there


def test_add_deltas_matches_the_reference() -> None:
    rng = np.random.default_rng(1)
    index, entries, valid, _, rows = _table(rng, 300, 4)
    known = np.array(sorted(entries), dtype=np.uint64)
    keys = np.unique(np.concatenate([rng.choice(known, 120), rng.integers(1, 1 << 60, size=20, dtype=np.uint64)]))
    deltas = rng.normal(size=(keys.shape[0], 4))
    drop = np.asarray(rng.random(keys.shape[0]) < 0.2, dtype=np.bool_)
    valid_ref, rows_ref = valid.copy(), rows.copy()
    kk.add_deltas(index.slots, valid, rows, keys, deltas, drop)
    kk.add_deltas_reference(entries, valid_ref, rows_ref, keys, deltas, drop)
    np.testing.assert_array_equal(valid, valid_ref)
    np.testing.assert_array_equal(rows, rows_ref)
