"""Tables in memory as training sources (boundless.frames): what is a table, how it becomes
a Parquet file, and what is refused with a reason."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from boundless import frames


def test_paths_and_urls_pass_through_untouched(tmp_path: Path) -> None:
    for source in ("clicks.csv", "kafka://h:1/t", "-", tmp_path / "x.csv"):
        assert not frames.is_table(source)
        with frames.source_path(source) as path:
            assert path == os.fspath(source)


def test_each_kind_of_table_becomes_the_same_arrow_table() -> None:
    want = pa.table({"clicked": [1, 0], "ad": ["a", "b"]})
    kinds = [
        want,
        want.to_batches()[0],
        {"clicked": [1, 0], "ad": ["a", "b"]},
        [{"clicked": 1, "ad": "a"}, {"clicked": 0, "ad": "b"}],
    ]
    for source in kinds:
        assert frames.is_table(source) and frames.to_arrow(source).equals(want)


class ArrowStream:
    """An object that offers its rows only through the Arrow C stream protocol, as polars'
    and DuckDB's frames do."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def __arrow_c_stream__(self, requested_schema: object = None) -> object:
        return self.table.__arrow_c_stream__(requested_schema)


def test_an_arrow_c_stream_is_a_table() -> None:
    want = pa.table({"clicked": [1, 0], "ad": ["a", "b"]})
    source = ArrowStream(want)
    assert frames.is_table(source) and frames.to_arrow(source).equals(want)


def test_a_table_is_written_once_per_run_under_a_new_name() -> None:
    table = pa.table({"clicked": [1, 0, 1], "tags": [["x", "y"], [], None]})
    with frames.source_path(table) as one, frames.source_path(table) as two:
        assert one != two and Path(one).name != Path(two).name  # a cut's file is never the next table's
        assert pq.read_table(one).equals(table)  # list columns and nulls kept
    assert not Path(one).exists() and not Path(one).parent.exists()


def test_what_is_no_table_is_refused_naming_what_it_is() -> None:
    for source in (42, [1, 2], [], ("a", "b")):
        with pytest.raises(TypeError, match=r"a pandas or polars DataFrame.*got builtins\."):
            frames.to_arrow(source)
    with pytest.raises(ValueError, match="no rows"), frames.source_path({"clicked": []}):
        pass
