"""A Parquet file read as the CSV text the trainer's parser takes (`--source x.parquet`,
`.parquet` files in a followed folder, or `.parquet` objects under an `s3://` prefix, read
through pyarrow's S3 file system with boto3's environment: AWS_ENDPOINT_URL, credentials).

Each row group is rendered by Arrow's C++ CSV writer (no Python per row) into lines of
comma-separated values under one header line of the file's column names, so a Parquet file
trains exactly as the CSV of the same values does: the same parser, feature transform,
batches, bad-line accounting and exactly-once machinery. The stream position is a byte
offset in that rendered text; it names one row (line n is row n - 1: the header is line 0's
text), and `seek` renders row groups from the start until it reaches the offset, so a
restart at a checkpoint cut takes up at the same row. Arrow renders a value the same way
every time, so offsets mean the same after a restart.

A row group with a string that holds a comma or a quote is written with its strings
quoted as CSV quotes them (ctr.data.csv_line), so the value trains as it stands (a user
agent's "KHTML, like Gecko" is the value a client sends). A line break cannot be inside a
line: it is written as `_`, and counted and named (file, row group, column) in the log, as
a malformed value. Nulls become empty fields (a missing feature, or a bad label). A list
column of numbers, booleans or strings (a user's tags, a history of item ids) is one field
of several values: its values are joined by LIST_SEPARATOR, which the parser splits at
(`lists`), so each value is a feature of the field, as kv's repeated `tags=x<TAB>tags=y`.
"""

from __future__ import annotations

import io
import itertools
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctr.data.schema import LIST_SEPARATOR
from ctr.runtime.extras import require

log = logging.getLogger("trainer")
BREAKS = r"[\r\n]"


def is_parquet(name: str) -> bool:
    return name.endswith(".parquet")


@dataclass(frozen=True)
class _Ahead:
    future: Future[bytes]
    group: int

    def result(self) -> bytes:
        return self.future.result()


class ParquetText(io.RawIOBase):
    """The rendered text of one Parquet file, read forward from any offset. `retry(since,
    attempt)`, where given (an S3 object's, trainer.input.s3_source), decides whether a row
    group that has failed to read for an I/O error (S3 not reached) since `since`, `attempt`
    times before, is read again (it waits first; False: give up, and the error is raised);
    without it, such a row group is skipped as damaged."""

    def __init__(self, path: str | Path, retry: Callable[[float, int], bool] | None = None) -> None:
        require("pyarrow")
        import pyarrow.parquet as pq

        self.path = str(path)
        self.retry = retry
        if self.path.startswith("s3://"):  # an object read in ranges, a row group at a time (pyarrow's S3)
            import pyarrow.fs as pafs

            fs, key = pafs.FileSystem.from_uri(self.path)
            opened = fs.open_input_file(key)
            self.size = int(opened.size())
            self.file = pq.ParquetFile(opened)
        else:
            self.size = os.path.getsize(self.path)
            self.file = pq.ParquetFile(self.path)
        self.columns, self.lists = _rendered_columns(self.path, self.file.schema_arrow)
        self.header = (",".join(self.columns) + "\n").encode()
        self.malformed = 0  # values rewritten: they held a line break
        self.failed_groups = 0  # row groups that could not be read
        self._next_group = 0
        # rows in the row groups up to each one: disk_per_text asks at every block read
        self._rows_through = list(itertools.accumulate(self.rows_of(g) for g in range(self.row_groups)))
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="parquet")
        self._ahead: _Ahead | None = None  # the next row group, rendering
        self._buf = self.header  # text not read yet
        self._at = 0  # the offset of _buf's first byte

    @property
    def row_groups(self) -> int:
        return int(self.file.num_row_groups)

    def disk_per_text(self) -> float | None:
        """The file's bytes per byte of its text, from the rows rendered so far (None before
        any): a position in the text, times this, is about where the file stands on disk."""
        done = min(self._next_group, self.row_groups)
        rows = self._rows_through[done - 1] if done else 0
        text = self._at + len(self._buf) - len(self.header)
        total = self._rows_through[-1] if self._rows_through else 0
        if rows <= 0 or text <= 0 or total <= 0:
            return None
        return self.size / (len(self.header) + text / rows * total)

    def rows_of(self, group: int) -> int:
        return int(self.file.metadata.row_group(group).num_rows)

    def where(self, line: int) -> str:
        """Row group and row of a text line (1: the first row)."""
        row = line - 1
        for g in range(self.row_groups):
            n = self.rows_of(g)
            if row < n:
                return f"row group {g}, row {row}"
            row -= n
        return f"line {line}"

    def _render(self, group: int) -> bytes:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.csv as pacsv

        try:
            table = self.file.read_row_group(group, columns=self.columns)
        except OSError as e:
            if self.retry is None:
                self.failed_groups += 1
                log.error("%s: row group %d cannot be read (%s); skipped", self.path, group, e)
                return b""
            table = self._read_again(group, e)
        except Exception as e:  # noqa: BLE001 - a damaged row group is skipped, the rest trained
            self.failed_groups += 1
            log.error("%s: row group %d cannot be read (%s); skipped", self.path, group, e)
            return b""
        table = _as_python_writes(table)
        options = pacsv.WriteOptions(include_header=False, quoting_style="none")
        sink = io.BytesIO()
        try:  # the usual case: no value needs quoting, and Arrow says so while it writes
            pacsv.write_csv(table, sink, options)
            return sink.getvalue()
        except pa.ArrowInvalid:
            pass  # some value holds a comma, quote or line break: quoted, or rewritten, below
        columns = []
        for name, col in zip(table.column_names, table.columns, strict=True):
            if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
                bad = pc.sum(pc.match_substring_regex(col, BREAKS)).as_py() or 0
                if bad:
                    self.malformed += bad
                    log.warning(
                        "%s: row group %d, column %s: %d value(s) with a line break; written with _",
                        self.path,
                        group,
                        name,
                        bad,
                    )
                    col = pc.replace_substring_regex(col, BREAKS, "_")
            columns.append(col)
        sink = io.BytesIO()
        quoted = pacsv.WriteOptions(include_header=False, quoting_style="needed")  # strings quoted, "" inside
        pacsv.write_csv(pa.table(columns, names=table.column_names), sink, quoted)
        return sink.getvalue()

    def _read_again(self, group: int, error: OSError) -> Any:
        """A row group whose read failed for `error` (S3 not reached), read again after the
        waits `retry` makes; said once a minute. Raises the last error where `retry` gives
        up (and whatever it raises to stop)."""
        assert self.retry is not None
        since, said = time.monotonic(), -60.0
        for attempt in itertools.count():
            if time.monotonic() - said >= 60.0:
                log.warning("%s: row group %d cannot be read (%s); read again once S3 answers", self.path, group, error)
                said = time.monotonic()
            if not self.retry(since, attempt):
                raise error
            try:
                return self.file.read_row_group(group, columns=self.columns)
            except OSError as e:
                error = e
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        super().close()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence != io.SEEK_SET:
            raise io.UnsupportedOperation("ParquetText seeks from the start only")
        self._next_group, self._buf, self._at = 0, self.header, 0
        while self._at + len(self._buf) <= offset and self._next_group < self.row_groups:
            self._at += len(self._buf)
            self._buf = self._render(self._next_group)
            self._next_group += 1
        skip = min(len(self._buf), max(0, offset - self._at))
        self._buf, self._at = self._buf[skip:], self._at + skip
        return self._at

    def tell(self) -> int:
        return self._at

    def _take_next(self) -> bytes:
        """The next row group's text; the one after it renders meanwhile on a thread (Arrow
        releases the GIL), so the parser of this one and the rendering of the next overlap."""
        group = self._next_group
        ahead, self._ahead = self._ahead, None
        text = ahead.result() if ahead is not None and ahead.group == group else self._render(group)
        self._next_group += 1
        if self._next_group < self.row_groups:
            self._ahead = _Ahead(self._pool.submit(self._render, self._next_group), self._next_group)
        return text

    def read(self, size: int = -1) -> bytes:
        while not self._buf and self._next_group < self.row_groups:
            self._buf = self._take_next()
        n = len(self._buf) if size is None or size < 0 else size
        out, self._buf = self._buf[:n], self._buf[n:]
        self._at += len(out)
        return out

    def read1(self, size: int = -1) -> bytes:
        return self.read(size)

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


_told_nested: set[tuple[str, ...]] = set()


def _is_value_list(t: Any) -> bool:
    """A list of numbers, booleans or strings: a multi-valued feature's column."""
    import pyarrow as pa

    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)):
        return False
    v = t.value_type
    return bool(pa.types.is_integer(v) or pa.types.is_floating(v) or pa.types.is_boolean(v) or _is_text(v))


def _is_text(t: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _rendered_columns(path: str, schema: Any) -> tuple[list[str], tuple[str, ...]]:
    """(the columns the text holds, those of them that are lists). A list of numbers,
    booleans or strings is one field of several values, joined by LIST_SEPARATOR (a user's
    tags, a history of item ids); struct, map and nested-list columns are left out, with a
    warning once a process for each set of them."""
    import pyarrow as pa

    lists = tuple(f.name for f in schema if _is_value_list(f.type))
    nested = [f for f in schema if pa.types.is_nested(f.type) and f.name not in lists]
    names = tuple(f.name for f in nested)
    if nested and names not in _told_nested:
        _told_nested.add(names)
        log.warning(
            "%s: column(s) %s are not trained: a struct, map or nested list column is not one field"
            " (flatten it into columns, or into a list of values)",
            path,
            ", ".join(f"{f.name} ({f.type})" for f in nested),
        )
    return [f.name for f in schema if not pa.types.is_nested(f.type) or f.name in lists], lists


def _python_text(values: Any) -> Any:
    """Float and boolean values as the text Python's str() gives them (NaN, like null, as
    ''); other values as they are."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_floating(values.type):
        floats = values.to_numpy(zero_copy_only=False)  # nulls read as NaN
        text = floats.astype(str)
        text[np.isnan(floats)] = ""
        return pa.array(text, type=pa.string())
    if pa.types.is_boolean(values.type):
        return pc.if_else(values, "True", "False")
    return values


def _joined(col: Any) -> Any:
    """A list column as one string column: each row's values joined by LIST_SEPARATOR (a
    null value an empty piece, which the parser skips), a null list an empty field."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_fixed_size_list(arr.type):
        arr = arr.cast(pa.list_(arr.type.value_type))
    if not len(arr):
        return pc.binary_join(arr.cast(pa.list_(pa.string())), LIST_SEPARATOR)
    values = _python_text(arr.values)
    values = values if _is_text(values.type) else values.cast(pa.string())
    # a value holding the separator would split: it is written with _
    values = pc.fill_null(pc.replace_substring(values, LIST_SEPARATOR, "_"), "")
    return pc.binary_join(pa.ListArray.from_arrays(arr.offsets, values, mask=arr.is_null()), LIST_SEPARATOR)


def _as_python_writes(table: Any) -> Any:
    """The table with its float and bool columns as the text Python's str() gives them (and
    pandas' to_csv, and a client sending the values), not Arrow's: a float id 15706.0 is
    "15706.0", not "15706", and True is "True", not "true", so a categorical column of them
    trains on the tokens a client's values hash to. NaN, like null, is an empty field (a
    missing feature). Numeric columns bucket the same number either way."""
    import pyarrow as pa

    columns, changed = [], False
    for col in table.columns:
        if _is_value_list(col.type):
            col, changed = _joined(col), True
        elif pa.types.is_floating(col.type) or pa.types.is_boolean(col.type):
            col, changed = _python_text(col), True
        columns.append(col)
    return pa.table(columns, names=table.column_names) if changed else table
