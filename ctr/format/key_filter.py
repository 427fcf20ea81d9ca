"""A blocked Bloom filter over uint64 keys: one 64-bit word per key, three bits set in it.

Serving checks it before the delta overlay, so a key the overlay does not hold (most keys:
deltas are small against the base image) costs one cached word, not a probe of the
overlay's table. Sized at 16 bits per key it answers "maybe" for about 1% of absent keys.
"""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

U64 = npt.NDArray[np.uint64]
BITS_PER_KEY = 16
_MUL = np.uint64(0x9E3779B97F4A7C15)  # not the bucket map's mix: its own bits


def words_for(n: int) -> int:
    """A power of two of words with at least BITS_PER_KEY bits per key."""
    need = max(1, (n * BITS_PER_KEY + 63) // 64)
    return 1 << (need - 1).bit_length()


@nb.njit(cache=True, inline="always")
def _word_and_mask(key: np.uint64, words: int) -> tuple[int, np.uint64]:
    h = key * _MUL
    word = int(np.int64((h >> np.uint64(40)) & np.uint64(words - 1)))
    one = np.uint64(1)
    mask = (one << (h & np.uint64(63))) | (one << ((h >> np.uint64(6)) & np.uint64(63)))
    mask |= one << ((h >> np.uint64(12)) & np.uint64(63))
    return word, mask


@nb.njit(cache=True, inline="always")
def may_contain(bits: U64, key: np.uint64) -> bool:
    word, mask = _word_and_mask(key, bits.shape[0])
    return (bits[word] & mask) == mask


@nb.njit(cache=True, nogil=True)
def add_keys(bits: U64, keys: U64) -> None:
    for i in range(keys.shape[0]):
        word, mask = _word_and_mask(keys[i], bits.shape[0])
        bits[word] |= mask


@nb.njit(cache=True, nogil=True)
def may_contain_keys(bits: U64, keys: U64) -> npt.NDArray[np.bool_]:
    out = np.empty(keys.shape[0], dtype=np.bool_)
    for i in range(keys.shape[0]):
        out[i] = may_contain(bits, keys[i])
    return out


def may_contain_reference(bits: U64, key: int) -> bool:
    h = (key * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    word = (h >> 40) & (bits.shape[0] - 1)
    mask = (1 << (h & 63)) | (1 << ((h >> 6) & 63)) | (1 << ((h >> 12) & 63))
    return (int(bits[word]) & mask) == mask
