"""Bit packing: n codes of `bits` bits each, back to back little-endian in a byte stream
(code i occupies bits [i * bits, (i + 1) * bits) of the stream)."""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

U8 = npt.NDArray[np.uint8]
U32 = npt.NDArray[np.uint32]


def packed_bytes(count: int, bits: int) -> int:
    return (count * bits + 7) // 8


@nb.njit(cache=True, nogil=True)
def pack_bits(codes: U32, bits: int) -> U8:
    """codes (each < 2**bits, bits <= 24) packed into ceil(n * bits / 8) bytes."""
    n = codes.shape[0]
    out = np.zeros((n * bits + 7) // 8 + 4, dtype=np.uint8)  # 4 spare bytes: whole-word writes
    acc = np.uint64(0)
    filled = 0
    pos = 0
    for i in range(n):
        acc |= np.uint64(codes[i]) << np.uint64(filled)
        filled += bits
        while filled >= 8:
            out[pos] = np.uint8(acc & np.uint64(0xFF))
            acc >>= np.uint64(8)
            filled -= 8
            pos += 1
    if filled > 0:
        out[pos] = np.uint8(acc & np.uint64(0xFF))
    return out[: (n * bits + 7) // 8]


@nb.njit(cache=True, nogil=True)
def unpack_bits(buf: U8, count: int, bits: int) -> U32:
    """The inverse of pack_bits; buf holds exactly packed_bytes(count, bits) bytes."""
    out = np.empty(count, dtype=np.uint32)
    mask = np.uint64((1 << bits) - 1)
    acc = np.uint64(0)
    filled = 0
    pos = 0
    for i in range(count):
        while filled < bits:
            acc |= np.uint64(buf[pos]) << np.uint64(filled)
            pos += 1
            filled += 8
        out[i] = np.uint32(acc & mask)
        acc >>= np.uint64(bits)
        filled -= bits
    return out
