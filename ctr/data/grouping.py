"""A stable counting sort: positions grouped by a small integer label, the one grouping
behind serving's lookups by shard file (ctr.format.bucket_kernels.by_owner) and the router's
split of a request by serving shard (serving.sharded.request_split)."""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


@nb.njit(cache=True, nogil=True)
def group_order(labels: npt.NDArray[np.integer], groups: int, base: int = 0) -> tuple[I64, I64]:
    """The positions base + i of `labels` grouped by label (0 .. groups - 1), in order
    within a group, and each group's start in that list (groups + 1 bounds)."""
    bounds = np.zeros(groups + 1, dtype=np.int64)
    for i in range(labels.shape[0]):
        bounds[labels[i] + 1] += 1
    for g in range(groups):
        bounds[g + 1] += bounds[g]
    fill = bounds[:-1].copy()
    order = np.empty(labels.shape[0], dtype=np.int64)
    for i in range(labels.shape[0]):
        g = labels[i]
        order[fill[g]] = base + i
        fill[g] += 1
    return order, bounds
