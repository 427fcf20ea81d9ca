"""numba kernels of the error-feedback memory (ps.compression.residuals), each with a plain
reference its tests compare against."""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@nb.njit(cache=True, nogil=True)
def rows_at(rows: F64, at: I64, cols: int) -> F64:
    """rows[at[i]] for each i, a row of zeros where at[i] < 0: a push's residuals by slot, in
    one pass where the mask, the gather and the scatter took four array operations."""
    out = np.zeros((at.shape[0], cols))
    for i in range(at.shape[0]):
        if at[i] >= 0:
            out[i] = rows[at[i]]
    return out


@nb.njit(cache=True, nogil=True)
def put_at(rows: F64, last: I64, at: I64, values: F64, tick: int) -> None:
    """rows[at[i]] = values[i] for each i (every at[i] >= 0), and last[at[i]] = tick unless
    tick < 0 (an untouched put): numpy's fancy scatter of the rows was a tenth of a two-rank
    LR push's compression."""
    for i in range(at.shape[0]):
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
