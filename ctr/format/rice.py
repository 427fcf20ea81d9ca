"""Golomb-Rice codes of strictly increasing non-negative integers (a set of row ids).

Each value travels as its gap from the one before, less one (the first as itself): the
gap's high part `gap >> k` in unary (that many 1 bits, then a 0), then its `k` low bits,
low bit first; bits fill bytes from the low bit up, the last byte padded with zeros. About
log2(mean gap) + 1.5 bits a value, where a varint takes at least 8 and a bitmap one bit
per possible value.

The decoder validates everything (truncation, overflow, order, range, padding) and raises
ValueError, so a malformed request never reaches a table.
"""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]

MAX_K = 62  # a gap below 2**62 fits k low bits and a unary part the decoder can bound


def rice_gaps(values: I64) -> I64:
    """What the code writes for each value: its distance from the previous one, less one."""
    return np.diff(values, prepend=np.int64(-1)) - 1  # type: ignore[no-any-return]


def rice_bits(gaps: I64, k: int) -> int:
    """Bits of the code of these gaps with parameter k (padding not counted)."""
    return int((gaps >> np.int64(k)).sum()) + gaps.shape[0] * (k + 1)


def best_rice_k(gaps: I64) -> tuple[int, int]:
    """(k, bits) of the cheapest code. The best k lies within a step or two of
    log2(mean gap), so only those are priced (a pass over the gaps each)."""
    if gaps.shape[0] == 0:
        return 0, 0
    guess = int(np.log2(float(gaps.mean()) + 1.0))
    best = (0, -1)
    for k in range(max(0, guess - 2), min(MAX_K, guess + 2) + 1):
        bits = rice_bits(gaps, k)
        if best[1] < 0 or bits < best[1]:
            best = (k, bits)
    return best


@nb.njit(cache=True, nogil=True)
def _gap_of(values: I64, i: int, complement: bool, prev: np.int64) -> tuple[np.int64, np.int64, np.int64]:
    """The i-th value's (gaps it adds, their sum, the last value) of best_rice_of's walk:
    a value itself, or with `complement` the ids missing between it and the one before,
    whose gaps are 0 but the first's (the present ids skipped since the last missing one)."""
    v = values[i]
    if not complement:
        return np.int64(1), v - prev - 1, v
    start = values[i - 1] + 1 if i > 0 else np.int64(0)
    missing = v - start
    if missing <= 0:
        return np.int64(0), np.int64(0), prev
    return missing, start - prev - 1, v - 1


@nb.njit(cache=True, nogil=True)
def best_rice_of(values: I64, complement: bool) -> tuple[int, int, int]:
    """(k, bits, count) of the cheapest Rice code of strictly increasing values >= 0, or with
    `complement` of the values missing below the largest, without building those values
    or their gaps: best_rice_k(rice_gaps(...)) in two passes (a pull's ids, priced every
    pull, took a dozen array operations). Gaps of 0 add no unary bits, so only a run of
    missing values' first gap counts beyond the count."""
    count = np.int64(0)
    total = 0.0
    prev = np.int64(-1)
    for i in range(values.shape[0]):
        c, g, prev = _gap_of(values, i, complement, prev)
        count += c
        total += float(g)
    if count == 0:
        return 0, 0, 0
    guess = int(np.log2(total / count + 1.0))
    lo, hi = max(0, guess - 2), min(MAX_K, guess + 2)
    sums = np.zeros(hi - lo + 1, dtype=np.int64)
    prev = np.int64(-1)
    for i in range(values.shape[0]):
        c, g, prev = _gap_of(values, i, complement, prev)
        if c:
            for j in range(hi - lo + 1):
                sums[j] += g >> (lo + j)
    best_k, best_bits = 0, np.int64(-1)
    for j in range(hi - lo + 1):
        bits = sums[j] + count * (lo + j + 1)
        if best_bits < 0 or bits < best_bits:
            best_k, best_bits = lo + j, bits
    return best_k, int(best_bits), int(count)


def holes_below_largest(values: I64) -> I64:
    """The values missing below the largest of strictly increasing values >= 0."""
    if values.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    missing = np.ones(int(values[-1]) + 1, dtype=np.bool_)
    missing[values] = False
    return np.flatnonzero(missing).astype(np.int64)


@nb.njit(cache=True, nogil=True)
def rice_encode(values: I64, k: int) -> U8:
    """Strictly increasing values >= 0 (the caller's contract) as a Rice code with parameter k."""
    n = values.shape[0]
    bits = 0
    prev = np.int64(-1)
    for i in range(n):
        bits += ((values[i] - prev - 1) >> k) + k + 1
        prev = values[i]
    out = np.zeros((bits + 7) // 8, dtype=np.uint8)
    pos = 0
    prev = np.int64(-1)
    low = (np.int64(1) << k) - 1
    for i in range(n):
        gap = values[i] - prev - 1
        prev = values[i]
        q = gap >> k
        for _ in range(q):
            out[pos >> 3] |= np.uint8(1 << (pos & 7))
            pos += 1
        pos += 1  # the unary part's closing 0
        r = gap & low
        for b in range(k):
            if (r >> b) & 1:
                out[(pos + b) >> 3] |= np.uint8(1 << ((pos + b) & 7))
        pos += k
    return out


@nb.njit(cache=True, nogil=True)
def rice_decode(buf: U8, start: int, count: int, k: int, limit: np.int64) -> I64:
    """`count` values of the code of rice_encode in buf[start:], each below `limit`. The
    code must end in buf's last byte, padded with zero bits."""
    if k < 0 or k > MAX_K:
        raise ValueError("rice parameter out of range")
    end = buf.shape[0] * 8
    pos = start * 8
    out = np.empty(count, dtype=np.int64)
    prev = np.int64(-1)
    for i in range(count):
        q = np.int64(0)
        while True:
            if pos >= end:
                raise ValueError("truncated rice code")
            bit = (buf[pos >> 3] >> (pos & 7)) & 1
            pos += 1
            if bit == 0:
                break
            q += 1
            if q >= limit:
                raise ValueError("rice value past the limit")
        if pos + k > end:
            raise ValueError("truncated rice code")
        r = np.int64(0)
        for b in range(k):
            r |= np.int64((buf[(pos + b) >> 3] >> ((pos + b) & 7)) & 1) << b
        pos += k
        if q > (limit >> k):
            raise ValueError("rice value past the limit")
        value = prev + 1 + ((q << k) | r)
        if value >= limit:
            raise ValueError("rice value past the limit")
        out[i] = value
        prev = value
    if (pos + 7) // 8 != buf.shape[0]:
        raise ValueError("bytes after the rice code")
    if pos & 7 and buf[buf.shape[0] - 1] >> (pos & 7):
        raise ValueError("nonzero padding after the rice code")
    return out
