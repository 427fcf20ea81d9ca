"""A stable counting sort: positions grouped by a small integer label, the one grouping
behind serving's lookups by shard file (ctr.format.bucket_kernels.by_owner) and the router's
split of a request by serving shard (serving.sharded.request_split)."""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
FEW_GROUPS = 4  # up to this many labels, a branch-free pass per label beats the scatter


@nb.njit(cache=True, nogil=True)
def group_order(labels: npt.NDArray[np.integer], groups: int, base: int = 0) -> tuple[I64, I64]:
    """The positions base + i of `labels` grouped by label (0 .. groups - 1), in order
    within a group, and each group's start in that list (groups + 1 bounds)."""
    bounds = np.zeros(groups + 1, dtype=np.int64)
    n = labels.shape[0]
    if groups <= FEW_GROUPS:
        for g in range(groups):  # counted in a register, as below
            count = 0
            for i in range(n):
                count += labels[i] == g
            bounds[g + 1] = bounds[g] + count
        # a pass per group with its count in a register: every position is written at the
        # count and the count moves only on a match, so no branch and no store feeding the
        # next load (the scatter below waits on fill[g] at every element: 0.16 ms for a
        # request's 80k keys over 2 shards, against 0.08); a write past a group's end is
        # overwritten by the next group's pass, or lands in the spare slot
        order = np.empty(n + 1, dtype=np.int64)
        for g in range(groups):
            at = bounds[g]
            for i in range(n):
                order[at] = base + i
                at += labels[i] == g
        return order[:n], bounds
    for i in range(n):
        bounds[labels[i] + 1] += 1
    for g in range(groups):
        bounds[g + 1] += bounds[g]
    fill = bounds[:-1].copy()
    order = np.empty(n, dtype=np.int64)
    for i in range(n):
        g = labels[i]
        order[fill[g]] = base + i
        fill[g] += 1
    return order, bounds
