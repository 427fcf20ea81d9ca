"""Checkpoint cuts of a shard (ps/server/store.py, Shard.prepare/commit/restore) on a real RocksDB:
incremental and full cuts, the committed one loaded at start, going back to an older cut,
and pushes from an older trainer generation refused."""

from __future__ import annotations

import numpy as np
import pytest

from ctr.model.spec import ModelSpec
from ps.server.errors import ShardError, StaleGeneration
from ps.server.shard import Shard
from ps.server.store import ShardStore, StoreInUse

SPEC = ModelSpec("fm", k=4)


def _push(shard: Shard, keys: np.ndarray, scale: float, generation: int = 0) -> None:
    shard.push("v", keys, np.full((keys.shape[0], 4), scale), "gradient", samples=keys.shape[0], generation=generation)
    shard.push_dense("bias", np.array([[scale]]), "gradient", samples=keys.shape[0], generation=generation)


def _digests(shard: Shard) -> dict[str, tuple[int, int, int]]:
    return {t.name: (t.rows, t.digest, t.samples) for t in shard.stats()}


def test_cuts_commit_restore_and_reload(tmp_path):
    shard = Shard(0, 1, ShardStore(tmp_path / "db"), full_every=3)
    shard.declare(SPEC.tables())
    seen = {}
    for cut in range(1, 6):  # cuts 1 and 4 are full, the others hold only the rows changed
        _push(shard, np.arange(1, 50 * cut + 1, dtype=np.uint64) * np.uint64(7919), 0.1 * cut)
        rows = shard.prepare(cut, f'{{"cut": {cut}}}'.encode())
        assert rows == 50 * cut  # every row changed in each step, so full and incremental cuts agree here
        assert shard.commit(cut) == rows
        seen[cut] = _digests(shard)
    assert shard.cuts() == [1, 2, 3, 4, 5] and shard.committed.cut == 5
    _push(shard, np.array([3, 5], dtype=np.uint64), 9.0)  # after the last cut
    assert _digests(shard) != seen[5]

    shard.restore(3, generation=2)  # back to an older cut: cuts 4 and 5 are dropped
    assert _digests(shard) == seen[3] and shard.cuts() == [1, 2, 3] and shard.committed.offsets == b'{"cut": 3}'
    with pytest.raises(StaleGeneration):
        _push(shard, np.array([3], dtype=np.uint64), 1.0, generation=1)
    _push(shard, np.array([11], dtype=np.uint64), 0.5, generation=2)
    assert shard.prepare(4, b"x", generation=2) == 1  # the row changed; the writer then rewrites cut 4 whole
    shard.commit(4)
    assert shard.store.meta(4).full  # type: ignore[union-attr]
    expected = _digests(shard)
    shard.close()
    shard.store.close()  # type: ignore[union-attr]

    again = Shard(0, 1, ShardStore(tmp_path / "db"))  # a restart loads the committed cut
    assert again.committed.cut == 4 and _digests(again) == expected
    assert (again.generation, again.restored_cut) == (2, 3)  # and still refuses the trainers before
    with pytest.raises(StaleGeneration):
        _push(again, np.array([3], dtype=np.uint64), 1.0, generation=1)
    assert again.declare(SPEC.tables()).created == [False, False, False]
    with pytest.raises(ShardError, match="not newer"):
        again.prepare(4, b"", generation=2)


def test_late_copies_of_a_restore_and_a_commit_change_nothing(tmp_path):
    """A restore or a commit that passed its deadline is sent again, and the first copy may
    still run afterwards, once the hung shard answers: after the trainer's next pushes, or
    after its next commit. Run then, it would undo those pushes or move the cut back."""
    shard = Shard(0, 1, ShardStore(tmp_path / "db"))
    shard.declare(SPEC.tables())
    _push(shard, np.arange(1, 20, dtype=np.uint64), 0.1)
    shard.prepare(1, b"1")
    shard.commit(1)
    shard.restore(1, generation=2)
    _push(shard, np.array([5, 7], dtype=np.uint64), 0.3, generation=2)  # the trainer trains on
    pushed = _digests(shard)
    shard.restore(1, generation=2)  # the first copy, late
    assert _digests(shard) == pushed
    with pytest.raises(StaleGeneration, match="which restored cut 1"):
        shard.restore(0, generation=2)
    assert _digests(shard) == pushed
    with pytest.raises(StaleGeneration):
        shard.prepare(2, b"late", generation=1)  # a late copy from before the restore
    assert shard.cuts() == [1]
    shard.prepare(2, b"2", generation=2)
    shard.commit(2)
    shard.commit(1)  # a late copy of the commit before
    assert shard.committed.cut == 2 and shard.store.committed() == 2  # type: ignore[union-attr]
    shard.restore(1, generation=3)  # a new generation goes back as asked
    assert _digests(shard) != pushed and shard.committed.cut == 1
    assert shard.declare(SPEC.tables()).created == [False, False, False]  # the cut holds them


def test_a_declaration_sent_again_answers_as_the_first_did(tmp_path):
    """The trainer compares the shards' answers (a table restored on one shard and empty on
    another stops it); a declaration retried after its deadline, whose first copy ran
    late, answered "not empty" and stopped the trainer with a traceback."""
    shard = Shard(0, 1, ShardStore(tmp_path / "db"))
    shard.restore(0, generation=1)
    assert shard.declare(SPEC.tables()).created == [True, True, True]
    assert shard.declare(SPEC.tables()).created == [True, True, True]  # the retry, after the late first copy
    _push(shard, np.arange(1, 9, dtype=np.uint64), 0.1, generation=1)
    assert shard.declare(SPEC.tables()).created == [True, False, False]  # a second worker: v and bias written since
    shard.prepare(1, b"1", generation=1)
    shard.commit(1)
    shard.restore(1, generation=2)
    assert shard.declare(SPEC.tables()).created == [False, False, False]


def test_full_cuts_bound_the_chain_and_uncommitted_cuts_are_not_loaded(tmp_path):
    store = ShardStore(tmp_path / "db")
    shard = Shard(0, 1, store, full_every=2)
    shard.declare(SPEC.tables())
    keys = np.arange(1, 101, dtype=np.uint64)
    for cut in range(1, 8):
        _push(shard, keys[cut : cut + 10], 0.01)
        shard.prepare(cut, b"")
        shard.commit(cut)
    assert shard.cuts() == [5, 6, 7]  # full cuts 1, 3, 5, 7: committing 7 drops what is older than 5
    committed = _digests(shard)
    _push(shard, keys, 1.0)
    shard.prepare(8, b"")  # written, never committed
    shard.close()
    store.close()
    again = Shard(0, 1, ShardStore(tmp_path / "db"))
    assert again.committed.cut == 7 and _digests(again) == committed and 8 in again.cuts()
    again.commit(8)  # the trainer may still commit it: every shard holds it
    assert again.committed.cut == 8


def test_a_shard_without_store_restores_only_to_empty_tables():
    shard = Shard(0, 1)
    shard.declare(SPEC.tables())
    _push(shard, np.array([1, 2], dtype=np.uint64), 1.0)
    with pytest.raises(ShardError, match="without a data directory"):
        shard.prepare(1, b"")
    shard.restore(0, generation=1)
    assert shard.stats() == [] and shard.declare(SPEC.tables()).created == [True, True, True]


def test_gather_raw_equals_its_numpy_reference():
    from ps.server.kernels import gather_raw

    rng = np.random.default_rng(4)
    state = rng.normal(size=(50, 3))
    meta = rng.integers(0, 2**32, (50, 4), dtype=np.uint32)
    ids = rng.integers(0, 50, 20).astype(np.int64)
    reference = np.concatenate([state[ids].view(np.uint32), meta[ids]], axis=1)
    np.testing.assert_array_equal(gather_raw(state, meta, ids), reference)


def test_a_store_another_shard_has_open_is_refused_naming_the_folder(tmp_path):
    """RocksDB's LOCK keeps a second writer out; its message reached the operator as a
    traceback ending in "IO error: While lock file"."""
    held = ShardStore(tmp_path / "shard")
    try:
        with pytest.raises(StoreInUse, match=r"--data-dir .*shard: another process has this store open"):
            ShardStore(tmp_path / "shard")
    finally:
        held.close()
    ShardStore(tmp_path / "shard").close()  # closed: the next opens it


def test_a_store_opened_as_another_shard_or_count_is_refused_naming_both(tmp_path):
    """A store keeps its shard's rows (key hash mod the count): opened as shard 0 of 3 after
    shard 0 of 2, or as shard 1 (data folders swapped), it loaded and served the wrong keys."""
    from ps.server.store import StoreMisplaced

    Shard(0, 2, ShardStore(tmp_path / "s0")).close()
    for index, count in ((0, 3), (1, 2)):
        store = ShardStore(tmp_path / "s0")
        try:
            with pytest.raises(
                StoreMisplaced, match=rf"holds the rows of shard 0 of 2, and this process was started as shard {index} of {count}"
            ):
                Shard(index, count, store)
        finally:
            store.close()
    store = ShardStore(tmp_path / "s0")
    Shard(0, 2, store).close()  # its own place: opened as before
    store.close()
