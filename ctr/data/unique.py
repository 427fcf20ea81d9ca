"""Unique keys of a batch with each feature's index into them, by hashing (np.unique
sorts, which cost the trainer more than its LR kernel)."""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt


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
        key = keys[i]
        s = (key * np.uint64(0x9E3779B97F4A7C15)) >> shift
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


def sorted_unique_inverse(keys: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
    """np.unique(keys, return_inverse=True), sorting only the unique keys (the PS takes
    sorted keys): a batch holds several times fewer unique keys than features."""
    uniq, inverse = unique_inverse(keys)
    order = np.argsort(uniq)
    rank = np.empty(order.shape[0], dtype=np.int64)
    rank[order] = np.arange(order.shape[0], dtype=np.int64)
    return uniq[order], rank[inverse]
