"""Logistic regression: the w table alone. Its training runs in the shared LR/FM/FFM
kernel (ctr.model.factorization); here are its scoring kernel and reference, and its family."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.model.factorization import LR as LR_CODE
from ctr.model.family import ModelFamily, Request, Scorable
from ctr.model.link import sigmoid

if TYPE_CHECKING:
    from ctr.model.spec import ModelSpec


F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
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


def lr_score_items_reference(context: I64, offsets: I64, indices: I64, contrib: F32, bias: float) -> F32:
    base = bias + float(contrib[context].astype(np.float64).sum())
    z = np.array([base + contrib[indices[a:b]].astype(np.float64).sum() for a, b in zip(offsets[:-1], offsets[1:], strict=True)])
    return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)


class LinearFamily(ModelFamily):
    name = "lr"
    partial_sums = True
    train_code = LR_CODE

    def score(self, model: Scorable, req: Request, rows: F32 | None) -> F32:
        rows = model.rows(req.keys) if rows is None else rows
        contrib = np.ascontiguousarray(rows[:, 0]) * req.values
        return lr_score_items(req.context, req.item_offsets, req.item_indices, contrib, model.bias)  # type: ignore[no-any-return]

    def partial_factors(self, spec: ModelSpec) -> int:
        return 0


LR = LinearFamily()
