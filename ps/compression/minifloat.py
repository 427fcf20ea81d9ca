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
    out = np.zeros(d, dtype=np.int32)
    for c in range(d):
        m = 0.0
        for i in range(n):
            m = max(m, abs(values[i, c]))
        if m > 0.0:
            _, e = math.frexp(m)  # m = f * 2**e, f in [0.5, 1)
            out[c] = np.int32(e - 1 - top)
    return out


@nb.njit(cache=True, nogil=True)
def encode_minifloat(values: F64, shifts: I32, exp_bits: int, man_bits: int) -> U32:
    """Codes (sign, exponent, mantissa) of values [n, d], row-major, column c scaled by
    2**-shifts[c]."""
    n, d = values.shape
    bias = (1 << (exp_bits - 1)) - 1
    emax = (1 << exp_bits) - 1  # largest exponent field
    mscale = float(1 << man_bits)
    out = np.empty(n * d, dtype=np.uint32)
    for i in range(n):
        for c in range(d):
            x = values[i, c]
            sign = np.uint32(1) if x < 0.0 else np.uint32(0)
            a = math.ldexp(abs(x), -shifts[c])
            code = np.uint32(0)
            if a > 0.0:
                f, e = math.frexp(a)  # a = (2f) * 2**(e-1), 2f in [1, 2)
                q = int(math.floor((2.0 * f - 1.0) * mscale + 0.5))
                field = e - 1 + bias
                if q >= (1 << man_bits):
                    q = 0
                    field += 1
                if field > emax:
                    field = emax
                    q = (1 << man_bits) - 1
                if field >= 1:
                    code = np.uint32((field << man_bits) | q)
                elif a >= math.ldexp(0.5, 1 - bias):  # half the smallest normal rounds up to it
                    code = np.uint32(1 << man_bits)
            out[i * d + c] = code | (sign << np.uint32(exp_bits + man_bits)) if code else np.uint32(0)
    return out


@nb.njit(cache=True, nogil=True)
def decode_minifloat(codes: U32, d: int, shifts: I32, exp_bits: int, man_bits: int) -> F64:
    """Values [n, d] of encode_minifloat's codes."""
    n = codes.shape[0] // d
    bias = (1 << (exp_bits - 1)) - 1
    out = np.empty((n, d), dtype=np.float64)
    mmask = np.uint32((1 << man_bits) - 1)
    emask = np.uint32((1 << exp_bits) - 1)
    for i in range(n):
        for c in range(d):
            code = codes[i * d + c]
            field = (code >> np.uint32(man_bits)) & emask
            if field == 0:
                out[i, c] = 0.0
                continue
            mant = 1.0 + float(code & mmask) / float(1 << man_bits)
            v = math.ldexp(mant, int(field) - bias + int(shifts[c]))
            out[i, c] = -v if (code >> np.uint32(exp_bits + man_bits)) & np.uint32(1) else v
    return out
