"""numba kernels of the error-feedback memory (ps.compression.residuals), each with a plain
reference its tests compare against."""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.runtime.prefetch import GATHER_AHEAD, prefetch_ends, prefetch_item

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@nb.njit(cache=True, nogil=True)
def rows_at(rows: F64, at: I64, cols: int) -> F64:
    """rows[at[i]] for each i, a row of zeros where at[i] < 0: a push's residuals by slot, in
    one pass where the mask, the gather and the scatter took four array operations; each
    row prefetched GATHER_AHEAD ahead (a push's slots are random in the store)."""
    n = at.shape[0]
    out = np.zeros((n, cols))
    for i in range(n):
        if i + GATHER_AHEAD < n and at[i + GATHER_AHEAD] >= 0:
            prefetch_ends(rows, at[i + GATHER_AHEAD])
        if at[i] >= 0:
            out[i] = rows[at[i]]
    return out


@nb.njit(cache=True, nogil=True)
def put_at(rows: F64, last: I64, at: I64, values: F64, tick: int) -> None:
    """rows[at[i]] = values[i] for each i (every at[i] >= 0), and last[at[i]] = tick unless
    tick < 0 (an untouched put): numpy's fancy scatter of the rows was a tenth of a two-rank
    LR push's compression. Rows and ticks prefetched GATHER_AHEAD ahead."""
    n = at.shape[0]
    for i in range(n):
        if i + GATHER_AHEAD < n:
            prefetch_ends(rows, at[i + GATHER_AHEAD])
            if tick >= 0:
                prefetch_item(last, at[i + GATHER_AHEAD])  # type: ignore[call-arg]
        rows[at[i]] = values[i]
        if tick >= 0:
            last[at[i]] = tick


def put_at_reference(rows: F64, last: I64, at: I64, values: F64, tick: int) -> None:
    for i, a in enumerate(at.tolist()):
        rows[a] = values[i]
        if tick >= 0:
            last[a] = tick


def rows_at_reference(rows: F64, at: I64, cols: int) -> F64:
    return np.array([rows[a] if a >= 0 else np.zeros(cols) for a in at.tolist()]).reshape(at.shape[0], cols)
