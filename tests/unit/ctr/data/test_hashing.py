from hypothesis import given
from hypothesis import strategies as st

from ctr.data.hashing import field_id, hash_features, hash_tokens_reference


def test_known_values_are_stable():
    assert field_id("user") == 1618501362
    assert field_id("") == 2166136261
    keys = hash_features([field_id("C1"), 0, field_id("user")], ["68fd1e64", "", "u42"])
    assert keys.tolist() == [12648932208278384303, 16848853895932712992, 6644142514629454541]


@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.text(max_size=12)), max_size=40))
def test_kernel_matches_reference(pairs):
    fields = [f for f, _ in pairs]
    tokens = [t for _, t in pairs]
    assert hash_features(fields, tokens).tolist() == hash_tokens_reference(fields, tokens)


def test_field_separates_equal_values():
    a, b = hash_features([field_id("a"), field_id("b")], ["x", "x"])
    assert a != b and a != 0 and b != 0
