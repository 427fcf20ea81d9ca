import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ctr.format.hashmap import CompactHashMap
from ctr.format.hashmap_kernels import find_slots_reference

keys_st = st.one_of(st.integers(1, 40), st.integers(1, 2**64 - 1))  # small ids collide often


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["insert", "lookup", "delete"]), st.lists(keys_st, max_size=50), st.floats(-5, 5, width=32)),
        max_size=30,
    )
)
def test_agrees_with_dict(ops):
    """Inserts, lookups and deletes (backward shift) against a dict."""
    m = CompactHashMap(row_words=1, capacity=8)
    ref: dict[int, float] = {}
    for op, keys, value in ops:
        arr = np.array(keys, dtype=np.uint64)
        if op == "delete":
            assert m.delete(arr) == len({k for k in keys if k in ref})
            for k in keys:
                ref.pop(k, None)
        if op == "insert":
            slots = m.insert(arr)
            m.rows[slots, 0] = value
            for k in keys:
                ref[k] = value
        slots = m.find(arr)
        for k, s in zip(keys, slots.tolist(), strict=True):
            assert (s >= 0) == (k in ref)
            if s >= 0:
                assert m.rows[s, 0] == np.float32(ref[k])
    assert m.size == len(ref)
    stored, _ = m.items()
    assert sorted(stored.tolist()) == sorted(ref)


def test_ids_round_trip_and_absent_keys_are_minus_one():
    m = CompactHashMap(2, capacity=8)
    keys = np.array([5, 1 << 63, *range(100, 130)], dtype=np.uint64)
    ids = np.array([0, 1 << 40, *range(3, 33)], dtype=np.int64)
    m.insert_ids(keys, ids)
    assert m.capacity > 8  # it grew while inserting them
    m.insert_ids(np.array([99], dtype=np.uint64), np.array([2], dtype=np.int64))
    got = m.find_ids(np.array([129, 4, 1 << 63, 99, 5, 100], dtype=np.uint64))
    assert got.tolist() == [32, -1, 1 << 40, 2, 0, 3]
    m.delete(np.array([129], dtype=np.uint64))
    assert m.find_ids(np.array([129, 100], dtype=np.uint64)).tolist() == [-1, 3]


def test_find_matches_reference_kernel():
    rng = np.random.default_rng(1)
    keys = np.unique(rng.integers(1, 2**64 - 1, 3000, dtype=np.uint64))
    m = CompactHashMap.from_rows(keys, rng.random((keys.shape[0], 2), dtype=np.float32).view(np.uint32))
    probe = np.concatenate([keys[:500], rng.integers(1, 2**64 - 1, 500, dtype=np.uint64)])
    assert m.find(probe).tolist() == find_slots_reference(m.slots, probe)


def test_image_memory_within_budget():
    rng = np.random.default_rng(2)
    keys = np.unique(rng.integers(1, 2**64 - 1, 200_000, dtype=np.uint64))
    m = CompactHashMap.from_rows(keys, np.zeros((keys.shape[0], 1), dtype=np.uint32))
    raw = keys.shape[0] * (8 + 4)
    assert m.nbytes / raw <= 1.15
    assert (m.find(keys) >= 0).all()


def test_small_integer_keys_spread():
    keys = np.arange(1, 100_001, dtype=np.uint64)
    m = CompactHashMap.from_rows(keys, np.zeros((keys.shape[0], 1), dtype=np.uint32))
    assert (m.find(keys) >= 0).all()


def test_find_ids_matches_a_dict():
    """The id kernel reads what insert_ids wrote, ids past 32 bits included, -1 where absent."""
    rng = np.random.default_rng(3)
    keys = np.unique(rng.integers(1, 2**64 - 1, 2000, dtype=np.uint64))
    ids = np.asarray(rng.integers(0, 2**62, size=len(keys), dtype=np.int64), dtype=np.int64)
    m = CompactHashMap(2, capacity=16)
    m.insert_ids(keys, ids)
    probe = np.concatenate([keys[::3], rng.integers(1, 2**64 - 1, 300, dtype=np.uint64)])
    by_key = dict(zip(keys.tolist(), ids.tolist(), strict=True))
    assert m.find_ids(probe).tolist() == [by_key.get(k, -1) for k in probe.tolist()]
