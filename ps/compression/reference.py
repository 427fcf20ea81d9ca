"""Plain numpy references of the compression kernels, used by their tests."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]


def pack_bits_reference(codes: npt.NDArray[np.uint32], bits: int) -> npt.NDArray[np.uint8]:
    stream = ((codes[:, None].astype(np.uint64) >> np.arange(bits, dtype=np.uint64)) & np.uint64(1)).astype(np.uint8)
    return np.packbits(stream.reshape(-1), bitorder="little")


def minifloat_reference(values: F64, shifts: npt.NDArray[np.int32], exp_bits: int, man_bits: int) -> F64:
    """The values encode_minifloat then decode_minifloat give, computed directly: round to
    man_bits of mantissa (half away from zero), saturate, flush below half the smallest normal."""
    bias = (1 << (exp_bits - 1)) - 1
    a = np.ldexp(np.abs(values), -shifts[None, :].astype(np.int64))
    f, e = np.frexp(a)
    mant = np.floor((2 * f - 1) * (1 << man_bits) + 0.5) / (1 << man_bits) + 1.0
    out = np.ldexp(mant, e - 1)
    biggest = np.ldexp(2.0 - 2.0**-man_bits, (1 << exp_bits) - 1 - bias)
    smallest = np.ldexp(1.0, 1 - bias)
    out = np.where(out > biggest, biggest, out)
    out = np.where(a < smallest, np.where(a >= smallest / 2, smallest, 0.0), out)
    out = np.sign(values) * np.ldexp(out, shifts[None, :].astype(np.int64))
    return np.where(np.abs(values) < np.finfo(np.float64).tiny, 0.0, out)  # float64 subnormals are zero


def onebit_reference(values: F64) -> F64:
    pos = values >= 0
    npos = pos.sum(axis=0)
    pos_mean = np.where(npos > 0, np.where(pos, values, 0).sum(axis=0) / np.maximum(npos, 1), 0.0).astype(np.float32)
    nneg = (~pos).sum(axis=0)
    neg_mean = np.where(nneg > 0, np.where(~pos, values, 0).sum(axis=0) / np.maximum(nneg, 1), 0.0).astype(np.float32)
    return np.where(pos, pos_mean[None, :], neg_mean[None, :]).astype(np.float64)


def int8_reference(values: F64, uniforms: F64) -> F64:
    low = values.min(axis=1)
    lo = low.astype(np.float32)
    lo = np.where(lo.astype(np.float64) > low, np.nextafter(lo, np.float32(-np.inf)), lo).astype(np.float32)
    step = ((values.max(axis=1) - lo.astype(np.float64)) / 255.0).astype(np.float32)
    s, base = step.astype(np.float64)[:, None], lo.astype(np.float64)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where(s > 0, 1.0 / s, 0.0)
        q = np.where(s > 0, np.clip(np.floor((values - base) * inv + uniforms.reshape(values.shape)), 0, 255), 0.0)
    return base + s * q


def row_scores_reference(values: F64) -> F64:
    mean = np.abs(values).mean(axis=0)
    return (np.abs(values) / np.where(mean > 0, mean, 1.0)).sum(axis=1)


def round_mantissa_reference(values: F64, bits: int) -> F64:
    """round_mantissa, computed in float64 from frexp: the float32 of each value, rounded
    to `bits` mantissa bits, to nearest with ties to even; zeros, float32 subnormals, infs,
    NaNs and values that would round past float32's largest stay as float32 has them."""
    f = np.asarray(values, dtype=np.float32).astype(np.float64)
    m, e = np.frexp(f)  # |m| in [0.5, 1): 1 + bits significant bits are 2m scaled by 2**bits
    r = np.ldexp(np.round(np.ldexp(m, bits + 1)), e - bits - 1)  # np.round: ties to even
    keep = ~np.isfinite(f) | (np.abs(f) < np.finfo(np.float32).tiny) | (np.abs(r) > np.finfo(np.float32).max)
    return np.where(keep, f, r)


def rows_past_bound_reference(residual: F64, decoded: F64, bound: float, skip: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
    limit = bound * np.abs(decoded).mean(axis=0)
    limit[skip] = np.inf
    return np.flatnonzero(np.any(np.abs(residual) > limit, axis=1))


def onebit_parts_reference(values: F64) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.uint8]]:
    """encode_onebit's means and packed signs (the sums over rows in row order, as numpy
    reduces axis 0 of a C array)."""
    pos = values >= 0
    npos, nneg = pos.sum(axis=0), (~pos).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        up = np.where(npos > 0, np.where(pos, values, 0.0).sum(axis=0) / npos, 0.0).astype(np.float32)
        down = np.where(nneg > 0, np.where(~pos, values, 0.0).sum(axis=0) / nneg, 0.0).astype(np.float32)
    return up, down, np.packbits(pos.reshape(-1), bitorder="little")
