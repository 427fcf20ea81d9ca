import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ctr.data.unique import first_occurrence, sorted_unique_inverse, unique_inverse, unique_inverse_reference


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
