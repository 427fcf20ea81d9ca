"""numba scoring kernels of the prediction service, each with a numpy reference.

A request's features index its dictionary; `rows[n, R]` are the dictionary entries'
looked-up weights (w in column 0, the k- or F*k-vector from column v_at). The shared
context's share is computed once per request: its linear sum, for FM its sum and sum of
squares of v x, for FFM its per-field sums (and their pairs), for the DNNs its pooled
fields.
"""

from __future__ import annotations

from typing import Any

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.format.prefetch import prefetch_span
from ctr.model.link import sigmoid

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
AHEAD = 8  # features ahead whose row is prefetched (16: the same, 32: slower)
ROW_AHEAD = 2  # the same for FFM's rows of F k-vectors (15 lines each for F = 60, k = 4)


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
            if a + AHEAD < indices.shape[0]:  # rows sit in dictionary order, an item's anywhere
                prefetch_span(rows, indices[a + AHEAD], 0, v_at + k - 1)
            j = indices[a]
            xj = x[j]
            z += rows[j, 0] * xj
            v = rows[j, v_at : v_at + k]  # a 1-d view: the loop over t vectorizes
            for t in range(k):
                vx = v[t] * xj
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


@nb.njit(cache=True, inline="always")
def _add_field_sums(
    sums: F64,
    mark: npt.NDArray[np.bool_],
    touched: I64,
    features: I64,
    x: F32,
    fields: I32,
    located: Any,
    v_at: int,
    k: int,
) -> tuple[float, float, int]:
    """sums[g] += x_a v_a (all F k-vectors of the row) over the features a of field g
    (absent ones add nothing), a field's first feature noting it in `touched`; returns
    (sum of w x, sum of x_a^2 |v_{a, f(a)}|^2, fields touched)."""
    span = sums.shape[1]
    lin = 0.0
    own = 0.0
    n_touched = 0
    for a in range(features.shape[0]):
        if a + ROW_AHEAD < features.shape[0]:
            prefetch_row(located, features[a + ROW_AHEAD])
        j = features[a]
        if located[1][j] < 0:  # absent
            continue
        g = fields[j]
        xj = x[j]
        row = row_at(located, j)
        lin += row[0] * xj
        if not mark[g]:
            mark[g] = True
            touched[n_touched] = g
            n_touched += 1
        into, v = sums[g], row[v_at : v_at + span]  # 1-d views: the loop vectorizes (3x)
        for u in range(span):
            into[u] += v[u] * xj
        for t in range(k):
            vx = v[g * k + t] * xj
            own += vx * vx
    return lin, own, n_touched


@nb.njit(cache=True, inline="always")
def _pairs_within(sums: F64, touched: I64, n: int, k: int) -> float:
    """sum_{g<h} <S[g, h], S[h, g]> + 1/2 sum_g |S[g, g]|^2 over the touched fields: every
    pair of features of the set, its own pairs (a, a) once each, which the caller takes out."""
    total = 0.0
    for p in range(n):
        g = touched[p]
        for t in range(k):
            total += 0.5 * sums[g, g * k + t] * sums[g, g * k + t]
        for q in range(p + 1, n):
            h = touched[q]
            for t in range(k):
                total += sums[g, h * k + t] * sums[h, g * k + t]
    return total


@nb.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})  # sums vectorize; NaN and inf still propagate
def ffm_score_items(
    context: I64,
    offsets: I64,
    indices: I64,
    x: F32,
    fields: I32,
    located: Any,
    v_at: int,
    k: int,
    bias: float,
    norm: bool,
) -> F32:
    """FFM's pairs grouped by field: with S[g, h] = sum over the features a of field g of
    x_a v_{a, h}, the pairs of a feature set are sum_{g<h} <S[g, h], S[h, g]> + 1/2 sum_g
    (|S[g, g]|^2 - sum_{a in g} x_a^2 |v_{a, g}|^2). An item costs its features times F k
    adds, not its features times the instance's features k (each pair apart: 400 x 500
    pairs for a 200 x 500 request's item), and reads each row once, in order. The context's
    S is summed once; an item adds its own pairs and <C[h, g], I[g, h]> across the two.
    Rows are read where they sit (row_at: a version's tables, or rows_as_tables)."""
    tables, _, _, shift, head = located
    n_fields = (((tables[0].shape[1] - head) >> shift) - v_at) // k
    span = n_fields * k
    ctx = np.zeros((n_fields, span), dtype=np.float64)
    ctx_mark = np.zeros(n_fields, dtype=np.bool_)
    ctx_fields = np.empty(n_fields, dtype=np.int64)
    lin, own, n_ctx = _add_field_sums(ctx, ctx_mark, ctx_fields, context, x, fields, located, v_at, k)
    base = bias + lin
    ctx_pairs = _pairs_within(ctx, ctx_fields, n_ctx, k) - 0.5 * own
    sq_ctx = _sum_sq(context, x)
    across = np.zeros((n_fields, span), dtype=np.float64)  # across[g, h k + t] = C[h, g k + t]
    for q in range(n_ctx):
        h = ctx_fields[q]
        for g in range(n_fields):
            across[g, h * k : (h + 1) * k] = ctx[h, g * k : (g + 1) * k]
    item = np.zeros((n_fields, span), dtype=np.float64)
    mark = np.zeros(n_fields, dtype=np.bool_)
    touched = np.empty(n_fields, dtype=np.int64)
    out = np.empty(offsets.shape[0] - 1, dtype=np.float32)
    for i in range(out.shape[0]):
        lo, hi = offsets[i], offsets[i + 1]
        lin, own, n = _add_field_sums(item, mark, touched, indices[lo:hi], x, fields, located, v_at, k)
        pairs = ctx_pairs + _pairs_within(item, touched, n, k) - 0.5 * own
        for p in range(n):  # context x item: <C[h, g], I[g, h]> over g (the item's), h
            g = touched[p]
            into, other = item[g], across[g]
            for u in range(span):
                pairs += other[u] * into[u]
            into[:] = 0.0  # ready for the next item
            mark[g] = False
        out[i] = sigmoid(base + lin + _scale(sq_ctx, indices[lo:hi], x, norm) * pairs)
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
            xj = x[j]
            z += rows[j, 0] * xj
            into, v = pooled[i, fields[j]], rows[j, v_at : v_at + k]  # 1-d views: the loop vectorizes
            for t in range(k):
                into[t] += v[t] * xj
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
