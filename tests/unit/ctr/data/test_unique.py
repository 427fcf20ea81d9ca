import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ctr.data.unique import (
    RADIX_MIN,
    first_occurrence,
    radix_order,
    ranks_at,
    ranks_at_reference,
    sorted_unique_inverse,
    stable_order,
    unique_inverse,
    unique_inverse_reference,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 2**64 - 1) | st.sampled_from([1, 2, 17, 2**63, 2**64 - 1]), max_size=300))
def test_unique_inverse_equals_np_unique_in_first_seen_order(values):
    keys = np.asarray(values, dtype=np.uint64)
    uniq, inverse = unique_inverse(keys)
    want_uniq, want_inverse = unique_inverse_reference(keys)
    np.testing.assert_array_equal(uniq, want_uniq)
    np.testing.assert_array_equal(inverse, want_inverse)
    np.testing.assert_array_equal(uniq[inverse], keys)
    _, want_first = np.unique(inverse, return_index=True)  # first_occurrence's reference
    np.testing.assert_array_equal(first_occurrence(inverse, uniq.shape[0]), want_first)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 2**64 - 1) | st.sampled_from([1, 2, 17, 2**63]), max_size=300))
def test_sorted_unique_inverse_equals_np_unique(values):
    keys = np.asarray(values, dtype=np.uint64)
    uniq, inverse = sorted_unique_inverse(keys)
    want_uniq, want_inverse = np.unique(keys, return_inverse=True)
    np.testing.assert_array_equal(uniq, want_uniq)
    np.testing.assert_array_equal(inverse, want_inverse.reshape(-1))


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 40_000),
    st.sampled_from(["random", "small ids", "shared high bits"]),
)
def test_radix_order_sorts_as_argsort(seed, n, kind):
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 2**64 - 1, size=n, dtype=np.uint64, endpoint=True)
    if kind == "small ids":  # every pass but the lowest skipped
        keys = rng.integers(0, 50_000, size=n).astype(np.uint64)
    elif kind == "shared high bits":  # a field code in the top bits: the top pass skipped
        keys = (keys & np.uint64(2**48 - 1)) | np.uint64(7 << 48)
    order = radix_order(keys)
    np.testing.assert_array_equal(keys[order], np.sort(keys))
    np.testing.assert_array_equal(np.sort(order), np.arange(n))  # a permutation
    unique = np.unique(keys)
    rng.shuffle(unique)
    np.testing.assert_array_equal(radix_order(unique), np.argsort(unique))  # unique keys: argsort's own


def test_sorted_unique_inverse_past_the_radix_threshold_equals_np_unique():
    rng = np.random.default_rng(3)
    pool = rng.integers(1, 2**64 - 1, size=3 * RADIX_MIN, dtype=np.uint64)
    keys = pool[np.minimum(rng.zipf(1.2, size=20 * RADIX_MIN) - 1, pool.shape[0] - 1)]
    uniq, inverse = sorted_unique_inverse(keys)
    assert uniq.shape[0] >= RADIX_MIN  # the radix path ran
    want_uniq, want_inverse = np.unique(keys, return_inverse=True)
    np.testing.assert_array_equal(uniq, want_uniq)
    np.testing.assert_array_equal(inverse, want_inverse.reshape(-1))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 500), st.integers(0, 2000))
def test_ranks_at_equals_its_reference(seed, m, n):
    rng = np.random.default_rng(seed)
    order = rng.permutation(m).astype(np.int64)
    inverse = rng.integers(0, max(m, 1), size=n if m else 0).astype(np.int64)
    np.testing.assert_array_equal(ranks_at(order, inverse), ranks_at_reference(order, inverse))


def test_stable_order_is_a_stable_argsort_on_both_sides_of_the_radix_threshold():
    rng = np.random.default_rng(5)
    for n in (0, 10, RADIX_MIN - 1, RADIX_MIN, 3 * RADIX_MIN):
        keys = rng.integers(0, 2**64 - 1, size=n, dtype=np.uint64, endpoint=True)
        keys[: n // 3] = keys[n // 3 : 2 * (n // 3)]  # repeats: the order among equals counts
        np.testing.assert_array_equal(stable_order(keys), np.argsort(keys, kind="stable"))
        ids = rng.integers(0, 2**40, size=n).astype(np.int64)  # row ids, slots: non-negative
        np.testing.assert_array_equal(stable_order(ids), np.argsort(ids, kind="stable"))
