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
    """The shard of n that owns key: the high half of a mix, modulo n (for a power of two
    as a mask, the same value without a 64-bit division, which cost 6 ns a key)."""
    k = ((key ^ (key >> np.uint64(33))) * _ROUTE_MIX) >> np.uint64(32)
    if n & (n - 1) == 0:
        return int(np.int64(k & np.uint64(n - 1)))
    return int(np.int64(k % np.uint64(n)))


def owner_reference(key: int, n: int) -> int:
    """Plain-Python owner, for the tests: shard assignment is part of the model format."""
    k = ((key ^ (key >> 33)) * 0xFF51AFD7ED558CCD) & ((1 << 64) - 1)
    return (k >> 32) % n


@nb.njit(cache=True, nogil=True)
def shard_of(keys: npt.NDArray[np.uint64], n: int) -> npt.NDArray[np.int64]:
    out = np.empty(keys.shape[0], dtype=np.int64)
    for i in range(keys.shape[0]):
        out[i] = owner(keys[i], n)
    return out


def dense_range(length: int, shard: int, n: int) -> tuple[int, int]:
    """[lo, hi) of a dense vector of `length` held by `shard` of n (contiguous ranges)."""
    return length * shard // n, length * (shard + 1) // n
