"""numba scoring kernels of the prediction service, each with a numpy reference.

A request's features index its dictionary; `rows[n, R]` are the dictionary entries'
looked-up weights (w in column 0, the k- or F*k-vector from column v_at). The shared
context's share is computed once per request: its linear sum, for FM its sum and sum of
squares of v x, for FFM the context-by-context pairs, for the DNNs its pooled fields.
"""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.lr import sigmoid

F32 = npt.NDArray[np.float32]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


@nb.njit(cache=True, nogil=True)
def lr_score_items(context: I64, offsets: I64, indices: I64, contrib: F32, bias: float) -> F32:
    """sigmoid(bias + sum of context contributions + sum of the item's contributions)."""
    base = bias
    for j in range(context.shape[0]):
        base += contrib[context[j]]
    out = np.empty(offsets.shape[0] - 1, dtype=np.float32)
    for i in range(out.shape[0]):
        z = base
        for j in range(offsets[i], offsets[i + 1]):
            z += contrib[indices[j]]
        out[i] = sigmoid(z)
    return out


@nb.njit(cache=True, nogil=True)
def fm_score_items(
    context: I64, offsets: I64, indices: I64, x: F32, rows: F32, v_at: int, k: int, bias: float, norm: bool
) -> F32:
    base = bias
    s_ctx = np.zeros(k, dtype=np.float64)
    q_ctx = np.zeros(k, dtype=np.float64)
    sq_ctx = _sum_sq(context, x)
    for c in range(context.shape[0]):
        j = context[c]
        base += rows[j, 0] * x[j]
        for t in range(k):
            vx = rows[j, v_at + t] * x[j]
            s_ctx[t] += vx
            q_ctx[t] += vx * vx
    out = np.empty(offsets.shape[0] - 1, dtype=np.float32)
    s = np.empty(k, dtype=np.float64)
    q = np.empty(k, dtype=np.float64)
    for i in range(out.shape[0]):
        z = base
        s[:] = s_ctx
        q[:] = q_ctx
        # a feature's row is read once, all k factors from its cache line (a loop over the
        # factors outside the features read each row k times: 3x slower); every sum still
        # adds the features in the same order
        for a in range(offsets[i], offsets[i + 1]):
            j = indices[a]
            xj = x[j]
            z += rows[j, 0] * xj
            for t in range(k):
                vx = rows[j, v_at + t] * xj
                s[t] += vx
                q[t] += vx * vx
        pairs = 0.0
        for t in range(k):
            pairs += 0.5 * (s[t] * s[t] - q[t])
        out[i] = sigmoid(z + _scale(sq_ctx, indices[offsets[i] : offsets[i + 1]], x, norm) * pairs)
    return out


@nb.njit(cache=True, inline="always")
def _sum_sq(idx: I64, x: F32) -> float:
    sq = 0.0
    for a in range(idx.shape[0]):
        sq += x[idx[a]] * x[idx[a]]
    return sq


@nb.njit(cache=True, inline="always")
def _scale(sq_ctx: float, item: I64, x: F32, norm: bool) -> float:
    """r of an item (with the shared context): 1 / sum x^2 with instance normalization."""
    if not norm:
        return 1.0
    sq = sq_ctx + _sum_sq(item, x)
    return 1.0 / sq if sq > 0 else 0.0


@nb.njit(cache=True, inline="always")
def _ffm_pair(rows: F32, x: F32, fields: I32, a: int, b: int, v_at: int, k: int) -> float:
    fa, fb = fields[a], fields[b]
    dot = 0.0
    for t in range(k):
        dot += rows[a, v_at + fb * k + t] * rows[b, v_at + fa * k + t]
    return dot * x[a] * x[b]


@nb.njit(cache=True, nogil=True)
def ffm_score_items(
    context: I64, offsets: I64, indices: I64, x: F32, fields: I32, rows: F32, v_at: int, k: int, bias: float, norm: bool
) -> F32:
    base = bias
    ctx_pairs = 0.0
    sq_ctx = _sum_sq(context, x)
    for c in range(context.shape[0]):
        base += rows[context[c], 0] * x[context[c]]
        for d in range(c + 1, context.shape[0]):
            ctx_pairs += _ffm_pair(rows, x, fields, context[c], context[d], v_at, k)
    out = np.empty(offsets.shape[0] - 1, dtype=np.float32)
    for i in range(out.shape[0]):
        z = base
        pairs = ctx_pairs
        lo, hi = offsets[i], offsets[i + 1]
        for a in range(lo, hi):
            ja = indices[a]
            z += rows[ja, 0] * x[ja]
            for c in range(context.shape[0]):
                pairs += _ffm_pair(rows, x, fields, ja, context[c], v_at, k)
            for b in range(a + 1, hi):
                pairs += _ffm_pair(rows, x, fields, ja, indices[b], v_at, k)
        out[i] = sigmoid(z + _scale(sq_ctx, indices[lo:hi], x, norm) * pairs)
    return out


@nb.njit(cache=True, nogil=True)
def deep_inputs(
    context: I64,
    offsets: I64,
    indices: I64,
    x: F32,
    fields: I32,
    rows: F32,
    v_at: int,
    k: int,
    n_fields: int,
    bias: float,
    with_fm: bool,
    norm: bool,
) -> tuple[F32, F32]:
    """Per item: pooled field embeddings [N, F, k] (context pooled once, then the item's),
    and the logit without the MLP: bias + linear + (r FM over fields, for deepfm)."""
    ctx_pool = np.zeros((n_fields, k), dtype=np.float32)
    ctx_lin = bias
    sq_ctx = _sum_sq(context, x)
    for c in range(context.shape[0]):
        j = context[c]
        ctx_lin += rows[j, 0] * x[j]
        for t in range(k):
            ctx_pool[fields[j], t] += rows[j, v_at + t] * x[j]
    n = offsets.shape[0] - 1
    pooled = np.empty((n, n_fields, k), dtype=np.float32)
    partial = np.empty(n, dtype=np.float32)
    for i in range(n):
        pooled[i] = ctx_pool
        z = ctx_lin
        for a in range(offsets[i], offsets[i + 1]):
            j = indices[a]
            z += rows[j, 0] * x[j]
            for t in range(k):
                pooled[i, fields[j], t] += rows[j, v_at + t] * x[j]
        if with_fm:
            fm = 0.0
            for t in range(k):
                s = 0.0
                q = 0.0
                for f in range(n_fields):
                    p = pooled[i, f, t]
                    s += p
                    q += p * p
                fm += 0.5 * (s * s - q)
            z += _scale(sq_ctx, indices[offsets[i] : offsets[i + 1]], x, norm) * fm
        partial[i] = z
    return pooled, partial


def lr_score_items_reference(context: I64, offsets: I64, indices: I64, contrib: F32, bias: float) -> F32:
    base = bias + float(contrib[context].astype(np.float64).sum())
    z = np.array([base + contrib[indices[a:b]].astype(np.float64).sum() for a, b in zip(offsets[:-1], offsets[1:], strict=True)])
    return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)


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
        for t in range(k):
            vx = rows[j, v_at + t] * x[j]
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
