"""numba scoring kernels of the prediction service, each with a numpy reference."""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.lr import sigmoid

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]


@nb.njit(cache=True)
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


def lr_score_items_reference(context: I64, offsets: I64, indices: I64, contrib: F32, bias: float) -> F32:
    base = bias + float(contrib[context].astype(np.float64).sum())
    z = np.array([base + contrib[indices[a:b]].astype(np.float64).sum() for a, b in zip(offsets[:-1], offsets[1:], strict=True)])
    return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)
