"""The bucketized cuckoo map of model images and serving's overlay, against a dict and
against the plain-Python references of its kernels."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctr.format import bucket_kernels as bk
from ctr.format import key_filter
from ctr.format.bucket_map import BucketMap
from serving.loading.overlay import Overlay

keys_st = st.one_of(st.integers(1, 40), st.integers(1, 2**64 - 1))  # small ids collide often


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from([1, 2]),
    st.lists(
        st.tuples(st.sampled_from(["put", "lookup", "delete"]), st.lists(keys_st, max_size=60), st.floats(-5, 5, width=32)),
        max_size=30,
    ),
)
def test_agrees_with_dict(row_words, ops):
    """Inserts, updates (put of a present key), lookups and deletes against a dict, in the
    line layout (1-word rows) and the wide one; the map starts at 2 buckets, so it grows and
    walks cuckoo displacements on the way."""
    m = BucketMap(row_words=row_words)
    assert m.slots == (bk.LINE_SLOTS if row_words == 1 else bk.B)
    ref: dict[int, float] = {}
    for op, keys, value in ops:
        arr = np.array(keys, dtype=np.uint64)
        if op == "delete":
            assert m.delete(arr) == len({k for k in keys if k in ref})
            for k in keys:
                ref.pop(k, None)
        if op == "put":
            rows = np.stack([np.arange(len(keys), dtype=np.float32), np.full(len(keys), value, np.float32)], axis=1)
            m.put(arr, rows[:, :row_words])
            for i, k in enumerate(keys):
                ref[k] = i  # the last duplicate wins
        got = m.get(arr).reshape(-1, row_words)
        for i, k in enumerate(keys):
            if k in ref:
                assert got[i, 0] == ref[k]
            else:
                assert not got[i].any() and m.find(arr[i : i + 1])[0] == -1
        assert m.size == len(ref)
        assert m.find(arr).tolist() == [bk.find_slot_reference(m.table, k) for k in keys]
    listed, _ = m.items()
    assert sorted(listed.tolist()) == sorted(ref)
    assert m.copy().get(np.array(sorted(ref), np.uint64)).reshape(-1, row_words)[:, 0].tolist() == [ref[k] for k in sorted(ref)]


def test_a_full_table_grows_and_keeps_every_row():
    keys = np.arange(1, 20_001, dtype=np.uint64)
    m = BucketMap(row_words=1)
    m.put(keys, keys.astype(np.float32).reshape(-1, 1))
    assert m.size == 20_000 and np.array_equal(m.get(keys)[:, 0], keys.astype(np.float32))


@pytest.mark.parametrize(("row_words", "bound"), [(1, 1.09), (3, 1.06)])
def test_images_fill_to_their_load_and_find_every_key(row_words, bound):
    """Line images (1-word rows) fill to 0.98: 1.088x the raw bytes; wide ones to 0.95.
    Every bucket of a line table is one 64-byte line."""
    rng = np.random.default_rng(1)
    keys = np.unique(rng.integers(1, 2**64 - 1, 200_000, dtype=np.uint64))
    rows = np.arange(keys.shape[0] * row_words, dtype=np.uint32).reshape(-1, row_words)
    m = BucketMap.from_rows(keys, rows)
    assert m.nbytes / (keys.shape[0] * (8 + 4 * row_words)) <= bound
    if row_words == 1:
        assert m.table.shape[1] * 4 == 64 and m.table.ctypes.data % 64 == 0
    slots = m.find(keys)
    assert np.array_equal(m.gather_words(slots), rows) and np.array_equal(m.get(keys).view(np.uint32), rows)
    assert (m.find(rng.integers(1, 2**64 - 1, 1000, dtype=np.uint64)) < 0).all()


def test_a_wide_table_of_1_word_rows_is_still_read():
    """Images of 1-word rows written before the line layout are wide (8 slots, 24 words a
    bucket): the width tells the kernels which layout they read."""
    rng = np.random.default_rng(5)
    keys = np.unique(rng.integers(1, 2**64 - 1, 5000, dtype=np.uint64))
    table = np.zeros((800, 24), np.uint32)
    done, added, lost = bk.put_rows(table, keys, keys.astype(np.uint32).reshape(-1, 1), 7, np.empty(1, np.uint32))
    assert (done, added, lost) == (keys.shape[0], keys.shape[0], 0)
    m = BucketMap(1, table=table)
    assert m.slots == bk.B and m.size == keys.shape[0]
    probe = np.concatenate([keys, rng.integers(1, 2**64 - 1, 100, dtype=np.uint64)])
    assert m.find(probe).tolist() == [bk.find_slot_reference(table, int(k)) for k in probe]
    assert np.array_equal(m.get(probe).view(np.uint32)[:, 0], np.r_[keys.astype(np.uint32), np.zeros(100, np.uint32)])


@pytest.mark.parametrize("row_words", [1, 3])
def test_find_matches_the_python_reference(row_words):
    rng = np.random.default_rng(2)
    keys = np.unique(rng.integers(1, 2**64 - 1, 3000, dtype=np.uint64))
    m = BucketMap.from_rows(keys, np.zeros((keys.shape[0], row_words), np.uint32))
    probe = np.concatenate([keys[:500], rng.integers(1, 2**64 - 1, 100, dtype=np.uint64), np.arange(1, 50, dtype=np.uint64)])
    assert m.find(probe).tolist() == [bk.find_slot_reference(m.table, int(k)) for k in probe]
    assert [int(bk.mix(np.uint64(k))) for k in probe[:20]] == [bk.mix_reference(int(k)) for k in probe[:20]]


def test_wide_rows_are_copied_through_the_pipeline():
    """Rows wider than a narrow bucket (FM: 9 words) are found in either bucket (at load
    0.95 a fifth of the keys sit in their second) and copied in a later pass: every hit gets
    its own row, at request sizes around the passes' depth."""
    rng = np.random.default_rng(4)
    keys = np.unique(rng.integers(1, 2**64 - 1, 4000, dtype=np.uint64))
    rows = rng.integers(0, 2**32 - 1, (keys.shape[0], 9), dtype=np.uint32)
    m = BucketMap.from_rows(keys, rows)
    assert m.table.shape[1] > 3 * 16  # not narrow
    absent = rng.integers(1, 2**64 - 1, 300, dtype=np.uint64)
    for n in (1, bk.WIDE_AHEAD - 1, bk.WIDE_AHEAD, bk.WIDE_AHEAD + 1, 2 * bk.WIDE_AHEAD + 3, 3000):
        pick = rng.integers(0, keys.shape[0], n)
        probe = np.concatenate([keys[pick], absent[: n // 3]])
        order = rng.permutation(probe.shape[0])
        got = m.get(probe[order]).view(np.uint32)
        want = np.concatenate([rows[pick], np.zeros((n // 3, 9), np.uint32)])[order]
        assert np.array_equal(got, want), n
    out = np.zeros((keys.shape[0], 9), np.uint32)
    found = np.zeros(keys.shape[0], np.bool_)
    found[::2] = True  # found before: left as they are
    bk.lookup_at(m.table, keys, np.arange(keys.shape[0] - 1, -1, -1), out, found)
    assert found.all() and np.array_equal(out[1::2], rows[1::2]) and not out[::2].any()
    bits = np.zeros(key_filter.words_for(10), np.uint64)
    key_filter.add_keys(bits, keys[:10])
    out[:] = 0
    found[:] = False
    bk.lookup_rows(m.table, keys, 0, keys.shape[0], bits, out, found)  # only what the filter may hold
    assert found[:10].all() and found.sum() < 100 and np.array_equal(out[found], rows[found])


def test_line_lookups_read_both_buckets_and_leave_found_rows():
    """The line kernel compares both buckets of every key without a branch: keys in either
    bucket, absent keys and keys found before (left as they are) agree with the reference,
    for lengths around its pipeline's depth and through positions `at`."""
    rng = np.random.default_rng(6)
    keys = np.unique(rng.integers(1, 2**64 - 1, 20_000, dtype=np.uint64))
    rows = rng.integers(1, 2**32 - 1, (keys.shape[0], 1), dtype=np.uint32)
    m = BucketMap.from_rows(keys, rows)
    assert m.slots == bk.LINE_SLOTS
    first = np.array([bk.find_slot_reference(m.table, int(k)) // bk.LINE_SLOTS for k in keys[:2000]])
    in_first = first == np.array([((bk.mix_reference(int(k)) >> 32) * m.buckets) >> 32 for k in keys[:2000]])
    assert 0.2 < in_first.mean() < 0.9  # both buckets hold keys
    absent = rng.integers(1, 2**64 - 1, 2000, dtype=np.uint64)
    for n in (1, bk.LINE_AHEAD - 1, bk.LINE_AHEAD, bk.LINE_AHEAD + 1, 2 * bk.LINE_AHEAD + 3, 3000):
        pick = rng.integers(0, keys.shape[0], n)
        probe = np.concatenate([keys[pick], absent[: n // 3 + 1]])
        want = np.concatenate([rows[pick], np.zeros((n // 3 + 1, 1), np.uint32)])
        at = rng.permutation(probe.shape[0])
        out = np.zeros((probe.shape[0], 1), np.uint32)
        found = np.zeros(probe.shape[0], np.bool_)
        found[::5] = True  # found before: row and flag stay
        out[::5] = 7
        bk.lookup_at(m.table, probe, at, out, found)
        expect = want.copy()
        expect[::5] = 7
        assert np.array_equal(out, expect), n
        assert np.array_equal(found, np.r_[np.ones(n, bool), np.zeros(n // 3 + 1, bool)] | (np.arange(probe.shape[0]) % 5 == 0))


def test_serving_lookups_honour_found_owner_and_filter():
    """The serving kernels: by_owner groups positions by shard, lookup_at skips found keys;
    a filter that rules a key out stops lookup_rows."""
    from ctr.routing import shard_of

    keys = np.arange(1, 1001, dtype=np.uint64)
    m = BucketMap.from_rows(keys, keys.astype(np.uint32).reshape(-1, 1))
    out = np.zeros((1000, 1), np.uint32)
    found = np.zeros(1000, np.bool_)
    found[:10] = True
    order, bounds = bk.by_owner(keys, 0, 1000, 2)
    assert sorted(order.tolist()) == list(range(1000)) and bounds.tolist() == [0, int((shard_of(keys, 2) == 0).sum()), 1000]
    assert (shard_of(keys[order[: bounds[1]]], 2) == 0).all() and (np.diff(order[: bounds[1]]) > 0).all()
    bk.lookup_at(m.table, keys, order[bounds[1] :], out, found)  # shard 1's positions only
    mine = shard_of(keys, 2) == 1
    assert np.array_equal(found[10:], mine[10:]) and np.array_equal(out[10:, 0][mine[10:]], keys[10:][mine[10:]])
    bits = np.zeros(key_filter.words_for(10), np.uint64)
    key_filter.add_keys(bits, keys[:10])
    out[:] = 0
    found[:] = False
    bk.lookup_rows(m.table, keys, 0, 1000, bits, out, found)
    assert found[:10].all() and found.sum() < 40  # the rest only by the filter's rare false positives


def test_filter_matches_reference_and_never_misses():
    rng = np.random.default_rng(3)
    keys = rng.integers(1, 2**64 - 1, 5000, dtype=np.uint64)
    bits = np.zeros(key_filter.words_for(keys.shape[0]), np.uint64)
    key_filter.add_keys(bits, keys)
    assert key_filter.may_contain_keys(bits, keys).all()
    other = rng.integers(1, 2**64 - 1, 20_000, dtype=np.uint64)
    maybe = key_filter.may_contain_keys(bits, other)
    assert maybe.mean() < 0.03
    assert maybe[:200].tolist() == [key_filter.may_contain_reference(bits, int(k)) for k in other[:200]]


def test_overlay_filter_grows_with_the_overlay():
    o = Overlay(1)
    keys = np.arange(1, 50_001, dtype=np.uint64)
    o.put(keys, np.ones((keys.shape[0], 1), np.float32))
    assert key_filter.may_contain_keys(o.bits, keys).all() and o.bits.shape[0] * 64 >= 16 * 50_000
    twin = o.copy()
    twin.put(np.array([99_999], np.uint64), np.full((1, 1), 2.0, np.float32))
    assert o.find(np.array([99_999], np.uint64))[0] == -1 and twin.get(np.array([99_999], np.uint64))[0, 0] == 2.0


def test_key_zero_and_wrong_shapes_are_refused():
    m = BucketMap(row_words=1)
    with pytest.raises(ValueError, match="key 0"):
        m.put(np.array([0], np.uint64), np.zeros((1, 1), np.float32))
    with pytest.raises(ValueError, match="does not fit"):
        BucketMap(row_words=2, table=np.zeros((4, 8), np.uint32))


def test_servable_rows_split_across_threads_equal_a_dict():
    """ServableModel.rows: overlay first (with masks of evicted keys), then the owning
    shard's image, one range of keys per thread."""
    from ctr.model.spec import ModelSpec
    from ctr.routing import shard_of
    from serving.loading.servable import ServableModel
    from serving.scoring.parallel import Splitter

    rng = np.random.default_rng(4)
    keys = np.unique(rng.integers(1, 2**64 - 1, 60_000, dtype=np.uint64))
    rows = rng.random((keys.shape[0], 3), dtype=np.float32)
    owner = shard_of(keys, 3)
    images = [BucketMap.from_rows(keys[owner == s], rows[owner == s].view(np.uint32)) for s in range(3)]
    overlay = Overlay(3)
    changed = keys[::7]
    overlay.put(changed, np.full((changed.shape[0], 3), -1.0, np.float32))
    evicted = keys[1::11]
    overlay.put(evicted, np.zeros((evicted.shape[0], 3), np.float32))
    expect = {int(k): r for k, r in zip(keys, rows, strict=True)}
    expect.update({int(k): np.full(3, -1.0, np.float32) for k in changed})
    expect.update({int(k): np.zeros(3, np.float32) for k in evicted})
    probe = np.concatenate([keys, rng.integers(1, 2**64 - 1, 500, dtype=np.uint64)])
    rng.shuffle(probe)
    model = ServableModel(
        "m",
        1,
        1,
        [],
        ModelSpec("lr"),
        {"w": (0, 3)},
        images,
        overlay,
        {"bias": np.zeros(1, np.float32)},
        keys.shape[0],
        shard_count=3,
        held=(0, 1, 2),
    )
    serial = model.rows(probe)
    model.splitter = Splitter(3)
    split = model.rows(probe)
    want = np.stack([expect.get(int(k), np.zeros(3, np.float32)) for k in probe])
    assert np.array_equal(serial, want) and np.array_equal(split, want)
    model.splitter.close()


@pytest.mark.parametrize("row_words", [1, 9])
def test_lookups_into_garbage_leave_only_absent_rows_for_zero_unfound(row_words):
    """ServableModel.rows looks up into an uninitialized array and zeroes the absent keys'
    rows after (zero_unfound): every present key's row is written whole, in both layouts,
    with some keys found before (the overlay's), and the result equals lookups into zeros."""
    rng = np.random.default_rng(7)
    keys = np.unique(rng.integers(1, 2**64 - 1, 5_000, dtype=np.uint64))
    rows = rng.integers(1, 2**32 - 1, (keys.shape[0], row_words), dtype=np.uint32)
    m = BucketMap.from_rows(keys, rows)
    probe = np.concatenate([keys[rng.integers(0, keys.shape[0], 3_000)], rng.integers(1, 2**64 - 1, 700, dtype=np.uint64)])
    rng.shuffle(probe)
    at = rng.permutation(probe.shape[0])
    outs = []
    for fill in (0, 0xDEADBEEF):
        out = np.full((probe.shape[0], row_words), fill, np.uint32)
        found = np.zeros(probe.shape[0], np.bool_)
        found[::5] = True  # found before: the overlay's rows, left as they are
        out[::5] = 7
        bk.lookup_at(m.table, probe, at, out, found)
        bk.zero_unfound(out, found)
        outs.append((out, found))
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])
    assert (outs[1][0][~outs[1][1]] == 0).all() and outs[1][1].sum() > 2_000


@given(st.integers(0, 50), st.integers(1, 12), st.integers(0, 2**32 - 1))
def test_zero_unfound_matches_its_reference(n, width, seed):
    rng = np.random.default_rng(seed)
    out = rng.integers(0, 2**32 - 1, (n, width), dtype=np.uint32)
    found = rng.random(n) < 0.5
    want = out.copy()
    bk.zero_unfound_reference(want, found)
    bk.zero_unfound(out, found)
    assert np.array_equal(out, want)
