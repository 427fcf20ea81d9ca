"""Key routing (ctr.routing): which shard owns a key is part of the model format, so the
kernel must agree with the plain definition for every shard count."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ctr.routing import owner_reference, shard_of

EDGE_KEYS = [0, 1, 2**32 - 1, 2**32, 2**63, 2**64 - 1]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=40), st.sampled_from([1, 2, 3, 4, 5, 7, 8, 16, 33, 64, 1000]))
def test_owner_equals_the_reference(keys, n):
    keys = keys + EDGE_KEYS
    got = shard_of(np.array(keys, dtype=np.uint64), n)
    assert got.tolist() == [owner_reference(k, n) for k in keys]
