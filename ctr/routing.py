"""Key routing: the one function that decides which shard owns a key."""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

# A mix unrelated to the hashmap's home-slot function, so a shard's keys still spread
# evenly over its own table.
_ROUTE_MIX = np.uint64(0xFF51AFD7ED558CCD)


@nb.njit(cache=True, inline="always")
def owner(key: np.uint64, n: int) -> int:
    """The shard of n that owns key."""
    k = (key ^ (key >> np.uint64(33))) * _ROUTE_MIX
    return int(np.int64((k >> np.uint64(32)) % np.uint64(n)))


@nb.njit(cache=True, nogil=True)
def shard_of(keys: npt.NDArray[np.uint64], n: int) -> npt.NDArray[np.int64]:
    out = np.empty(keys.shape[0], dtype=np.int64)
    for i in range(keys.shape[0]):
        out[i] = owner(keys[i], n)
    return out


def dense_range(length: int, shard: int, n: int) -> tuple[int, int]:
    """[lo, hi) of a dense vector of `length` held by `shard` of n (contiguous ranges)."""
    return length * shard // n, length * (shard + 1) // n
