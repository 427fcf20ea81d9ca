"""Rows read where they sit: a request's dictionary entries located in bucket tables
(serving.loading.bucket_locate) or plain [n, R] rows, seen by the kernels alike."""

from __future__ import annotations

from typing import Any

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.runtime.prefetch import prefetch_span

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


@nb.njit(cache=True, inline="always")
def _row_place(located: Any, j: int) -> tuple[Any, int, int, int]:
    """(table, bucket, first word, width) of entry j's row: see row_at."""
    tables, src, slot, shift, head = located
    t = tables[src[j]]
    width = (t.shape[1] - head) >> shift
    b = slot[j] >> shift
    return t, b, head + (slot[j] - (b << shift)) * width, width


@nb.njit(cache=True, inline="always")
def row_at(located: Any, j: int) -> F32:
    """The row of dictionary entry j where it sits. `located` is (tables, src, slot,
    shift, head): the row is in table src[j], slot slot[j] (bucket slot >> shift, after
    the bucket's `head` words); rows of a plain [n, R] array are shift 0, head 0. The
    caller skips entries with src[j] < 0 (absent: zero rows)."""
    t, b, at, width = _row_place(located, j)
    return t[b, at : at + width]  # type: ignore[no-any-return]


@nb.njit(cache=True, inline="always")
def prefetch_row(located: Any, j: int) -> None:
    """Every cache line of entry j's row (row_at), when present."""
    if located[1][j] >= 0:
        t, b, at, width = _row_place(located, j)
        prefetch_span(t, b, at, at + width - 1)


def rows_as_tables(rows: F32) -> tuple[tuple[F32], I64, I64, int, int]:
    """Plain rows [n, R] as located rows (row_at)."""
    n = rows.shape[0]
    view = rows.view()
    view.flags.writeable = False  # the type of the images' read-only tables
    return (view,), np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.int64), 0, 0
