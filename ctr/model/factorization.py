"""LR, FM and FFM over CSR batches: numba kernels with plain-numpy references.

    lr   z = b + sum_j w_j x_j
    fm   z = lr + r/2 sum_t [(sum_j v_jt x_j)^2 - sum_j v_jt^2 x_j^2]
    ffm  z = lr + r sum_{a<b} <v_{a, f(b)}, v_{b, f(a)}> x_a x_b     (v_j holds F k-vectors)

r = 1 / sum_j x_j^2 with instance normalization (`norm`, as libffm and xLearn do), else 1:
the pairwise term then keeps its scale whether an example has 10 fields or 40.

A batch's features index the unique keys (`uidx`), whose rows were pulled once. The
training kernel runs in one of two modes:
- sequential: example by example, predict with the current weights, then step the
  optimizer of every row the example touched (and the bias) on the worker's copy of the
  state. One worker is then exactly batch-1 training; the caller pushes state - pulled.
- batch: predict every example with the batch-start weights and sum the gradients per
  unique key (the classic PS step, pushed as gradients).
"""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.model.link import sigmoid
from ctr.model.optim import FTRL, P_KIND, ftrl_step_1d, step, step_into, weight_of, weights_of_rows

F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
LR, FM, FFM = 0, 1, 2
MODEL_CODES = {"lr": LR, "fm": FM, "ffm": FFM}


@nb.njit(cache=True, inline="always")
def pair_scale(a: int, b: int, x: F32, norm: bool) -> float:
    """r of one example: 1 / sum_j x_j^2 with instance normalization, else 1."""
    if not norm:
        return 1.0
    sq = 0.0
    for j in range(a, b):
        sq += x[j] * x[j]
    return 1.0 / sq if sq > 0 else 0.0


@nb.njit(cache=True, inline="always")
def _logit(
    model: int, a: int, b: int, uidx: I64, fields: I32, x: F32, w: F64, v: F64, bias: float, k: int, s: F64, r: float
) -> float:
    """The logit of one example; for FM leaves sum_j v_jt x_j in s[t]."""
    z = bias
    for j in range(a, b):
        z += w[uidx[j], 0] * x[j]
    pairs = 0.0
    if model == FM:
        for t in range(k):
            acc = 0.0
            sq = 0.0
            for j in range(a, b):
                vx = v[uidx[j], t] * x[j]
                acc += vx
                sq += vx * vx
            s[t] = acc
            pairs += 0.5 * (acc * acc - sq)
    elif model == FFM:
        for i in range(a, b):
            ui, fi = uidx[i], fields[i]
            for j in range(i + 1, b):
                uj, fj = uidx[j], fields[j]
                xx = x[i] * x[j]
                dot = 0.0
                for t in range(k):
                    dot += v[ui, fj * k + t] * v[uj, fi * k + t]
                pairs += dot * xx
    return z + r * pairs


@nb.njit(cache=True, inline="always")
def _gradients(
    model: int,
    a: int,
    b: int,
    uidx: I64,
    fields: I32,
    x: F32,
    w: F64,
    v: F64,
    k: int,
    s: F64,
    g: float,
    r: float,
    gw: F64,
    gv: F64,
) -> None:
    """Adds example gradient g = dloss/dz times dz/dparam into gw[u], gv[u]."""
    for j in range(a, b):
        gw[uidx[j], 0] += g * x[j]
    gr = g * r
    if model == FM:
        for j in range(a, b):
            u = uidx[j]
            for t in range(k):
                gv[u, t] += gr * x[j] * (s[t] - v[u, t] * x[j])
    elif model == FFM:
        for i in range(a, b):
            ui, fi = uidx[i], fields[i]
            for j in range(i + 1, b):
                uj, fj = uidx[j], fields[j]
                gx = gr * x[i] * x[j]
                for t in range(k):
                    gv[ui, fj * k + t] += gx * v[uj, fi * k + t]
                    gv[uj, fi * k + t] += gx * v[ui, fj * k + t]


@nb.njit(cache=True, nogil=True)
def train_batch(
    model: int,
    sequential: bool,
    offsets: I64,
    uidx: I64,
    fields: I32,
    x: F32,
    labels: F32,
    w_state: F64,
    pw: F64,
    v_state: F64,
    dv: int,
    pv: F64,
    bias_state: F64,
    pb: F64,
    k: int,
    norm: bool,
) -> tuple[F32, F64, F64, float]:
    """Trains one batch; returns (probabilities predicted before training on each example,
    summed gradients of w and v per unique key, summed bias gradient). Sequential mode steps
    w_state, v_state and bias_state in place and returns zero gradients."""
    n = offsets.shape[0] - 1
    u_count = w_state.shape[0]
    w = weights_of_rows(w_state, 1, pw)
    v = weights_of_rows(v_state, dv, pv) if model != LR else np.zeros((u_count, 0), dtype=np.float64)
    gw = np.zeros((u_count, 1), dtype=np.float64)
    gv = np.zeros((u_count, max(dv, 0)), dtype=np.float64)
    s = np.zeros(k, dtype=np.float64)
    probs = np.empty(n, dtype=np.float32)
    mark = np.full(u_count, -1, dtype=np.int64)
    touched = np.empty(u_count, dtype=np.int64)
    gbias = np.zeros(1, dtype=np.float64)
    bias_total = 0.0
    # FTRL rows (the default of w and the bias) step through ftrl_step_1d, which keeps each
    # row's sqrt(n) and weight instead of deriving them again
    w_ftrl = sequential and int(pw[P_KIND]) == FTRL
    b_ftrl = sequential and int(pb[P_KIND]) == FTRL
    sqrt_n = np.sqrt(np.maximum(w_state[:, 1], 0.0)) if w_ftrl else np.zeros(0, dtype=np.float64)
    b_sqrt_n = np.sqrt(np.maximum(bias_state[0, 1:2], 0.0)) if b_ftrl else np.zeros(1, dtype=np.float64)
    bias = weight_of(bias_state[0], 1, 0, pb)
    for e in range(n):
        a, b = offsets[e], offsets[e + 1]
        if not b_ftrl:
            bias = weight_of(bias_state[0], 1, 0, pb)
        r = pair_scale(a, b, x, norm)
        p = sigmoid(_logit(model, a, b, uidx, fields, x, w, v, bias, k, s, r))
        probs[e] = p
        g = p - labels[e]
        _gradients(model, a, b, uidx, fields, x, w, v, k, s, g, r, gw, gv)
        if not sequential:
            bias_total += g
            continue
        m = 0
        for j in range(a, b):
            u = uidx[j]
            if mark[u] != e:
                mark[u] = e
                touched[m] = u
                m += 1
        for q in range(m):
            u = touched[q]
            if w_ftrl:
                w[u, 0] = ftrl_step_1d(w_state[u], gw[u, 0], w[u, 0], sqrt_n, u, pw)
            else:
                step(w_state[u], gw[u], 1, pw)
                w[u, 0] = weight_of(w_state[u], 1, 0, pw)
            gw[u, 0] = 0.0
            if model != LR:
                step_into(v_state[u], gv[u], dv, pv, v[u])
        if b_ftrl:
            bias = ftrl_step_1d(bias_state[0], g, bias, b_sqrt_n, 0, pb)
        else:
            gbias[0] = g
            step(bias_state[0], gbias, 1, pb)
    return probs, gw, gv, bias_total


@nb.njit(cache=True, nogil=True)
def logits(model: int, offsets: I64, uidx: I64, fields: I32, x: F32, w: F32, v: F32, bias: float, k: int, norm: bool) -> F32:
    """Logits of a batch with fixed weights (w [U, 1], v [U, dv] float32): offline scoring."""
    n = offsets.shape[0] - 1
    w64 = w.astype(np.float64)
    v64 = v.astype(np.float64)
    s = np.zeros(k, dtype=np.float64)
    out = np.empty(n, dtype=np.float32)
    for e in range(n):
        a, b = offsets[e], offsets[e + 1]
        out[e] = _logit(model, a, b, uidx, fields, x, w64, v64, bias, k, s, pair_scale(a, b, x, norm))
    return out


# ---- plain references used by the tests --------------------------------------------------


def logit_reference(
    model: str, uidx: I64, fields: I32, values: npt.NDArray[np.floating], w: F64, v: F64, bias: float, k: int, norm: bool
) -> float:
    """One example's logit, written as the papers write it (in float64 throughout)."""
    x = np.asarray(values, dtype=np.float64)
    z = bias + float(np.sum(w[uidx, 0] * x))
    n = uidx.shape[0]
    pairs = 0.0
    for a in range(n):
        for b in range(a + 1, n):
            if model == "fm":
                pairs += float(v[uidx[a], :k] @ v[uidx[b], :k]) * x[a] * x[b]
            elif model == "ffm":
                fa, fb = fields[a], fields[b]
                pairs += float(v[uidx[a], fb * k : (fb + 1) * k] @ v[uidx[b], fa * k : (fa + 1) * k]) * x[a] * x[b]
    sq = float(np.sum(x * x))
    return z + pairs * ((1.0 / sq if sq > 0 else 0.0) if norm else 1.0)


def batch_logloss_reference(
    model: str, offsets: I64, uidx: I64, fields: I32, x: F32, labels: F32, w: F64, v: F64, bias: float, k: int, norm: bool
) -> float:
    """Summed logloss of a batch at fixed weights, for finite-difference gradient checks."""
    total = 0.0
    for e in range(offsets.shape[0] - 1):
        a, b = offsets[e], offsets[e + 1]
        z = logit_reference(model, uidx[a:b], fields[a:b], x[a:b], w, v, bias, k, norm)
        y = float(labels[e])
        total += float(np.logaddexp(0.0, z)) - y * z
    return total
