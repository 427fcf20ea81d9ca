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


def _some_known(rng: np.random.Generator, entries: dict[int, int], known: int, absent: int) -> np.ndarray:
    """Sorted unique keys: up to `known` drawn from the table's, `absent` random ones."""
    held = np.array(sorted(entries), dtype=np.uint64)
    return np.unique(np.concatenate([rng.choice(held, known), rng.integers(1, 1 << 60, size=absent, dtype=np.uint64)]))


def test_entries_and_take_known_match_the_reference() -> None:
    rng = np.random.default_rng(0)
    index, entries, valid, row_id, rows = _table(rng, 500, 3)
    keys = _some_known(rng, entries, 200, 50)
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
    keys = _some_known(rng, entries, 120, 20)
    deltas = rng.normal(size=(keys.shape[0], 4))
    drop = np.asarray(rng.random(keys.shape[0]) < 0.2, dtype=np.bool_)
    stamp = np.asarray(rng.integers(0, 3, size=rows.shape[0]), dtype=np.int64)
    valid_ref, rows_ref, stamp_ref = valid.copy(), rows.copy(), stamp.copy()
    kk.add_deltas(index.slots, valid, rows, keys, deltas, drop, stamp, 7)
    kk.add_deltas_reference(entries, valid_ref, rows_ref, keys, deltas, drop, stamp_ref, 7)
    np.testing.assert_array_equal(valid, valid_ref)
    np.testing.assert_array_equal(rows, rows_ref)
    np.testing.assert_array_equal(stamp, stamp_ref)
    assert 0 < int((stamp == 7).sum()) < keys.shape[0]


def test_set_rows_matches_the_reference() -> None:
    rng = np.random.default_rng(3)
    index, entries, valid, _, rows = _table(rng, 300, 2)
    keys = _some_known(rng, entries, 120, 20)
    new_rows = rng.normal(size=(keys.shape[0], 2))
    stamp = np.asarray(rng.integers(1, 3, size=rows.shape[0]), dtype=np.int64)
    valid_ref, rows_ref, stamp_ref = valid.copy(), rows.copy(), stamp.copy()
    set_at = [entries[int(k)] for k in keys.tolist() if int(k) in entries]
    assert 0 < len(set_at) < keys.shape[0] and not bool(valid[set_at].all())  # absent keys, invalid copies
    kk.set_rows(index.slots, valid, rows, stamp, keys, new_rows)
    kk.set_rows_reference(entries, valid_ref, rows_ref, stamp_ref, keys, new_rows)
    np.testing.assert_array_equal(valid, valid_ref)
    np.testing.assert_array_equal(rows, rows_ref)
    np.testing.assert_array_equal(stamp, stamp_ref)
    assert bool(valid[set_at].all()) and int((stamp == 0).sum()) == len(set_at)  # the others kept theirs


def test_leased_copies_match_the_reference_in_every_case() -> None:
    rng = np.random.default_rng(2)
    index, entries, valid, row_id, rows = _table(rng, 4000, 3)
    stamp = np.asarray(rng.integers(6, 8, size=rows.shape[0]), dtype=np.int64)
    known = np.array(sorted(entries), dtype=np.uint64)
    good = [k for k in known.tolist() if valid[entries[k]] and row_id[entries[k]] >= 0 and stamp[entries[k]] == 7]
    assert len(good) > 2 * kk.LEASE_CHUNK  # the kernel checks a chunk at a time: several here
    cases = {
        "every copy current": np.array(sorted(good), dtype=np.uint64),
        "one key unknown, in the last chunk": np.append(np.array(sorted(good), dtype=np.uint64), np.uint64(1 << 62)),
        "one copy invalid": np.sort(np.append(good[:20], [k for k in known.tolist() if not valid[entries[k]]][0])),
        "one copy of another epoch": np.sort(np.append(good[:20], [k for k in known.tolist() if stamp[entries[k]] == 6][0])),
        "one key unknown": np.sort(np.append(np.array(good[:20], dtype=np.uint64), np.uint64(3))),
        "no keys": np.zeros(0, dtype=np.uint64),
    }
    for name, keys in cases.items():
        keys = np.asarray(keys, dtype=np.uint64)
        ok, got = kk.leased_copies(index.slots, valid, row_id, stamp, rows, keys, 7)
        ok_ref, ref = kk.leased_copies_reference(entries, valid, row_id, stamp, rows, keys, 7)
        assert ok == ok_ref == (name in ("every copy current", "no keys")), name
        np.testing.assert_array_equal(got, ref)
