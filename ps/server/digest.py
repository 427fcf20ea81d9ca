"""An order-independent content digest of a table: the sum, modulo 2**64, of a hash of each
row's key and the bit patterns of its state. Rows may be held in any order and split over
any number of shards: the digests of the parts add up to the digest of the whole, so two
PS deployments hold the same model exactly when their per-table sums agree."""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

U64 = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]
MASK = (1 << 64) - 1


@nb.njit(cache=True, inline="always")
def _mix(x: np.uint64) -> np.uint64:
    x += np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@nb.njit(cache=True, nogil=True)
def rows_digest(keys: U64, rows: F64) -> np.uint64:
    """sum over rows of h(key, row): h chains splitmix64 over the key, then each value's
    float64 bits in column order."""
    bits = rows.view(np.uint64)
    total = np.uint64(0)
    for i in range(keys.shape[0]):
        h = _mix(keys[i])
        for c in range(bits.shape[1]):
            h = _mix(h ^ bits[i, c])
        total += h
    return total


def combine(digests: list[int]) -> int:
    """The digest of a table split into parts (shards)."""
    return sum(digests) & MASK
