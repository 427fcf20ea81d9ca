"""A shard's export file: the rows of every sparse table side by side, and folder names only."""

from pathlib import Path

import numpy as np
import pytest

from ctr.model.spec import ModelSpec
from ps.server.errors import ShardError
from ps.server.export import changed_rows, export_folder
from ps.server.tables import SparseTable


def test_changed_rows_put_each_tables_weights_side_by_side_with_zeros_where_absent():
    w, v = (SparseTable(s) for s in ModelSpec("fm", k=2).tables() if s.kind == "sparse")
    w.apply("gradient", np.array([3, 7], dtype=np.uint64), np.ones(2), 1)
    v.apply("gradient", np.array([7], dtype=np.uint64), np.ones(2), 2)
    keys, rows = changed_rows([w, v], -1)
    assert keys.tolist() == [3, 7] and rows.shape == (2, 3)
    assert (rows[0, 1:] == 0).all() and (rows[1, 1:] != 0).any()  # key 3 has no v row
    later, _ = changed_rows([w, v], 1)
    assert later.tolist() == [7]  # only what changed after update 1


@pytest.mark.parametrize("name", ["../x", "a/b", "", "x" * 300])
def test_an_export_folder_is_a_name_under_the_root(tmp_path, name):
    with pytest.raises(ShardError):
        export_folder(tmp_path, name)
    with pytest.raises(ShardError, match="no export root"):
        export_folder(None, "v1")
    assert export_folder(Path("/r"), "v1") == Path("/r/v1")
