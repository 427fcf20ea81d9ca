"""LEB128 varint kernels: delta-coded sorted keys and gap-coded index lists.

Decoders validate everything (truncation, overflow, ranges, trailing bytes) and raise
ValueError, so a malformed request never reaches the model.
"""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.format.word_load import load_u64_le, trailing_zeros

U8 = npt.NDArray[np.uint8]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]


@nb.njit(cache=True, inline="always")
def unzigzag_one(z: np.uint64) -> np.int64:
    """The signed value of a zigzag code: 0, 1, 2, 3 -> 0, -1, 1, -2."""
    return np.int64(z >> np.uint64(1)) ^ -np.int64(z & np.uint64(1))


@nb.njit(cache=True, inline="always")
def _put(out: U8, pos: int, v: np.uint64) -> int:
    while v >= np.uint64(0x80):
        out[pos] = np.uint8((v & np.uint64(0x7F)) | np.uint64(0x80))
        v >>= np.uint64(7)
        pos += 1
    out[pos] = np.uint8(v)
    return pos + 1


@nb.njit(cache=True, inline="always")
def _get(buf: U8, pos: int) -> tuple[np.uint64, int]:
    v = np.uint64(0)
    shift = np.uint64(0)
    n = buf.shape[0]
    while True:
        if pos >= n:
            raise ValueError("truncated varint")
        b = np.uint64(buf[pos])
        pos += 1
        if shift == np.uint64(63) and b > np.uint64(1):
            raise ValueError("varint overflows 64 bits")
        v |= (b & np.uint64(0x7F)) << shift
        if b < np.uint64(0x80):
            return v, pos
        shift += np.uint64(7)
        if shift > np.uint64(63):
            raise ValueError("varint longer than 10 bytes")


@nb.njit(cache=True, nogil=True)
def encode_sorted_keys(keys: U64) -> U8:
    """Strictly increasing keys as first key then gaps, each a varint."""
    out = np.empty(keys.shape[0] * 10, dtype=np.uint8)
    pos = 0
    prev = np.uint64(0)
    for i in range(keys.shape[0]):
        pos = _put(out, pos, keys[i] - prev)
        prev = keys[i]
    return out[:pos].copy()


STOP_BITS = np.uint64(0x8080808080808080)  # each byte's continuation bit
LOW_BITS = np.uint64(0x7F7F7F7F7F7F7F7F)
GATHER = np.uint64(0x0102040810204080)  # moves bit 8k of a product's factor to bit 56 + k
WINDOW = 64  # bytes whose varint ends one mask holds


@nb.njit(cache=True, inline="always")
def _end_mask(buf: U8, base: int) -> np.uint64:
    """Bit k set where buf[base + k] (k < 64) ends a varint (its high bit is clear)."""
    mask = np.uint64(0)
    for w in range(WINDOW // 8):
        ends = (~load_u64_le(buf, base + 8 * w) & STOP_BITS) >> np.uint64(7)  # type: ignore[call-arg]  # byte k: 0 or 1
        mask |= ((ends * GATHER) >> np.uint64(56)) << np.uint64(8 * w)
    return mask


@nb.njit(cache=True, inline="always")
def _word_value(word: np.uint64, length: int) -> np.uint64:
    """The value of a varint of `length` (1..8) bytes in the low bytes of `word`: its 7-bit
    groups joined in three steps of shifts instead of one per byte."""
    x = word & LOW_BITS
    if length < 8:
        x &= (np.uint64(1) << np.uint64(8 * length)) - np.uint64(1)
    x = ((x & np.uint64(0x7F007F007F007F00)) >> np.uint64(1)) | (x & np.uint64(0x007F007F007F007F))
    x = ((x & np.uint64(0x3FFF00003FFF0000)) >> np.uint64(2)) | (x & np.uint64(0x00003FFF00003FFF))
    return ((x & np.uint64(0x0FFFFFFF00000000)) >> np.uint64(4)) | (x & np.uint64(0x000000000FFFFFFF))


@nb.njit(cache=True, inline="always")
def read_varints(buf: U8, pos: int, out: U64, at: int, count: int) -> int:
    """Reads `count` varints from buf[pos:] into out[at:]; returns the position after them.
    The last bytes of a buffer, and varints over 8 bytes, are read a byte at a time
    (_get). Elsewhere, where each ends comes from a mask of 64 bytes' high bits (_end_mask), taken a set bit
    at a time, and its value from one 8-byte load: no branch depends on a varint's
    length, which a byte loop mispredicts when lengths mix (2x faster on mixed 1-3 byte
    gaps, 0.35 instead of 0.48 ms for a request's 80k item indices). Raises ValueError as
    _get does."""
    n = buf.shape[0]
    found = 0
    base = pos
    mask = np.uint64(0)
    while found < count:
        if mask == np.uint64(0):
            base = pos  # the next window starts at the varint being read
            if base + WINDOW + 8 > n:
                break
            mask = _end_mask(buf, base)
            if mask == np.uint64(0):
                break  # 64 bytes and no end: _get raises
        end = base + np.int64(trailing_zeros(mask))  # type: ignore[call-arg]
        mask &= mask - np.uint64(1)
        if end - pos < 8:
            out[at + found] = _word_value(load_u64_le(buf, pos), end + 1 - pos)  # type: ignore[call-arg]
            pos = end + 1
        else:
            out[at + found], pos = _get(buf, pos)
        found += 1
    while found < count:
        out[at + found], pos = _get(buf, pos)
        found += 1
    return pos


@nb.njit(cache=True, inline="always")
def read_increasing(buf: U8, pos: int, out: U64, at: int, count: int, strict: bool = True) -> int:
    """Reads `count` increasing values (strictly, unless not `strict`), the first then
    gaps, each a varint, into out[at:]; returns the position after them. Raises ValueError
    naming what is wrong."""
    pos = read_varints(buf, pos, out, at, count)
    prev = np.uint64(0)
    for i in range(count):
        gap = out[at + i]
        if strict and i > 0 and gap == np.uint64(0):
            raise ValueError("values are not strictly increasing")
        nxt = prev + gap
        if nxt < prev:
            raise ValueError("a gap overflows 64 bits")
        out[at + i] = nxt
        prev = nxt
    return pos


@nb.njit(cache=True, nogil=True)
def decode_sorted_keys(buf: U8, count: int) -> U64:
    """Inverse of encode_sorted_keys; rejects non-increasing keys and trailing bytes."""
    out = np.empty(count, dtype=np.uint64)
    pos = read_increasing(buf, 0, out, 0, count)
    if pos != buf.shape[0]:
        raise ValueError("trailing bytes after the last key")
    return out


@nb.njit(cache=True, nogil=True)
def encode_index_lists(offsets: I64, indices: I64) -> U8:
    """Lists indices[offsets[i]:offsets[i+1]] (each ascending) as count + gaps, all varints."""
    out = np.empty(offsets.shape[0] * 10 + indices.shape[0] * 10, dtype=np.uint8)
    pos = 0
    for i in range(offsets.shape[0] - 1):
        lo, hi = offsets[i], offsets[i + 1]
        pos = _put(out, pos, np.uint64(hi - lo))
        prev = 0
        for j in range(lo, hi):
            pos = _put(out, pos, np.uint64(indices[j] - prev))
            prev = indices[j]
    return out[:pos].copy()


@nb.njit(cache=True, nogil=True)
def decode_index_lists(buf: U8, lists: int, limit: int) -> tuple[I64, I64]:
    """Inverse of encode_index_lists: (offsets, indices), every index < limit."""
    offsets = np.zeros(lists + 1, dtype=np.int64)
    cap = max(buf.shape[0], 1)
    indices = np.empty(cap, dtype=np.int64)  # each index takes at least one byte
    as_u64 = indices.view(np.uint64)  # the same memory: indices below limit are the same numbers
    pos = 0
    n = 0
    for i in range(lists):
        count, pos = _get(buf, pos)
        if count > np.uint64(buf.shape[0] - pos):
            raise ValueError("list count exceeds the remaining bytes")
        c = int(count)
        pos = read_increasing(buf, pos, as_u64, n, c, False)
        if c and as_u64[n + c - 1] >= np.uint64(limit):  # ascending: the last is the largest
            raise ValueError("index out of the dictionary's range")
        n += c
        offsets[i + 1] = n
    if pos != buf.shape[0]:
        raise ValueError("trailing bytes after the last list")
    return offsets, indices[:n]  # a view: a copy costs more than the spare bytes


@nb.njit(cache=True, nogil=True)
def encode_varints(values: U64) -> U8:
    """Each value as a LEB128 varint, back to back."""
    out = np.empty(values.shape[0] * 10, dtype=np.uint8)
    pos = 0
    for i in range(values.shape[0]):
        pos = _put(out, pos, values[i])
    return out[:pos].copy()


@nb.njit(cache=True, nogil=True)
def decode_runs(buf: U8, total: int, limit: int) -> npt.NDArray[np.int32]:
    """Expands `runs, (value, length) * runs` varints into total values, each < limit."""
    out = np.empty(total, dtype=np.int32)
    runs, pos = _get(buf, 0)
    at = 0
    for _ in range(runs):
        value, pos = _get(buf, pos)
        length, pos = _get(buf, pos)
        if value >= np.uint64(limit):
            raise ValueError("field index out of range")
        if length > np.uint64(total - at):
            raise ValueError("runs cover more entries than the dictionary holds")
        for i in range(at, at + int(length)):
            out[i] = np.int32(value)
        at += int(length)
    if at != total:
        raise ValueError("runs cover fewer entries than the dictionary holds")
    if pos != buf.shape[0]:
        raise ValueError("trailing bytes after the last run")
    return out
