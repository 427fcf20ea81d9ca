"""Field-aware factorization machines (Juan et al. 2016): a k-vector per feature and field,
so a row holds F*k factors. Its training runs in the shared LR/FM/FFM kernel
(ctr.model.factorization); here are its scoring kernel, which reads the wide rows where they
sit (ctr.format.located), and its family."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.format.located import prefetch_row, row_at, rows_as_tables
from ctr.model.factorization import FFM as FFM_CODE
from ctr.model.family import ModelFamily, Request, Scorable
from ctr.model.link import norm_scale, sigmoid, sum_sq

if TYPE_CHECKING:
    from ctr.model.spec import ModelSpec


F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
ROW_AHEAD = 2  # rows of F k-vectors prefetched ahead (15 lines each for F = 60, k = 4)


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
    sq_ctx = sum_sq(context, x)
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
        out[i] = sigmoid(base + lin + norm_scale(sq_ctx, indices[lo:hi], x, norm) * pairs)
    return out


class FFMFamily(ModelFamily):
    name = "ffm"
    needs_fields = True
    pairwise = True
    embedding = "v"
    train_code = FFM_CODE

    def sparse_tables(self, spec: ModelSpec) -> list[tuple[str, int]]:
        return [("w", 1), ("v", spec.k * spec.field_count)]

    def score(self, model: Scorable, req: Request, rows: F32 | None) -> F32:
        if rows is None and model.locates_in_place:
            located = model.locate(req.keys)  # its wide rows are read where they sit, not copied
        else:
            located = rows_as_tables(model.rows(req.keys) if rows is None else rows)
        k, v_at, norm = model.spec.k, model.columns["v"][0], model.spec.pair_norm
        return model.per_items(
            req,
            k * max(1, model.spec.field_count),
            lambda offsets, _: ffm_score_items(
                req.context, offsets, req.item_indices, req.values, req.fields, located, v_at, k, model.bias, norm
            ),
        )


FFM = FFMFamily()
