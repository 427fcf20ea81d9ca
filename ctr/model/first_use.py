"""A request's dictionary in the order its features first use it (docs/design/first-use-order.md).

A request's dictionary comes field by field (the encoding's order, which keeps its index
gaps small), so an item's features point all over it, and a scoring kernel that reads the
item's rows jumps across a looked-up array of megabytes (80k FM rows of 36 bytes: 2.9 MB,
past a core's L2). Renumbered in first-use order (the context, then item by item), the
rows are looked up in that order and an item reads mostly the rows after the last one it
read: the hardware prefetcher streams them. The features of every item are still visited
in the same order, so every sum adds the same numbers in the same order: the scores are
bit-identical. Entries no feature uses are not looked up at all."""

from __future__ import annotations

from dataclasses import dataclass

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.model.family import Request

I64 = npt.NDArray[np.int64]


@nb.njit(cache=True, nogil=True)
def first_use_order(context: I64, indices: I64, n: int) -> tuple[I64, I64, I64]:
    """(the dictionary entries in the order the context, then the items' indices, first
    name them; the context and the indices renumbered to positions in that order). Entries
    named by neither are left out; every index must be in [0, n)."""
    position = np.full(n, -1, dtype=np.int64)
    order = np.empty(n, dtype=np.int64)
    renumbered_context = np.empty_like(context)
    renumbered = np.empty_like(indices)
    used = 0
    for c in range(context.shape[0]):
        j = context[c]
        if position[j] < 0:
            position[j] = used
            order[used] = j
            used += 1
        renumbered_context[c] = position[j]
    for a in range(indices.shape[0]):
        j = indices[a]
        if position[j] < 0:
            position[j] = used
            order[used] = j
            used += 1
        renumbered[a] = position[j]
    return order[:used].copy(), renumbered_context, renumbered


def first_use_order_reference(context: I64, indices: I64, n: int) -> tuple[I64, I64, I64]:
    """first_use_order with numpy, for the tests."""
    named = np.concatenate([context, indices]).astype(np.int64)
    assert named.shape[0] == 0 or (named.min() >= 0 and named.max() < n)
    entries, first = np.unique(named, return_index=True)
    order = entries[np.argsort(first)]
    position = np.full(n, -1, dtype=np.int64)
    position[order] = np.arange(order.shape[0])
    return order.astype(np.int64), position[context], position[indices]


@dataclass(frozen=True)
class Renumbered:
    """A request (ctr.model.family.Request) whose dictionary holds only the entries its
    features use, in first-use order."""

    keys: npt.NDArray[np.uint64]
    values: npt.NDArray[np.float32]
    fields: npt.NDArray[np.int32]
    context: I64
    item_offsets: I64
    item_indices: I64


def in_first_use_order(req: Request) -> Renumbered:
    """The request with its dictionary renumbered in first-use order."""
    order, context, indices = first_use_order(req.context, req.item_indices, req.keys.shape[0])
    return Renumbered(req.keys[order], req.values[order], req.fields[order], context, req.item_offsets, indices)
