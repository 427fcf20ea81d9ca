"""Factorization machines (Rendle 2010): w and a k-vector v per feature, pairwise terms
<v_i, v_j> x_i x_j computed in O(nk). Its training runs in the shared LR/FM/FFM kernel
(ctr.model.factorization); here are its scoring kernel and its family."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.model.factorization import FM as FM_CODE
from ctr.model.family import ModelFamily, Request, Scorable
from ctr.model.link import norm_scale, sigmoid, sum_sq
from ctr.runtime.prefetch import prefetch_span

if TYPE_CHECKING:
    from ctr.model.spec import ModelSpec


F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
AHEAD = 8  # features ahead whose row is prefetched (16: the same, 32: slower)


@nb.njit(cache=True, nogil=True)
def fm_score_items(
    context: I64, offsets: I64, indices: I64, x: F32, rows: F32, v_at: int, k: int, bias: float, norm: bool
) -> F32:
    base = bias
    s_ctx = np.zeros(k, dtype=np.float64)
    q_ctx = np.zeros(k, dtype=np.float64)
    sq_ctx = sum_sq(context, x)
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
        out[i] = sigmoid(z + norm_scale(sq_ctx, indices[offsets[i] : offsets[i + 1]], x, norm) * pairs)
    return out


class FMFamily(ModelFamily):
    name = "fm"
    first_use = True
    pairwise = True
    embedding = "v"
    partial_sums = True
    train_code = FM_CODE

    def sparse_tables(self, spec: ModelSpec) -> list[tuple[str, int]]:
        return [("w", 1), ("v", spec.k)]

    def score(self, model: Scorable, req: Request, rows: F32 | None) -> F32:
        looked_up = model.rows(req.keys) if rows is None else rows
        v_at, k, norm = model.columns["v"][0], model.spec.k, model.spec.pair_norm
        return model.per_items(
            req,
            k,
            lambda offsets, _: fm_score_items(
                req.context, offsets, req.item_indices, req.values, looked_up, v_at, k, model.bias, norm
            ),
        )

    def partial_factors(self, spec: ModelSpec) -> int:
        return spec.k


FM = FMFamily()
