"""Wide&Deep and DeepFM: the sparse side's kernels (pooling feature embeddings per field, the
wide (linear) term, the FM over fields, the per-example training of the rows, the scoring
inputs of the MLP) and the two families. The MLP is ctr.model.mlp (torch).

Each example's embedding of field f is the sum of v_j x_j over its features j of field f
(a multi-hot field pools; a missing field is zeros). numpy references for the tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.model.factorization import pair_scale
from ctr.model.family import ModelFamily, Request, Scorable
from ctr.model.link import norm_scale, sigmoid, sum_sq
from ctr.model.optim import step, weight_of

if TYPE_CHECKING:
    from ctr.model.spec import ModelSpec


F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]


@nb.njit(cache=True, nogil=True)
def pool_fields(offsets: I64, uidx: I64, fields: I32, x: F32, emb: F32, n_fields: int) -> F32:
    """[n, F, k]: per example and field, the sum of its features' embeddings times values."""
    n = offsets.shape[0] - 1
    k = emb.shape[1]
    out = np.zeros((n, n_fields, k), dtype=np.float32)
    for e in range(n):
        for j in range(offsets[e], offsets[e + 1]):
            f = fields[j]
            u = uidx[j]
            for t in range(k):
                out[e, f, t] += emb[u, t] * x[j]
    return out


@nb.njit(cache=True, inline="always")
def _pool_one(a: int, b: int, uidx: I64, fields: I32, x: F32, emb: F64, out: F64) -> None:
    out[:] = 0.0
    for j in range(a, b):
        for t in range(out.shape[1]):
            out[fields[j], t] += emb[uidx[j], t] * x[j]


@nb.njit(cache=True, inline="always")
def _fm_fields(pooled: F64) -> float:
    """1/2 sum_t [(sum_f P_ft)^2 - sum_f P_ft^2]: FM over fields."""
    z = 0.0
    for t in range(pooled.shape[1]):
        s = 0.0
        sq = 0.0
        for f in range(pooled.shape[0]):
            s += pooled[f, t]
            sq += pooled[f, t] * pooled[f, t]
        z += 0.5 * (s * s - sq)
    return z


@nb.njit(cache=True, nogil=True)
def train_deep_batch(
    sequential: bool,
    with_fm: bool,
    norm: bool,
    offsets: I64,
    uidx: I64,
    fields: I32,
    x: F32,
    labels: F32,
    mlp_out: F32,
    mlp_jac: F32,
    w_state: F64,
    pw: F64,
    e_state: F64,
    pe: F64,
    bias_state: F64,
    pb: F64,
) -> tuple[F32, F32, F64, F64, float]:
    """Trains the sparse side of wdl/deepfm on a batch.

    The logit of example e is bias + sum_j w_j x_j + [r FM over its pooled fields] + mlp_out[e]
    (r = 1 / sum_j x_j^2 with norm, else 1),
    where mlp_out and its Jacobian mlp_jac[e] = d mlp_out[e] / d pooled[e] come from the
    batch-start MLP. Sequential mode recomputes everything else with the current rows,
    example by example, and steps each touched row (and the bias) after each example; the
    MLP's share of a row's gradient is then g_e * mlp_jac[e]. Batch mode sums the gradients.
    Returns (probabilities, dloss/dlogit per example, summed w and emb gradients, bias gradient).
    """
    n = offsets.shape[0] - 1
    u_count = w_state.shape[0]
    k = mlp_jac.shape[2]
    n_fields = mlp_jac.shape[1]
    w = np.empty((u_count, 1), dtype=np.float64)
    emb = np.empty((u_count, k), dtype=np.float64)
    for u in range(u_count):
        w[u, 0] = weight_of(w_state[u], 1, 0, pw)
        for t in range(k):
            emb[u, t] = weight_of(e_state[u], k, t, pe)
    gw = np.zeros((u_count, 1), dtype=np.float64)
    ge = np.zeros((u_count, k), dtype=np.float64)
    pooled = np.zeros((n_fields, k), dtype=np.float64)
    dpool = np.zeros((n_fields, k), dtype=np.float64)
    colsum = np.zeros(k, dtype=np.float64)
    mark = np.full(u_count, -1, dtype=np.int64)
    touched = np.empty(u_count, dtype=np.int64)
    probs = np.empty(n, dtype=np.float32)
    dlogit = np.empty(n, dtype=np.float32)
    gb = np.zeros(1, dtype=np.float64)
    total = 0.0
    for e in range(n):
        a, b = offsets[e], offsets[e + 1]
        z = weight_of(bias_state[0], 1, 0, pb) + mlp_out[e]
        for j in range(a, b):
            z += w[uidx[j], 0] * x[j]
        r = pair_scale(a, b, x, norm)
        if with_fm:
            _pool_one(a, b, uidx, fields, x, emb, pooled)
            z += r * _fm_fields(pooled)
            for t in range(k):
                colsum[t] = 0.0
                for f in range(n_fields):
                    colsum[t] += pooled[f, t]
        p = sigmoid(z)
        g = p - labels[e]
        probs[e] = p
        dlogit[e] = g
        for f in range(n_fields):
            for t in range(k):
                dpool[f, t] = g * mlp_jac[e, f, t]
                if with_fm:
                    dpool[f, t] += g * r * (colsum[t] - pooled[f, t])
        m = 0
        for j in range(a, b):
            u = uidx[j]
            gw[u, 0] += g * x[j]
            for t in range(k):
                ge[u, t] += dpool[fields[j], t] * x[j]
            if mark[u] != e:
                mark[u] = e
                touched[m] = u
                m += 1
        if not sequential:
            total += g
            continue
        for q in range(m):
            u = touched[q]
            step(w_state[u], gw[u], 1, pw)
            step(e_state[u], ge[u], k, pe)
            w[u, 0] = weight_of(w_state[u], 1, 0, pw)
            gw[u, 0] = 0.0
            for t in range(k):
                emb[u, t] = weight_of(e_state[u], k, t, pe)
                ge[u, t] = 0.0
        gb[0] = g
        step(bias_state[0], gb, 1, pb)
    return probs, dlogit, gw, ge, total


@nb.njit(cache=True, nogil=True)
def deep_partials(offsets: I64, uidx: I64, x: F32, w: F32, pooled: F32, bias: float, with_fm: bool, norm: bool) -> F32:
    """Each example's logit without the MLP, from the batch-start rows: bias + sum_j w_j x_j
    (+ r FM over its pooled fields [n, F, k], for deepfm). w: the wide weights per unique key."""
    n = offsets.shape[0] - 1
    out = np.empty(n, dtype=np.float32)
    for e in range(n):
        a, b = offsets[e], offsets[e + 1]
        z = bias
        for j in range(a, b):
            z += w[uidx[j]] * x[j]
        if with_fm:
            z += pair_scale(a, b, x, norm) * _fm_fields(pooled[e])
        out[e] = z
    return out


def deep_partials_reference(offsets: I64, uidx: I64, x: F32, w: F32, pooled: F32, bias: float, with_fm: bool, norm: bool) -> F32:
    sample = np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets))
    z = np.full(offsets.shape[0] - 1, bias, dtype=np.float64)
    np.add.at(z, sample, w[uidx].astype(np.float64) * x)
    if with_fm:
        p = pooled.astype(np.float64)
        fm = 0.5 * (p.sum(axis=1) ** 2 - (p**2).sum(axis=1)).sum(axis=1)
        sq = np.zeros_like(z)
        np.add.at(sq, sample, x.astype(np.float64) ** 2)
        r = np.where(sq > 0, 1.0 / np.where(sq > 0, sq, 1.0), 0.0) if norm else np.ones_like(z)
        z += r * fm
    return z.astype(np.float32)


def pool_fields_reference(offsets: I64, uidx: I64, fields: I32, x: F32, emb: F32, n_fields: int) -> F32:
    n = offsets.shape[0] - 1
    out = np.zeros((n, n_fields, emb.shape[1]), dtype=np.float64)
    sample = np.repeat(np.arange(n), np.diff(offsets))
    np.add.at(out, (sample, fields), emb[uidx].astype(np.float64) * x[:, None])
    return out.astype(np.float32)


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
    sq_ctx = sum_sq(context, x)
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
            z += norm_scale(sq_ctx, indices[offsets[i] : offsets[i + 1]], x, norm) * _fm_fields(pooled[i])
        partial[i] = z
    return pooled, partial


class DeepFamily(ModelFamily):
    """Wide&Deep (with_fm False: its embeddings in their own table) and DeepFM (the FM's
    v vectors feed the MLP too). The MLP itself is ctr.model.mlp (torch)."""

    needs_fields = True
    has_mlp = True
    first_use = True

    def __init__(self, name: str, with_fm: bool) -> None:
        self.name = name
        self.with_fm = with_fm
        self.pairwise = with_fm
        self.embedding = "v" if with_fm else "emb"

    def sparse_tables(self, spec: ModelSpec) -> list[tuple[str, int]]:
        return [("w", 1), (self.embedding or "v", spec.k)]

    def score(self, model: Scorable, req: Request, rows: F32 | None) -> F32:
        looked_up = model.rows(req.keys) if rows is None else rows
        spec = model.spec
        v_at, k, n_fields = model.columns[self.embedding or "v"][0], spec.k, spec.field_count
        pooled = np.empty((req.item_offsets.shape[0] - 1, n_fields, k), dtype=np.float32)

        def pooled_range(offsets: I64, lo: int) -> F32:
            """Pools the range's items into `pooled`; returns their logits without the MLP."""
            p, z = deep_inputs(
                req.context, offsets, req.item_indices, req.values, req.fields, looked_up,
                v_at, k, n_fields, model.bias, self.with_fm, spec.pair_norm,
            )  # fmt: skip
            pooled[lo : lo + p.shape[0]] = p
            return z  # type: ignore[no-any-return]

        partial = model.per_items(req, k * (2 if self.with_fm else 1), pooled_range)
        return model.net.predict(pooled, partial)  # type: ignore[no-any-return]


WDL = DeepFamily("wdl", with_fm=False)
DEEPFM = DeepFamily("deepfm", with_fm=True)
