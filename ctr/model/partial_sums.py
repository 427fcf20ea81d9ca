"""Sharded serving of LR and FM: each serving shard sums its features' share of every item
(w x, and for FM v x and (v x)^2 per factor); the router adds the shards' sums and finishes
the scores (`finish_fm`). A numpy reference for the tests."""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


@nb.njit(cache=True, nogil=True)
def partial_sums(context: I64, offsets: I64, indices: I64, x: F32, rows: F32, v_at: int, k: int) -> F32:
    """Per item, over the features given (one shard's share of a request; the context's
    share included in every item): [sum w x, then per factor t: sum v_t x, sum (v_t x)^2].
    A router adds these up across shards and finishes LR and FM exactly (finish_fm)."""
    width = 1 + 2 * k
    ctx = np.zeros(width, dtype=np.float64)
    _add_sums(ctx, context, rows, x, v_at, k)
    n = offsets.shape[0] - 1
    out = np.empty((n, width), dtype=np.float32)
    acc = np.empty(width, dtype=np.float64)
    for i in range(n):
        acc[:] = ctx
        _add_sums(acc, indices[offsets[i] : offsets[i + 1]], rows, x, v_at, k)
        for c in range(width):
            out[i, c] = acc[c]
    return out


@nb.njit(cache=True, inline="always")
def _add_sums(acc: npt.NDArray[np.float64], features: I64, rows: F32, x: F32, v_at: int, k: int) -> None:
    """acc += [w x, v_t x ..., (v_t x)^2 ...] over the features."""
    for a in range(features.shape[0]):
        j = features[a]
        acc[0] += rows[j, 0] * x[j]
        v = rows[j, v_at : v_at + k]
        for t in range(k):
            vx = v[t] * x[j]
            acc[1 + t] += vx
            acc[1 + k + t] += vx * vx


def finish_fm(sums: npt.NDArray[np.float64], k: int, bias: float, scale: npt.NDArray[np.float64]) -> F32:
    """Scores from partial sums added over every shard: sigmoid(bias + sum w x + scale *
    sum_t (S_t^2 - Q_t) / 2); k = 0 is LR."""
    z = bias + sums[:, 0]
    if k:
        s, q = sums[:, 1 : 1 + k], sums[:, 1 + k : 1 + 2 * k]
        z = z + scale * 0.5 * (s * s - q).sum(axis=1)
    return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)


def sum_squares_per_item(context: I64, offsets: I64, indices: I64, x: F32) -> npt.NDArray[np.float64]:
    """sum x^2 over the context and each item's features (FM's instance normalization)."""
    sq = x.astype(np.float64) ** 2
    ctx = float(sq[context].sum())
    per = np.add.reduceat(sq[indices], offsets[:-1]) if indices.shape[0] else np.zeros(offsets.shape[0] - 1)
    per = np.where(np.diff(offsets) > 0, per, 0.0)  # reduceat repeats a value for empty items
    return ctx + per  # type: ignore[no-any-return]


def partial_sums_reference(context: I64, offsets: I64, indices: I64, x: F32, rows: F32, v_at: int, k: int) -> F32:
    out = []
    for a, b in zip(offsets[:-1], offsets[1:], strict=True):
        feats = np.concatenate([context, indices[a:b]])
        xs = x[feats].astype(np.float64)
        lin = float((rows[feats, 0] * xs).sum())
        vx = rows[feats, v_at : v_at + k].astype(np.float64) * xs[:, None]
        out.append(np.concatenate([[lin], vx.sum(axis=0), (vx * vx).sum(axis=0)]))
    return np.array(out, dtype=np.float32).reshape(-1, 1 + 2 * k)
