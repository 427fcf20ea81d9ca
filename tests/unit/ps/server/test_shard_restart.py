"""A shard restarted from its store exports the model as it did before: the same rows in the
same column order. Tables loaded from RocksDB came back in the store's (alphabetical) order,
so an FFM exported after a restart wrote v's columns before w's, and serving scored the
re-exported model as noise (AUC 0.47 where the same weights gave 0.70)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctr.format import modelfile
from ctr.model.spec import ModelSpec
from ps.server.shard import Shard
from ps.server.store import ShardStore

SPEC = ModelSpec("ffm", k=2, fields=("a", "b", "c"))


def _image(shard: Shard, root: Path, name: str) -> tuple[str, np.ndarray, np.ndarray]:
    (f,), _ = shard.export(True, name)
    image = modelfile.load_image(root / name / f.name, mmap=False)
    keys, slots = image.items()
    order = np.argsort(keys)
    return f.columns, keys[order], image.gather(slots)[order]


def test_a_restarted_shard_exports_the_same_columns(tmp_path: Path):
    shard = Shard(0, 1, ShardStore(tmp_path / "db"), export_root=tmp_path / "exports")
    shard.declare(SPEC.tables())
    keys = np.arange(1, 501, dtype=np.uint64)
    rng = np.random.default_rng(0)
    for t in ("w", "v"):
        dim = 1 if t == "w" else 6
        shard.push(t, keys, rng.normal(size=(500, dim)), "gradient", samples=500)
    shard.prepare(1, b"1")
    shard.commit(1)
    before = _image(shard, tmp_path / "exports", "a")
    shard.close()
    shard.store.close()  # type: ignore[union-attr]

    again = Shard(0, 1, ShardStore(tmp_path / "db"), export_root=tmp_path / "exports")
    again.restore(1, generation=1)
    again.declare(SPEC.tables())  # as a trainer does after the restore
    after = _image(again, tmp_path / "exports", "b")
    assert before[0] == after[0] == "w:1,v:6"
    np.testing.assert_array_equal(before[1], after[1])
    np.testing.assert_array_equal(before[2], after[2])


def test_serving_refuses_columns_out_of_the_kernels_order():
    import pytest

    from serving.loading.servable import check_columns, parse_columns

    check_columns(parse_columns("w:1,v:6"), SPEC)
    with pytest.raises(ValueError, match="not the ffm model's table order"):
        check_columns(parse_columns("v:6,w:1"), SPEC)
