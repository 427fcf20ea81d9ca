"""numba kernels of the token-dictionary client: the request's unique (block, token) pairs
in ascending order, with a plain reference used in the tests."""

from __future__ import annotations

import threading

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.data.unique import unique_inverse

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]


@nb.njit(cache=True, nogil=True)
def _composite_unique(code: I64, z: U64, shift: int) -> tuple[U64, I64]:
    n = code.shape[0]
    comp = np.empty(n, dtype=np.uint64)
    for i in range(n):
        comp[i] = (np.uint64(code[i]) << np.uint64(shift)) | z[i]
    return unique_inverse(comp)  # type: ignore[no-any-return]


@nb.njit(cache=True, nogil=True)
def _ranked(order: I64, inverse: I64) -> I64:
    rank = np.empty(order.shape[0], dtype=np.int64)
    for r in range(order.shape[0]):
        rank[order[r]] = r
    idx = np.empty(inverse.shape[0], dtype=np.int64)
    for i in range(inverse.shape[0]):
        idx[i] = rank[inverse[i]]
    return idx


def ordered_unique(code: I64, z: U64, shift: int) -> tuple[U64, I64]:
    """(the unique values of code << shift | z, ascending; each feature's index among them).
    The caller guarantees every z < 2**shift. Unique by hashing in numba, then numpy's sort
    of the few unique values (faster than numba's)."""
    uniq, inverse = _composite_unique(code, z, shift)
    order = np.argsort(uniq)
    return uniq[order], _ranked(order, inverse)


def ordered_unique_reference(code: I64, z: U64, shift: int) -> tuple[U64, I64]:
    comp = (code.astype(np.uint64) << np.uint64(shift)) | z
    uniq, inverse = np.unique(comp, return_inverse=True)
    return uniq, inverse.reshape(-1).astype(np.int64)


@nb.njit(cache=True, nogil=True)
def expand_columns(tokens: I64, sub: U8, col_start: I64, col_code: I64, col_per: I64) -> tuple[I64, U64, I64]:
    """(block code, zigzag value, owner) of every integer token, from columns: column c holds
    tokens[col_start[c]:col_start[c+1]] with block code col_code[c] (+ sub[i] per value when
    sub is not empty) and col_per[c] values per item (0: the context, owner -1)."""
    n = tokens.shape[0]
    code = np.empty(n, dtype=np.int64)
    z = np.empty(n, dtype=np.uint64)
    owner = np.empty(n, dtype=np.int64)
    for c in range(col_code.shape[0]):
        lo, per = col_start[c], col_per[c]
        for i in range(lo, col_start[c + 1]):
            code[i] = col_code[c] + (np.int64(sub[i]) if sub.shape[0] else 0)
            z[i] = np.uint64((tokens[i] << 1) ^ (tokens[i] >> 63))
            owner[i] = (i - lo) // per if per > 0 else -1
    return code, z, owner


@nb.njit(cache=True, nogil=True)
def _packed_columns(
    tokens: I64, sub: U8, col_start: I64, col_code: I64, col_per: I64, group_bits: int, item_count: int, packed: U64
) -> tuple[I64, int]:
    """Writes each token's (code << shift | zigzag value) << group_bits | owner + 1 into
    packed; returns (group bounds, shift), shift -1 when they do not fit in 64 bits."""
    n = tokens.shape[0]
    zmax = np.uint64(0)
    cmax = 0
    for i in range(n):
        zmax = max(zmax, np.uint64((tokens[i] << 1) ^ (tokens[i] >> 63)))
    for c in range(col_code.shape[0]):
        cmax = max(cmax, col_code[c] + 3)
    shift = 1
    while shift < 64 and (zmax >> np.uint64(shift)) != 0:
        shift += 1
    code_bits = 1
    while (cmax >> code_bits) != 0:
        code_bits += 1
    bounds = np.zeros(item_count + 2, dtype=np.int64)
    if code_bits + shift + group_bits > 64:
        return bounds, -1
    for c in range(col_code.shape[0]):
        lo, per = col_start[c], col_per[c]
        for i in range(lo, col_start[c + 1]):
            code = col_code[c] + (np.int64(sub[i]) if sub.shape[0] else 0)
            comp = (np.uint64(code) << np.uint64(shift)) | np.uint64((tokens[i] << 1) ^ (tokens[i] >> 63))
            g = (i - lo) // per + 1 if per > 0 else 0
            packed[i] = (comp << np.uint64(group_bits)) | np.uint64(g)
            bounds[g + 1] += 1
    for g in range(1, item_count + 2):
        bounds[g] += bounds[g - 1]
    return bounds, shift


@nb.njit(cache=True, nogil=True)
def _groups_of_sorted(packed: U64, group_bits: int, bounds: I64, shift: int, grouped: I64) -> tuple[I64, U64]:
    n = packed.shape[0]
    mask = np.uint64((1 << group_bits) - 1)
    value_mask = np.uint64((1 << shift) - 1)
    fill = bounds[:-1].copy()
    codes = np.empty(n, dtype=np.int64)
    zs = np.empty(n, dtype=np.uint64)
    m = -1
    last = np.uint64(0)
    for q in range(n):
        comp = packed[q] >> np.uint64(group_bits)
        if m < 0 or comp != last:
            m += 1
            codes[m] = np.int64(comp >> np.uint64(shift))
            zs[m] = comp & value_mask
            last = comp
        g = np.int64(packed[q] & mask)
        grouped[fill[g]] = m  # values arrive ascending, so each group's list stays sorted
        fill[g] += 1
    return codes[: m + 1], zs[: m + 1]


def sorted_groups(
    tokens: I64, sub: U8, col_start: I64, col_code: I64, col_per: I64, item_count: int
) -> tuple[I64, U64, I64, I64] | None:
    """(the unique (block code, zigzag value) pairs ascending as codes and values, group
    bounds [item_count + 2], each group's dictionary indices ascending) of columns as in
    expand_columns: ordered_unique and group_indices in one sort of (code, value, owner + 1)
    packed into a uint64 (numpy's vectorised sort beats hashing here). None when they do not
    fit in 64 bits together. Group 0 is the context, then items 0..item_count-1."""
    if tokens.shape[0] == 0:
        return None
    group_bits = (item_count + 1).bit_length()
    packed, grouped = _scratch(tokens.shape[0])
    bounds, shift = _packed_columns(tokens, sub, col_start, col_code, col_per, group_bits, item_count, packed)
    if shift < 0:
        return None
    packed.sort()
    codes, zs = _groups_of_sorted(packed, group_bits, bounds, shift, grouped)
    return codes, zs, bounds, grouped


_SCRATCH = threading.local()


def _scratch(n: int) -> tuple[U64, I64]:
    """This thread's reused buffers of n values: fresh ones would page-fault on every call,
    which cost a quarter of the encoding time. Callers copy out what they keep."""
    held = getattr(_SCRATCH, "buffers", None)
    if held is None or held[0].shape[0] < n:
        held = (np.empty(n, dtype=np.uint64), np.empty(n, dtype=np.int64))
        _SCRATCH.buffers = held
    return held[0][:n], held[1][:n]


def expand_columns_reference(tokens: I64, sub: U8, col_start: I64, col_code: I64, col_per: I64) -> tuple[I64, U64, I64]:
    lengths = np.diff(col_start)
    code = np.repeat(col_code, lengths) + (sub.astype(np.int64) if sub.shape[0] else 0)
    within = np.arange(tokens.shape[0]) - np.repeat(col_start[:-1], lengths)
    per = np.repeat(col_per, lengths)
    owner = np.where(per > 0, within // np.maximum(per, 1), -1)
    return code, ((tokens << 1) ^ (tokens >> 63)).astype(np.uint64), owner
