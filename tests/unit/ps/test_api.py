"""A shard holds one model (ps.api): another trainer's model is refused before anything
changes, across restarts (the identity is in the store), and replaced only when asked; the
manager's spec comparison (modelmgr.publish.publisher.spec_change)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ctr.model.spec import ModelSpec
from modelmgr.publish.publisher import spec_change
from ps.api import ModelIdentity, ModelMismatch
from ps.server.shard import Shard
from ps.server.store import ShardStore

FFM = ModelSpec("ffm", k=2, fields=("a", "b"))
AVAZU = ModelIdentity.of("ctr", "ffm", ("a", "b"), sized_by_fields=True)


def _trained(tmp_path) -> Shard:
    shard = Shard(0, 1, ShardStore(tmp_path / "db"))
    shard.restore(0, 1, ModelIdentity("ctr", "ffm"))
    shard.declare(FFM.tables(), AVAZU)
    keys = np.arange(1, 41, dtype=np.uint64)
    shard.push("w", keys, np.full((40, 1), 0.5), "gradient", samples=40, generation=1)
    shard.prepare(1, b"{}", generation=1)
    shard.commit(1)
    return shard


def _rows(shard: Shard) -> dict[str, int]:
    return {t.name: t.rows for t in shard.stats()}


def test_another_model_is_refused_before_anything_changes(tmp_path):
    shard = _trained(tmp_path)
    before = _rows(shard)
    for other in (ModelIdentity("criteo", "ffm"), ModelIdentity("ctr", "fm")):
        with pytest.raises(ModelMismatch, match="holds model 'ctr'"):
            shard.restore(0, 2, other)
    criteo = ModelIdentity.of("ctr", "ffm", tuple(f"C{i}" for i in range(26)), sized_by_fields=True)
    with pytest.raises(ModelMismatch, match="26 fields"):
        shard.restore(0, 2, criteo)
    with pytest.raises(ModelMismatch):
        shard.declare(ModelSpec("ffm", k=2, fields=tuple(f"C{i}" for i in range(26))).tables(), criteo)
    assert _rows(shard) == before and shard.committed.cut == 1
    shard.restore(1, 2, AVAZU)  # the same model takes up at its cut
    assert _rows(shard) == before
    shard.close()
    shard.store.close()  # type: ignore[union-attr]

    again = Shard(0, 1, ShardStore(tmp_path / "db"))  # the identity survives a restart
    with pytest.raises(ModelMismatch):
        again.restore(0, 3, ModelIdentity("criteo", "ffm"))
    again.restore(0, 3, ModelIdentity("criteo", "ffm"), replace=True)
    assert again.cuts() == [] and not again.sparse and again.model == ModelIdentity("criteo", "ffm")
    again.declare(FFM.tables(), ModelIdentity.of("criteo", "ffm", ("a", "b"), sized_by_fields=True))


def test_a_replacing_declaration_drops_the_old_field_list(tmp_path):
    shard = _trained(tmp_path)
    wide = ModelSpec("ffm", k=2, fields=("a", "b", "c"))
    ident = ModelIdentity.of("ctr", "ffm", wide.fields, sized_by_fields=True)
    shard.restore(1, 2, ModelIdentity("ctr", "ffm"))  # name and type agree; the fields come with the tables
    assert shard.declare(wide.tables(), ident, replace=True).created == [True, True, True]
    assert shard.cuts() == [] and shard.model == ident


def test_the_manager_tells_another_model_from_a_grown_field_list():
    lr = {"type": "lr", "fields": ["a", "b"]}
    assert spec_change(lr, {"type": "lr", "fields": ["a", "b", "c"]}) is None  # an LR's list grows with the stream
    assert "fields" in str(spec_change(lr, {"type": "lr", "fields": ["b", "a"]}))
    assert "a fm model" in str(spec_change(lr, {"type": "fm", "fields": ["a", "b"]}))
    ffm = {"type": "ffm", "fields": ["a", "b"]}
    assert "fields" in str(spec_change(ffm, {"type": "ffm", "fields": ["a", "b", "c"]}))  # its tables are sized by them


def test_other_settings_of_a_tables_optimizer_are_taken_up_and_kept(tmp_path):
    """A trainer restarted with another rate or l1 steps its rows with them; the shard's
    own steps, new rows and the weights it derives (pulls, exports) must follow, or the
    served model is not the one trained (FTRL's weights come from its state by l1 and l2)."""
    shard = _trained(tmp_path)
    keys = np.arange(1, 41, dtype=np.uint64)
    _, state = shard.pull("w", keys, open_session=False, state=True)
    _, weights = shard.pull("w", keys, open_session=False, state=False)
    assert np.count_nonzero(weights) == 40
    sparse = dataclasses.replace(FFM, optimizers=(("w", dataclasses.replace(FFM.optimizer("w"), l1=1e6)),))
    declared = shard.declare(sparse.tables(), AVAZU)
    assert declared.retuned == ["w: ftrl l1 0.1 -> 1e+06"]
    _, after = shard.pull("w", keys, open_session=False, state=True)
    np.testing.assert_array_equal(after, state)  # the rows keep their state
    _, weights = shard.pull("w", keys, open_session=False, state=False)
    assert np.count_nonzero(weights) == 0  # derived with the new l1
    assert shard.declare(sparse.tables(), AVAZU).retuned == []
    shard.close()
    shard.store.close()  # type: ignore[union-attr]

    again = Shard(0, 1, ShardStore(tmp_path / "db"))  # the store keeps the settings taken up
    assert again.sparse["w"].spec.optimizer.l1 == 1e6
    assert again.declare(FFM.tables(), AVAZU).retuned == ["w: ftrl l1 1e+06 -> 0.1"]


def test_a_table_laid_out_otherwise_is_another_model(tmp_path):
    """Another --k (or --hidden, or optimizer kind) cannot read the rows held: refused at the
    restore, before anything changes, naming the table; --replace-model drops them."""
    shard = _trained(tmp_path)
    before = _rows(shard)
    wider = ModelSpec("ffm", k=4, fields=("a", "b"))
    ident = ModelIdentity.of("ctr", "ffm", wider.fields, sized_by_fields=True, tables=wider.tables())
    with pytest.raises(ModelMismatch, match=r"table v: sparse dim 4 \(adagrad\) held, sparse dim 8 \(adagrad\) declared"):
        shard.restore(1, 2, ident)
    with pytest.raises(ModelMismatch, match="table v: sparse dim 4"):
        shard.declare(wider.tables(), ident)
    assert _rows(shard) == before and shard.cuts() == [1]
    shard.restore(1, 2, ident, replace=True)
    assert shard.cuts() == [] and shard.declare(wider.tables(), ident).created == [True, True, True]


def test_layouts_compare_the_tables_both_name():
    fm = ModelSpec("fm", k=4).tables()
    a = ModelIdentity.of("ctr", "fm", tables=fm)
    assert not a.conflict(ModelIdentity("ctr", "fm"))  # a layout not known conflicts with none
    assert a.conflict(ModelIdentity.of("ctr", "fm", tables=ModelSpec("fm", k=8).tables()))
    assert not a.conflict(ModelIdentity.of("ctr", "fm", tables=fm[:1]))
