"""Logistic-regression math over CSR batches (numba kernels with numpy references)."""

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


@nb.njit(cache=True)
def lr_logits(offsets: I64, index: I64, values: F32, weights: F32, bias: float) -> F32:
    """logit_i = bias + sum_j weights[index[j]] * values[j] over sample i's nonzeros."""
    n = offsets.shape[0] - 1
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        z = bias
        for j in range(offsets[i], offsets[i + 1]):
            z += weights[index[j]] * values[j]
        out[i] = z
    return out


@nb.njit(cache=True)
def lr_gradients(offsets: I64, index: I64, values: F32, probs: F32, labels: F32, n_weights: int) -> tuple[F32, float]:
    """Summed logloss gradients per weight, and for the bias: (p - y) * x."""
    grad = np.zeros(n_weights, dtype=np.float32)
    gbias = 0.0
    for i in range(offsets.shape[0] - 1):
        r = probs[i] - labels[i]
        gbias += r
        for j in range(offsets[i], offsets[i + 1]):
            grad[index[j]] += r * values[j]
    return grad, gbias


@nb.njit(cache=True)
def sigmoid_array(z: F32) -> F32:
    out = np.empty_like(z)
    for i in range(z.shape[0]):
        out[i] = sigmoid(z[i])
    return out


def lr_logits_reference(offsets: I64, index: I64, values: F32, weights: F32, bias: float) -> F32:
    sample = np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets))
    z = np.full(offsets.shape[0] - 1, bias, dtype=np.float64)
    np.add.at(z, sample, weights[index].astype(np.float64) * values)
    return z.astype(np.float32)


def lr_gradients_reference(offsets: I64, index: I64, values: F32, probs: F32, labels: F32, n_weights: int) -> tuple[F32, float]:
    r = (probs - labels).astype(np.float64)
    sample = np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets))
    grad = np.zeros(n_weights, dtype=np.float64)
    np.add.at(grad, index, r[sample] * values)
    return grad.astype(np.float32), float(r.sum())
