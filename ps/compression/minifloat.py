"""Low-precision floats with `exp_bits` exponent and `man_bits` mantissa bits plus a sign
(the EPGC formats of the LPDU paper: 1+5+2, 1+8+0, 1+5+5; bf16 is 1+8+7), as integer codes
for bits.pack_bits. Every code is finite: exponent field 0 is zero, the largest field a
normal binade (no inf or NaN), values beyond the range saturate, values below half the
smallest normal flush to zero. Each column is first scaled by a power of two (its `shift`)
so that its largest magnitude lands in the binade below the top: a 5-bit exponent then covers the 30
binades below each column's maximum, wherever the column's values sit. Rounding is to
nearest, ties away from zero."""

from __future__ import annotations

import math

import numba as nb
import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
U32 = npt.NDArray[np.uint32]
I32 = npt.NDArray[np.int32]


@nb.njit(cache=True, nogil=True)
def column_shifts(values: F64, exp_bits: int) -> I32:
    """Per column, the power of two that maps the column's max |value| one binade below the top."""
    n, d = values.shape
    top = (1 << exp_bits) - 2 - ((1 << (exp_bits - 1)) - 1)  # one binade below the top: room to round up
    top_abs = np.zeros(d)
    for i in range(n):  # row-major: one pass in memory order
        for c in range(d):
            top_abs[c] = max(top_abs[c], abs(values[i, c]))
    out = np.zeros(d, dtype=np.int32)
    for c in range(d):
        if top_abs[c] > 0.0:
            _, e = math.frexp(top_abs[c])  # top_abs = f * 2**e, f in [0.5, 1)
            out[c] = np.int32(e - 1 - top)
    return out


@nb.njit(cache=True, nogil=True)
def encode_minifloat(values: F64, shifts: I32, exp_bits: int, man_bits: int) -> tuple[U32, F64]:
    """(codes (sign, exponent, mantissa) of values [n, d], row-major, column c scaled by
    2**-shifts[c]; the values they decode to, for error feedback). Works on the float64 bits:
    adding half an ulp of the target mantissa and truncating rounds, and a carry lands in the
    exponent by itself. float64 subnormals (below 2**-1022) are zero."""
    n, d = values.shape
    bias = (1 << (exp_bits - 1)) - 1
    emax = (1 << exp_bits) - 1  # largest exponent field
    drop = np.uint64(52 - man_bits)
    half = np.uint64(1) << np.uint64(51 - man_bits)
    mmask = np.uint64((1 << man_bits) - 1)
    sign_at = np.uint32(exp_bits + man_bits)
    bits = values.reshape(-1).view(np.uint64)
    out = np.empty(n * d, dtype=np.uint32)
    decoded = np.empty(n * d, dtype=np.float64)
    dbits = decoded.view(np.uint64)
    for i in range(n * d):
        u = bits[i]
        sign = np.uint32(u >> np.uint64(63)) << sign_at
        mag = u & np.uint64(0x7FFFFFFFFFFFFFFF)
        raw_exp = np.int64(mag >> np.uint64(52))
        if raw_exp == 0:  # zero or a float64 subnormal
            out[i] = np.uint32(0)
            decoded[i] = 0.0
            continue
        shift = np.int64(shifts[i % d])
        r = mag + half
        field = np.int64(r >> np.uint64(52)) - 1023 - shift + bias
        mant = (r >> drop) & mmask
        if field > emax:
            field = np.int64(emax)
            mant = mmask
        elif field < 1:
            mant = np.uint64(0)
            field = np.int64(1 if raw_exp - 1023 - shift >= -bias else 0)  # half the smallest normal rounds up to it
        if field == 0:
            out[i] = np.uint32(0)
            decoded[i] = 0.0
            continue
        out[i] = sign | np.uint32((field << man_bits) | np.int64(mant))
        e = field - bias + shift + 1023
        if 1 <= e <= 2046:
            dbits[i] = (u & np.uint64(0x8000000000000000)) | (np.uint64(e) << np.uint64(52)) | (mant << drop)
        else:
            v = math.ldexp(1.0 + float(mant) / float(1 << man_bits), int(e - 1023))
            decoded[i] = -v if sign else v
    return out, decoded.reshape(n, d)


@nb.njit(cache=True, nogil=True)
def decode_minifloat(codes: U32, d: int, shifts: I32, exp_bits: int, man_bits: int) -> F64:
    """Values [n, d] of encode_minifloat's codes, built as float64 bits."""
    n = codes.shape[0] // d
    bias = (1 << (exp_bits - 1)) - 1
    out = np.empty(n * d, dtype=np.float64)
    bits = out.view(np.uint64)
    mmask = np.uint32((1 << man_bits) - 1)
    emask = np.uint32((1 << exp_bits) - 1)
    up = np.uint64(52 - man_bits)
    for i in range(n * d):
        code = codes[i]
        field = np.int64((code >> np.uint32(man_bits)) & emask)
        if field == 0:
            out[i] = 0.0
            continue
        e = field - bias + np.int64(shifts[i % d]) + 1023
        sign = np.uint64((code >> np.uint32(exp_bits + man_bits)) & np.uint32(1)) << np.uint64(63)
        if 1 <= e <= 2046:
            bits[i] = sign | (np.uint64(e) << np.uint64(52)) | (np.uint64(code & mmask) << up)
        else:  # beyond float64's normal range: ldexp saturates to inf or goes subnormal
            v = math.ldexp(1.0 + float(code & mmask) / float(1 << man_bits), int(e - 1023))
            out[i] = -v if sign else v
    return out.reshape(n, d)
