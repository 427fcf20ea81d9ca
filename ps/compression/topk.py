"""Top-k row selection with the MSTopK threshold (Shi et al.): bisect a threshold between
the mean and the max of the row scores until about k rows pass, instead of sorting."""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@nb.njit(cache=True, nogil=True)
def row_scores(values: F64) -> F64:
    """Each row's magnitude: the sum over columns of |value| / the column's mean |value|, so
    columns of different scales (an FTRL row's z and n) weigh alike."""
    n, d = values.shape
    mean = np.zeros(d)
    for i in range(n):
        for c in range(d):
            mean[c] += abs(values[i, c])
    for c in range(d):
        mean[c] = mean[c] / n if mean[c] > 0 else 1.0
    out = np.zeros(n)
    for i in range(n):
        s = 0.0
        for c in range(d):
            s += abs(values[i, c]) / mean[c]
        out[i] = s
    return out


@nb.njit(cache=True, nogil=True)
def mstopk_threshold(scores: F64, k: int, rounds: int) -> float:
    """A threshold t with about k scores >= t, found by `rounds` bisections between the mean
    and the max of the scores (below the mean when k is more than pass the mean). Returns the
    bound whose count is closest to k without passing 2k."""
    n = scores.shape[0]
    if k >= n or n == 0:
        return -1.0
    lo = 0.0
    hi = 0.0
    for i in range(n):
        lo += scores[i]
        hi = max(hi, scores[i])
    lo /= n
    if _count_at_least(scores, lo) < k:
        lo = 0.0  # fewer than k rows pass the mean: bisect down to zero
    best = hi
    best_gap = abs(_count_at_least(scores, hi) - k)
    for _ in range(rounds):
        mid = 0.5 * (lo + hi)
        cnt = _count_at_least(scores, mid)
        if abs(cnt - k) < best_gap and cnt <= 2 * k:
            best = mid
            best_gap = abs(cnt - k)
        if cnt > k:
            lo = mid
        elif cnt < k:
            hi = mid
        else:
            break
    return best


@nb.njit(cache=True, nogil=True)
def _count_at_least(scores: F64, t: float) -> int:
    c = 0
    for i in range(scores.shape[0]):
        if scores[i] >= t:
            c += 1
    return c


@nb.njit(cache=True, nogil=True)
def rows_at_least(scores: F64, t: float) -> I64:
    """Indices of the rows whose score is >= t (and not zero), ascending."""
    out = np.empty(scores.shape[0], dtype=np.int64)
    m = 0
    for i in range(scores.shape[0]):
        if scores[i] >= t and scores[i] > 0.0:
            out[m] = i
            m += 1
    return out[:m].copy()
