"""Quality metrics: ROC AUC (rank based, ties averaged), the standard error of the difference
of two AUCs on the same samples (DeLong), and logloss."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

EPS = 1e-7


def midranks(values: npt.ArrayLike) -> np.ndarray:
    """1-based ranks, tied values sharing the mean of their ranks."""
    s = np.asarray(values, dtype=np.float64)
    order = np.argsort(s, kind="mergesort")
    _, first, counts = np.unique(s[order], return_index=True, return_counts=True)
    ranks = np.empty(s.size, dtype=np.float64)
    ranks[order] = np.repeat(first + (counts + 1) / 2.0, counts)
    return ranks


def auc(labels: npt.ArrayLike, scores: npt.ArrayLike) -> float:
    """Area under the ROC curve; NaN when only one class is present."""
    y = np.asarray(labels, dtype=np.float64) > 0.5
    s = np.asarray(scores, dtype=np.float64)
    pos = int(y.sum())
    neg = y.size - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return float((midranks(s)[y].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def auc_difference_se(labels: npt.ArrayLike, a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """Standard error of auc(labels, a) - auc(labels, b) when both score the same samples:
    DeLong, DeLong & Clarke-Pearson (1988), with the placement values from midranks (Sun &
    Xu 2014), O(n log n). Two models scored on one holdout are correlated, so the paired
    error is far smaller than either AUC's own. NaN with fewer than two of either class."""
    y = np.asarray(labels, dtype=np.float64) > 0.5
    m, n = int(y.sum()), int(y.size - y.sum())
    if m < 2 or n < 2:
        return float("nan")
    v10, v01 = [], []  # per positive: the share of negatives it outranks; per negative: of positives outranking it
    for s in (np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)):
        pos, neg = s[y], s[~y]
        both = midranks(np.concatenate([pos, neg]))
        v10.append((both[:m] - midranks(pos)) / n)
        v01.append(1.0 - (both[m:] - midranks(neg)) / m)
    s10, s01 = np.cov(np.stack(v10)), np.cov(np.stack(v01))
    var = (s10[0, 0] + s10[1, 1] - 2 * s10[0, 1]) / m + (s01[0, 0] + s01[1, 1] - 2 * s01[0, 1]) / n
    return float(np.sqrt(max(var, 0.0)))


def logloss(labels: npt.ArrayLike, probs: npt.ArrayLike) -> float:
    y = np.asarray(labels, dtype=np.float64)
    p = np.clip(np.asarray(probs, dtype=np.float64), EPS, 1 - EPS)
    if y.size == 0:
        return float("nan")
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
