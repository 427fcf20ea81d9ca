"""A table in memory as a training source: `boundless.train(df, label="clicked")`.

A pandas or polars DataFrame, a pyarrow Table or RecordBatch, anything that exports the
Arrow C stream (`__arrow_c_stream__`), a dict of columns or a list of row dicts is written
to a Parquet file in a temporary folder, and the trainer reads that file as it reads any
Parquet source (ctr.data.parquet_text): the same columns, label detection, list columns
and bad-row reports, with nothing new in the trainer. Each call writes a file of a new
name, so a checkpoint's position in an earlier table is never taken for a position in
this one: a second table on the same shards trains whole
([design](../docs/design/tables-as-sources.md)).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ctr.runtime.extras import require

KINDS = (
    "a path or URL (str or os.PathLike), or a table in memory: a pandas or polars DataFrame, a pyarrow Table or"
    " RecordBatch, a dict of columns or a list of row dicts"
)


def is_table(source: object) -> bool:
    """Whether `source` is a table in memory rather than a path or URL."""
    return not isinstance(source, str | os.PathLike)


def to_arrow(source: Any) -> Any:
    """`source` as a pyarrow Table; TypeError naming what it is when it is no table."""
    pa = require("pyarrow")
    if isinstance(source, pa.Table):
        return source
    if isinstance(source, pa.RecordBatch):
        return pa.Table.from_batches([source])
    if type(source).__module__.split(".")[0] == "pandas" and hasattr(source, "columns"):
        # pandas' own conversion keeps its nullable and categorical types; its index is not a feature
        return pa.Table.from_pandas(source, preserve_index=False)
    if hasattr(source, "__arrow_c_stream__"):  # polars, DuckDB relations, pandas >= 2.2...
        return pa.table(source)
    if isinstance(source, dict):
        return pa.table(source)
    if isinstance(source, list) and source and all(isinstance(row, dict) for row in source):
        return pa.Table.from_pylist(source)
    raise TypeError(f"source: expected {KINDS}; got {type(source).__module__}.{type(source).__qualname__}")


@contextmanager
def source_path(source: Any) -> Iterator[str]:
    """The path the trainer reads `source` from: itself for a path or URL; for a table, a
    Parquet file of it that lasts as long as the context."""
    if not is_table(source):
        yield os.fspath(source)
        return
    table = to_arrow(source)
    if table.num_rows == 0:
        raise ValueError("source: the table has no rows")
    parquet = require("pyarrow.parquet")
    with tempfile.TemporaryDirectory(prefix="boundless-table-") as folder:
        path = Path(folder) / f"table-{uuid.uuid4().hex}.parquet"
        parquet.write_table(table, path)
        yield str(path)
