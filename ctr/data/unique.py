"""Unique keys of a batch with each feature's index into them, by hashing (np.unique
sorts, which cost the trainer more than its LR kernel), and sorted (the PS takes sorted
keys) by a radix sort of the uniques alone (docs/design/prefetched-gathers.md)."""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.runtime.prefetch import prefetch_item

FIB = np.uint64(0x9E3779B97F4A7C15)
# keys whose slot is prefetched before the current one is probed: a batch's table (2 slots
# a feature, 8 MB for 640k features) is past the core's cache
UNIQUE_AHEAD = 16
# uniques from which radix_order sorts them rather than np.argsort: four passes over a
# 65,536-entry count cost ~0.2 ms whatever n is; 82k uniques sorted in 1.4 ms against 4.2
RADIX_MIN = 8192
DIGIT_BITS = 16


@nb.njit(cache=True, nogil=True)
def unique_inverse(keys: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """(unique keys in order of first appearance, index of each key into them). Slots come
    from Fibonacci hashing, so keys that are not hashes (small ids, ids with a field code
    in their top bits) spread as well as hashed ones."""
    n = keys.shape[0]
    size = 16
    bits = 4
    while size < 2 * n:
        size *= 2
        bits += 1
    mask = np.uint64(size - 1)
    shift = np.uint64(64 - bits)
    slot_of = np.full(size, -1, dtype=np.int32)  # half the cache footprint of int64
    uniq = np.empty(n, dtype=np.uint64)
    inverse = np.empty(n, dtype=np.int64)
    m = 0
    for i in range(n):
        if i + UNIQUE_AHEAD < n:
            prefetch_item(slot_of, np.int64((keys[i + UNIQUE_AHEAD] * FIB) >> shift))  # type: ignore[call-arg]
        key = keys[i]
        s = (key * FIB) >> shift
        while True:
            u = slot_of[s]
            if u < 0:
                slot_of[s] = np.int32(m)
                uniq[m] = key
                inverse[i] = m
                m += 1
                break
            if uniq[u] == key:
                inverse[i] = u
                break
            s = (s + np.uint64(1)) & mask
    return uniq[:m], inverse


@nb.njit(cache=True, nogil=True)
def first_occurrence(inverse: npt.NDArray[np.int64], count: int) -> npt.NDArray[np.int64]:
    """Where each of unique_inverse's `count` uniques first appears: they are numbered in
    order of first appearance, so unique m first appears where the numbers reach m."""
    first = np.empty(count, dtype=np.int64)
    m = 0
    for i in range(inverse.shape[0]):
        if inverse[i] == m:
            first[m] = i
            m += 1
    return first


def unique_inverse_reference(keys: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """np.unique, reordered to first appearance: the reference of unique_inverse."""
    uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.shape[0])
    return uniq[order], rank[inverse.reshape(-1)].astype(np.int64)


@nb.njit(cache=True, nogil=True)
def radix_order(keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
    """The permutation that sorts uint64 keys (np.argsort's; for unique keys the only one):
    least significant digit first, 16 bits a pass, each pass a stable scatter, a pass whose
    digit every key shares skipped."""
    n = keys.shape[0]
    order = np.arange(n, dtype=np.int64)
    spare = np.empty(n, dtype=np.int64)
    count = np.empty((1 << DIGIT_BITS) + 1, dtype=np.int64)
    mask = np.uint64((1 << DIGIT_BITS) - 1)
    for p in range(64 // DIGIT_BITS):
        shift = np.uint64(DIGIT_BITS * p)
        count[:] = 0
        for i in range(n):
            count[((keys[i] >> shift) & mask) + 1] += 1
        if n == 0 or count[((keys[0] >> shift) & mask) + 1] == n:
            continue
        for d in range(1 << DIGIT_BITS):
            count[d + 1] += count[d]
        for i in range(n):
            o = order[i]
            d = (keys[o] >> shift) & mask
            spare[count[d]] = o
            count[d] += 1
        order, spare = spare, order
    return order


@nb.njit(cache=True, nogil=True)
def ranks_at(order: npt.NDArray[np.int64], inverse: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Each feature's index into the sorted uniques: rank[inverse] where rank is order's
    inverse permutation, in one kernel (numpy took three passes and two arrays)."""
    m = order.shape[0]
    rank = np.empty(m, dtype=np.int64)
    for r in range(m):
        rank[order[r]] = r
    out = np.empty(inverse.shape[0], dtype=np.int64)
    for i in range(inverse.shape[0]):
        out[i] = rank[inverse[i]]
    return out


def ranks_at_reference(order: npt.NDArray[np.int64], inverse: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    rank = np.empty(order.shape[0], dtype=np.int64)
    rank[order] = np.arange(order.shape[0], dtype=np.int64)
    return rank[inverse]  # type: ignore[no-any-return]


def stable_order(values: npt.NDArray[np.uint64] | npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """np.argsort(values, kind="stable") of uint64 keys or non-negative int64 ids (row ids,
    slots): by radix_order from RADIX_MIN values, which is stable too."""
    if values.shape[0] < RADIX_MIN:
        return np.argsort(values, kind="stable")
    if values.dtype == np.int64:
        values = values.view(np.uint64)  # non-negative: the same order as unsigned
    return radix_order(np.ascontiguousarray(values, dtype=np.uint64))  # type: ignore[no-any-return]


def sorted_unique_inverse(keys: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """np.unique(keys, return_inverse=True), sorting only the unique keys (the PS takes
    sorted keys): a batch holds several times fewer unique keys than features."""
    uniq, inverse = unique_inverse(keys)
    order = stable_order(uniq)
    return uniq[order], ranks_at(order, inverse)
