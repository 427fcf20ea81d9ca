"""Bit packing: n codes of `bits` bits each, back to back little-endian in a byte stream
(code i occupies bits [i * bits, (i + 1) * bits) of the stream). The kernels move whole
64-bit words: a byte at a time ran at a third of the speed."""

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
    """codes (each < 2**bits, 1 <= bits <= 32) packed into ceil(n * bits / 8) bytes."""
    n = codes.shape[0]
    size = (n * bits + 7) // 8
    words = np.zeros((size + 7) // 8 + 1, dtype=np.uint64)
    acc = np.uint64(0)
    filled = 0
    w = 0
    for i in range(n):
        c = np.uint64(codes[i])
        acc |= c << np.uint64(filled)
        filled += bits
        if filled >= 64:
            words[w] = acc
            w += 1
            filled -= 64
            acc = c >> np.uint64(bits - filled) if filled > 0 else np.uint64(0)
    words[w] = acc
    return words.view(np.uint8)[:size]  # little-endian machines: word bytes are stream order


@nb.njit(cache=True, nogil=True)
def unpack_bits(buf: U8, count: int, bits: int) -> U32:
    """The inverse of pack_bits; buf holds exactly packed_bytes(count, bits) bytes."""
    words = np.zeros((buf.shape[0] + 7) // 8 + 1, dtype=np.uint64)
    words.view(np.uint8)[: buf.shape[0]] = buf
    out = np.empty(count, dtype=np.uint32)
    mask = np.uint64((1 << bits) - 1)
    w = 0
    pos = 0  # bit offset inside words[w]
    for i in range(count):
        v = words[w] >> np.uint64(pos)
        if pos + bits > 64:
            v |= words[w + 1] << np.uint64(64 - pos)
        out[i] = np.uint32(v & mask)
        pos += bits
        if pos >= 64:
            pos -= 64
            w += 1
    return out


@nb.njit(cache=True, nogil=True)
def bit_planes(packed: U8, n: int, d: int) -> U8:
    """Row-major bits [n, d] (bit i * d + c of a little-endian stream) as d planes of
    ceil(n / 8) bytes, plane c holding column c's n bits: 1-bit's sign planes, in one pass
    where unpacking, transposing and packing again took three array passes."""
    out = np.zeros((d, (n + 7) // 8), dtype=np.uint8)
    for i in range(n):
        for c in range(d):
            b = i * d + c
            if (packed[b >> 3] >> (b & 7)) & 1:
                out[c, i >> 3] |= np.uint8(1 << (i & 7))
    return out


def bit_planes_reference(packed: U8, n: int, d: int) -> U8:
    bits = np.unpackbits(packed, count=n * d, bitorder="little").reshape(n, d)
    return np.ascontiguousarray(np.packbits(bits.T, axis=1, bitorder="little"))


def byte_planes(raw: U8, n: int, d: int, size: int) -> U8:
    """Words [n, d] of `size` bytes (their bytes row-major in `raw`) as `size` byte planes
    column by column: plane b holds byte b of column 0's n words, then of column 1's, ...
    (ps.compression.payload's planes layout), as one copy of a transposed view: numpy's
    strided copy took 6 us for a 581 x 16 push of bf16 words where a numba loop writing
    plane by plane took 18 (a 200,000 x 3 column of fp32 words: 0.66 ms against 2.0)."""
    return np.ascontiguousarray(raw.reshape(n, d, size).transpose(2, 1, 0)).reshape(size, n * d)


def words_of_planes(planes: U8, n: int, d: int, dtype: str) -> npt.NDArray[np.generic]:
    """byte_planes' inverse: the words [n, d] (contiguous) of `size` planes [size, n * d]."""
    size = planes.shape[0]
    return np.ascontiguousarray(planes.reshape(size, d, n).transpose(2, 1, 0)).view(dtype).reshape(n, d)


def byte_planes_reference(words: npt.NDArray[np.generic]) -> U8:
    n, d = words.shape
    size = words.dtype.itemsize
    by_column = np.ascontiguousarray(words.T)
    return np.ascontiguousarray(by_column.view(np.uint8).reshape(n * d, size).T)
