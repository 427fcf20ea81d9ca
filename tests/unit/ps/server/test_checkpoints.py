"""Checkpoint cuts alone: the order of cuts, what a failed background write leaves due, and
reading a cut whole or not at all."""

import numpy as np
import pytest

from ctr.model.spec import ModelSpec
from ps.server.checkpoints import Checkpoints, CutSnapshot, read_cut
from ps.server.errors import ShardError
from ps.server.store import CutMeta, ShardStore, StoreCorrupted
from ps.server.tables import SparseTable

SPEC = ModelSpec("lr").tables()[0]


def _snapshot(cut: int, seq: int, first: bool, keys: list[int]) -> CutSnapshot:
    t = SparseTable(SPEC)
    k = np.array(keys, dtype=np.uint64)
    t.apply("gradient", k, np.ones(len(keys)), seq)
    got, ids = t.updated_after(-1)
    tables = {SPEC.name: {"written": len(keys), "rows": t.size}}
    meta = CutMeta(cut, b"", seq, first, {SPEC.name: seq}, {}, tables)
    return CutSnapshot(meta, {SPEC.name: (got, t.raw_rows(ids))}, {}, {}, {}, {SPEC.name: t.row_words})


def test_a_cut_not_newer_than_the_last_is_refused(tmp_path):
    c = Checkpoints(ShardStore(tmp_path / "db"), 0, full_every=10)
    c.store.put_table_spec(SPEC)  # type: ignore[union-attr]
    assert c.begin(1) == (-1, True, False)  # the first cut holds every row
    c.submit(_snapshot(1, 1, True, [3, 5]), compact=False)
    with pytest.raises(ShardError, match="not newer"):
        c.begin(1)
    written, meta = c.written(1)
    c.commit(meta)
    assert written == 2 and c.committed.cut == 1 and c.cuts() == [1]
    assert c.begin(2) == (1, False, False)  # rows changed after the durable update seq
    c.close()


def test_a_failed_write_is_counted_and_its_rows_stay_due(tmp_path, monkeypatch):
    store = ShardStore(tmp_path / "db")
    store.put_table_spec(SPEC)
    c = Checkpoints(store, 0, full_every=10)
    c.begin(1)
    c.submit(_snapshot(1, 1, True, [3]), compact=False)
    c.commit(c.written(1)[1])

    def full_disk(*args: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "write_cut", full_disk)
    c.begin(2)
    c.submit(_snapshot(2, 2, False, [5]), compact=False)
    c.wait_writes()
    assert c.begin(3) == (1, False, False)  # cut 2's rows (update 2) are still due
    assert c.failed_cuts == 1 and c.cuts() == [1]
    c.close()


def test_read_cut_of_a_cut_the_store_lacks_is_refused(tmp_path):
    store = ShardStore(tmp_path / "db")
    assert read_cut(store, 0, 0, 1).meta is None  # cut 0: nothing to read
    with pytest.raises(StoreCorrupted, match="cut 4 is not in the store"):
        read_cut(store, 4, 0, 1)
