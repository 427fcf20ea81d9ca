"""The logistic link and the instance normalization (libffm's r = 1 / sum x^2), shared by the
training and scoring kernels."""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


@nb.njit(cache=True, inline="always")
def sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + np.exp(-z))
    e = np.exp(z)
    return e / (1.0 + e)


@nb.njit(cache=True, inline="always")
def sum_sq(idx: I64, x: F32) -> float:
    sq = 0.0
    for a in range(idx.shape[0]):
        sq += x[idx[a]] * x[idx[a]]
    return sq


@nb.njit(cache=True, inline="always")
def norm_scale(sq_ctx: float, item: I64, x: F32, norm: bool) -> float:
    """r of an item (with the shared context): 1 / sum x^2 with instance normalization."""
    if not norm:
        return 1.0
    sq = sq_ctx + sum_sq(item, x)
    return 1.0 / sq if sq > 0 else 0.0
