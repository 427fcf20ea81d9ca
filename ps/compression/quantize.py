"""Integer quantizers: int8 with a per-row scale and offset and stochastic rounding, and
1-bit signs with per-column reconstruction values (Seide et al.'s 1-bit SGD)."""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]
U8 = npt.NDArray[np.uint8]
U32 = npt.NDArray[np.uint32]


@nb.njit(cache=True, nogil=True, inline="always")
def _splitmix(x: np.uint64) -> np.uint64:
    x += np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@nb.njit(cache=True, nogil=True)
def uniforms(seed: int, count: int) -> F64:
    """The [0, 1) numbers encode_int8 rounds with: splitmix64 of (seed, index), counter-based
    so the kernel stays a pure function of its arguments (numpy's generator cost more than
    the quantizing)."""
    out = np.empty(count)
    base = np.uint64(seed) * np.uint64(0xD1342543DE82EF95)
    for i in range(count):
        out[i] = float(_splitmix(base + np.uint64(i)) >> np.uint64(11)) * (1.0 / 9007199254740992.0)
    return out


@nb.njit(cache=True, nogil=True)
def encode_int8(values: F64, seed: int) -> tuple[F32, F32, U8, F64]:
    """(row minimum, row step, codes): value ~ minimum + step * code, code in 0..255,
    rounded up with probability equal to the remainder (uniforms(seed, n * d), one per
    value), so the decoded value is unbiased; and the decoded values, for error feedback.
    values may be a strided view (the transpose, for scales per column)."""
    n, d = values.shape
    lo = np.empty(n, dtype=np.float32)
    step = np.empty(n, dtype=np.float32)
    codes = np.empty(n * d, dtype=np.uint8)
    decoded = np.empty((n, d), dtype=np.float64)
    base_seed = np.uint64(seed) * np.uint64(0xD1342543DE82EF95)
    for i in range(n):
        a = values[i, 0]
        b = values[i, 0]
        for c in range(1, d):
            a = min(a, values[i, c])
            b = max(b, values[i, c])
        lo[i] = np.float32(a)
        if float(lo[i]) > a:  # round the minimum down, so no value sits below it
            lo[i] = np.nextafter(lo[i], np.float32(-np.inf))
        step[i] = np.float32((b - float(lo[i])) / 255.0)  # from the rounded minimum, so the maximum stays reachable
        s = float(step[i])
        base = float(lo[i])
        inv = 1.0 / s if s > 0.0 else 0.0
        for c in range(d):
            q = 0.0
            if s > 0.0:
                u = float(_splitmix(base_seed + np.uint64(i * d + c)) >> np.uint64(11)) * (1.0 / 9007199254740992.0)
                q = np.floor((values[i, c] - base) * inv + u)
                q = min(max(q, 0.0), 255.0)
            codes[i * d + c] = np.uint8(q)
            decoded[i, c] = base + s * q
    return lo, step, codes, decoded


@nb.njit(cache=True, nogil=True)
def decode_int8(lo: F32, step: F32, codes: U8, d: int) -> F64:
    n = lo.shape[0]
    out = np.empty((n, d), dtype=np.float64)
    for i in range(n):
        for c in range(d):
            out[i, c] = float(lo[i]) + float(step[i]) * float(codes[i * d + c])
    return out


@nb.njit(cache=True, nogil=True)
def encode_onebit(values: F64) -> tuple[F32, F32, U8]:
    """(per column: mean of its values >= 0, mean of its values < 0; a sign bit per value,
    row-major, 1 for >= 0, packed little-endian 8 to a byte): each value is sent as its
    column's mean of the same sign, which keeps each column's sum exact. Rows, then columns,
    with no branch on a sign (each sum adds 0.0 where the value is the other sign, which
    changes no sum) and each byte of signs stored once: a modulo and a mispredicted branch a
    value cost a 3000 x 16 push a fifth more."""
    n, d = values.shape
    pos_sum = np.zeros(d)
    neg_sum = np.zeros(d)
    pos_n = np.zeros(d, dtype=np.int64)
    packed = np.zeros((n * d + 7) // 8, dtype=np.uint8)
    byte = 0
    i = 0
    for r in range(n):
        for c in range(d):
            v = values[r, c]
            p = v >= 0.0
            pos_sum[c] += v if p else 0.0
            neg_sum[c] += 0.0 if p else v
            pos_n[c] += 1 if p else 0
            byte |= (1 if p else 0) << (i & 7)
            if (i & 7) == 7:
                packed[i >> 3] = byte
                byte = 0
            i += 1
    if (n * d) & 7:
        packed[(n * d) >> 3] = byte
    pos = np.zeros(d, dtype=np.float32)
    neg = np.zeros(d, dtype=np.float32)
    for c in range(d):
        if pos_n[c] > 0:
            pos[c] = np.float32(pos_sum[c] / pos_n[c])
        if n - pos_n[c] > 0:
            neg[c] = np.float32(neg_sum[c] / (n - pos_n[c]))
    return pos, neg, packed


@nb.njit(cache=True, nogil=True)
def decode_onebit(pos: F32, neg: F32, packed: U8, n: int) -> F64:
    """Each value its column's mean of its sign: a select, not a branch (half as long)."""
    d = pos.shape[0]
    up = pos.astype(np.float64)
    down = neg.astype(np.float64)
    out = np.empty((n, d), dtype=np.float64)
    i = 0
    for r in range(n):
        for c in range(d):
            out[r, c] = up[c] if (packed[i >> 3] >> (i & 7)) & 1 else down[c]
            i += 1
    return out


@nb.njit(cache=True, nogil=True)
def decode_onebit_planes(pos: F32, neg: F32, planes: U8, n: int) -> F64:
    """decode_onebit of signs sent as planes (bits.bit_planes' layout: plane c holds column
    c's n bits), without packing them back row-major first: a shard's decoding of a
    1,100 x 16 push's planes 30 -> 10 us, of a 75,000 x 2 push's 0.90 -> 0.46 ms."""
    d = pos.shape[0]
    up = pos.astype(np.float64)
    down = neg.astype(np.float64)
    out = np.empty((n, d), dtype=np.float64)
    for r in range(n):
        byte, bit = r >> 3, r & 7
        for c in range(d):
            out[r, c] = up[c] if (planes[c, byte] >> bit) & 1 else down[c]
    return out


@nb.njit(cache=True, nogil=True)
def rows_past_bound(residual: F64, decoded: F64, bound: float, skip: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    """The rows (indices, ascending) of `residual` whose residual passes `bound` times its
    column's mean absolute value among the rows sent (`decoded`), in any column not
    skipped; two passes over the rows (the numpy expression it replaces made five arrays:
    0.16 ms of a 3000 x 16 push's 1 ms)."""
    sent, d = decoded.shape  # the rows sent (top-k's), of the residual's n
    limit = np.zeros(d)
    for r in range(sent):  # summed in row order, as numpy's mean over axis 0 of a C array is
        for c in range(d):
            limit[c] += abs(decoded[r, c])
    for c in range(d):
        limit[c] = np.inf if skip[c] else bound * (limit[c] / sent)
    n = residual.shape[0]
    out = np.empty(n, dtype=np.int64)
    m = 0
    for r in range(n):
        over = False
        for c in range(d):
            over |= abs(residual[r, c]) > limit[c]
        out[m] = r
        m += 1 if over else 0
    return out[:m]


U16 = npt.NDArray[np.uint16]


@nb.njit(cache=True, nogil=True)
def round_bf16(rows: F64, drop: U32) -> tuple[U16, F64]:
    """(bf16 words [n, d], the values they decode to): each value as float32, its low
    `drop[c]` bits rounded off to nearest even (16 for bf16 itself, more for a column that
    keeps fewer mantissa bits), a subnormal float32 as bf16's own rounding; one pass where
    the array form took a dozen (a push of a few hundred rows is mostly such overhead)."""
    n, d = rows.shape
    top = np.empty((n, d), dtype=np.uint16)
    out = np.empty((n, d), dtype=np.float64)
    as_f32 = np.empty(d, dtype=np.float32)
    bits = as_f32.view(np.uint32)
    back = np.empty(d, dtype=np.uint32)
    back_f32 = back.view(np.float32)
    one = np.uint64(1)
    for i in range(n):
        for c in range(d):
            as_f32[c] = rows[i, c]
        for c in range(d):
            u = np.uint64(bits[c])
            k = np.uint64(drop[c]) if u & np.uint64(0x7F800000) else np.uint64(16)
            r = ((u + ((one << (k - one)) - one) + ((u >> k) & one)) >> k) << k  # no wrap in 64 bits
            w = np.uint16((r >> np.uint64(16)) & np.uint64(0xFFFF))
            top[i, c] = w
            back[c] = np.uint32(w) << np.uint32(16)
        for c in range(d):
            out[i, c] = back_f32[c]
    return top, out


def round_bf16_reference(rows: F64, drop: U32) -> tuple[U16, F64]:
    """Plain reference of round_bf16, in uint32 array arithmetic."""
    u = np.ascontiguousarray(rows, dtype=np.float32).view(np.uint32)
    one = np.uint32(1)
    dr = np.broadcast_to(drop.astype(np.uint32), u.shape)
    dr = np.where((u & np.uint32(0x7F800000)) == 0, np.uint32(16), dr)
    half, mask = (one << (dr - one)) - one, ~((one << dr) - one)
    top = (((u + half + ((u >> dr) & one)) & mask) >> np.uint32(16)).astype(np.uint16)
    return top, (top.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
