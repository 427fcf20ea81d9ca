"""numba kernels of the shard optimizers (FTRL-Proximal, McMahan et al. 2013).

A sparse FTRL row of dimension d is 2d + 3 32-bit words:
z[d] | n[d] (float32) | update count | update sequence lo | hi (uint32).
"""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
U32 = npt.NDArray[np.uint32]
I64 = npt.NDArray[np.int64]


@nb.njit(cache=True, inline="always")
def ftrl_weight(z: float, n: float, alpha: float, beta: float, l1: float, l2: float) -> float:
    if abs(z) <= l1:
        return 0.0
    sign = 1.0 if z > 0 else -1.0
    return -(z - sign * l1) / ((beta + np.sqrt(n)) / alpha + l2)


@nb.njit(cache=True)
def ftrl_pull(rows: F32, slots: I64, dim: int, alpha: float, beta: float, l1: float, l2: float) -> F32:
    """Weights [len(slots), dim] from the z, n state; zero rows where slots < 0."""
    out = np.zeros((slots.shape[0], dim), dtype=np.float32)
    for i in range(slots.shape[0]):
        s = slots[i]
        if s < 0:
            continue
        for d in range(dim):
            out[i, d] = ftrl_weight(rows[s, d], rows[s, dim + d], alpha, beta, l1, l2)
    return out


@nb.njit(cache=True)
def ftrl_push(
    rows: F32,
    words: U32,
    slots: I64,
    grads: F32,
    dim: int,
    seq: int,
    alpha: float,
    beta: float,
    l1: float,
    l2: float,
) -> None:
    """Applies one FTRL step per row with gradient grads[i] and stamps count and sequence."""
    for i in range(slots.shape[0]):
        s = slots[i]
        for d in range(dim):
            z = rows[s, d]
            n = rows[s, dim + d]
            g = grads[i, d]
            w = ftrl_weight(z, n, alpha, beta, l1, l2)
            n_new = n + g * g
            sigma = (np.sqrt(n_new) - np.sqrt(n)) / alpha
            rows[s, d] = z + g - sigma * w
            rows[s, dim + d] = n_new
        words[s, 2 * dim] += np.uint32(1)
        words[s, 2 * dim + 1] = np.uint32(seq & 0xFFFFFFFF)
        words[s, 2 * dim + 2] = np.uint32(seq >> 32)


@nb.njit(cache=True)
def rows_updated_after(words: U32, occupied: I64, dim: int, seq: int) -> I64:
    """Occupied slots whose update sequence is greater than seq."""
    out = np.empty(occupied.shape[0], dtype=np.int64)
    n = 0
    for i in range(occupied.shape[0]):
        s = occupied[i]
        row_seq = np.int64(words[s, 2 * dim + 1]) | (np.int64(words[s, 2 * dim + 2]) << 32)
        if row_seq > seq:
            out[n] = s
            n += 1
    return out[:n].copy()


def ftrl_weights_reference(
    z: npt.NDArray[np.float64], n: npt.NDArray[np.float64], alpha: float, beta: float, l1: float, l2: float
) -> npt.NDArray[np.float64]:
    """Plain-numpy FTRL weights from the z, n state."""
    return np.where(np.abs(z) <= l1, 0.0, -(z - np.sign(z) * l1) / ((beta + np.sqrt(n)) / alpha + l2))


def ftrl_step_reference(
    z: npt.NDArray[np.float64],
    n: npt.NDArray[np.float64],
    g: npt.NDArray[np.float64],
    alpha: float,
    beta: float,
    l1: float,
    l2: float,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Plain-numpy FTRL step: returns (w before the step, z', n')."""
    w = ftrl_weights_reference(z, n, alpha, beta, l1, l2)
    n2 = n + g * g
    sigma = (np.sqrt(n2) - np.sqrt(n)) / alpha
    return w, z + g - sigma * w, n2
