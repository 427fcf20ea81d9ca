"""ctr.data.grouping.group_order, the stable counting sort under serving's lookups by shard
file and the router's split by shard, equals numpy's stable argsort and bincount."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ctr.data.grouping import group_order


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 9).flatmap(lambda g: st.tuples(st.just(g), st.lists(st.integers(0, g - 1), max_size=80))), st.integers(0, 50)
)
def test_group_order_is_a_stable_sort_by_label(case, base) -> None:
    groups, labels = case
    for arr in (np.array(labels, dtype=np.int64), np.array(labels, dtype=np.uint16)):
        order, bounds = group_order(arr, groups, base)
        assert order.tolist() == (np.argsort(arr, kind="stable") + base).tolist()
        want = np.concatenate([[0], np.cumsum(np.bincount(arr.astype(np.int64), minlength=groups))])
        assert bounds.tolist() == want.tolist()
