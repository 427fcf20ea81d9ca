"""A shard's lifecycle state alone: tombstones for the cut and the export, and keys that
come back before either."""

import numpy as np

from ctr.model.spec import ModelSpec
from ps.api import Lifecycle
from ps.server.row_lifecycle import RowLifecycle, gone
from ps.server.tables import SparseTable

SPEC = ModelSpec("lr").tables()[0]


def _table(keys: list[int]) -> SparseTable:
    t = SparseTable(SPEC)
    t.apply("gradient", np.array(keys, dtype=np.uint64), np.ones(len(keys)), 1)
    return t


def test_gone_leaves_out_keys_a_table_holds_again():
    t = _table([5])
    out = gone([np.array([3, 5], dtype=np.uint64), np.array([3, 9], dtype=np.uint64)], [t])
    assert out.tolist() == [3, 9]
    assert gone([], [t]).shape == (0,)


def test_evicted_keys_become_tombstones_once_for_the_cut_and_once_for_the_export():
    rows = RowLifecycle(Lifecycle(max_rows=2))
    t = _table([1, 2, 3, 4])
    rows.evict(t, update_seq=1)
    assert t.size == 2 and rows.evicted["w"] == 2
    assert rows.take_cut_tombstones(t).shape == (2,) and rows.take_cut_tombstones(t).shape == (0,)
    assert rows.take_export_tombstones([t]).shape == (2,) and rows.take_export_tombstones([t]).shape == (0,)


def test_a_filter_stored_at_another_size_starts_empty():
    rows = RowLifecycle(Lifecycle(admit_after=2, bloom_counters=1 << 10))
    rows.load({"w": {"sweep_time": 5.0, "sweep_seq": 3, "not_admitted": 7, "evicted": 1}}, {"w": np.zeros(10, np.uint8)})
    assert rows.counters() == {} and rows.not_admitted == {"w": 7}
    assert rows.clocks(["w"]) == {"w": {"sweep_time": 5.0, "sweep_seq": 3, "not_admitted": 7, "evicted": 1}}
