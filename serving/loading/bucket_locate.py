"""Where keys sit in bucket tables (ctr.format.bucket_kernels), without copying their rows.

A kernel that reads every row of a wide model once (FFM's rows hold F k-vectors: 241
floats for 60 fields and k = 4) can read them where they are: a 200 x 500 request's copy
of its 80k rows was 77 MB, and most of the request's time. `locate` records, for each key
a table holds, the table's tag and the key's slot; `row_at` (ctr.format.located) then finds
the row of slot s in bucket s >> SLOT_SHIFT, after the bucket's keys.
"""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.format.bucket_kernels import (
    RING,
    WIDE_AHEAD,
    B,
    _index_in,
    _prefetch_keys,
    first_bucket,
    mix,
    second_bucket,
    slots_of,
)
from ctr.format.key_filter import may_contain

U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

SLOT_SHIFT = 3  # slot s of a bucket table is in bucket s >> 3: B slots a bucket
ROWS_AT = 2 * B  # a bucket's first row starts after its B keys' 2 B words
assert 1 << SLOT_SHIFT == B


@nb.njit(cache=True, nogil=True)
def locate(table: U32, keys: U64, at: I64, lo: int, hi: int, bits: U64, tag: int, src: I64, slot: I64) -> None:
    """For positions q = at[i] (q = i when `at` is empty), i in [lo, hi), not located yet
    (src[q] < 0) whose key the filter `bits` may hold (every key when it is empty):
    src[q] = tag and slot[q] = the key's slot where the table holds it.

    Two passes, as the wide lookups (ctr.format.bucket_kernels._lookup_wide): the first
    compares each key's first bucket (its keys' line, prefetched WIDE_AHEAD lookups before)
    and lists the keys not there without a branch; the second does the same over their
    second buckets. Prefetching both buckets of every key fetched a second line for the 87%
    of keys an image holds in their first."""
    if slots_of(table) != B:
        raise ValueError("locate reads wide tables only (1-word rows are copied)")
    keys64 = table.view(np.uint64)
    buckets = table.shape[0]
    filtered = bits.shape[0] > 0
    indexed = at.shape[0] > 0
    mask = RING - 1
    ring = np.empty(RING, dtype=np.int64)  # a lookup's bucket (-1: nothing to look up)
    left = np.empty(max(0, hi - lo), dtype=np.int64)  # positions not in their first bucket
    n_left = 0
    for i in range(lo, hi + WIDE_AHEAD):
        if i < hi:
            q = at[i] if indexed else i
            b = -1
            if src[q] < 0 and (not filtered or may_contain(bits, keys[q])):
                b = first_bucket(mix(keys[q]), buckets)
                _prefetch_keys(table, b)
            ring[i & mask] = b
        j = i - WIDE_AHEAD
        if lo <= j < hi and ring[j & mask] >= 0:
            q = at[j] if indexed else j
            b = ring[j & mask]
            x = _index_in(keys64, b, keys[q], B)
            src[q] = tag if x >= 0 else src[q]
            slot[q] = b * B + x
            left[n_left] = q
            n_left += 0 if x >= 0 else 1
    for i in range(n_left + WIDE_AHEAD):
        if i < n_left:
            b = second_bucket(mix(keys[left[i]]), buckets)
            _prefetch_keys(table, b)
            ring[i & mask] = b
        j = i - WIDE_AHEAD
        if j >= 0:
            q = left[j]
            b = ring[j & mask]
            x = _index_in(keys64, b, keys[q], B)
            src[q] = tag if x >= 0 else src[q]
            slot[q] = b * B + x


def locate_reference(tables: list[dict[int, int]], keys: list[int]) -> tuple[list[int], list[int]]:
    """Plain reference: tables as {key: slot} in the order they are searched; the first
    holding a key wins."""
    src, slot = [-1] * len(keys), [-1] * len(keys)
    for q, key in enumerate(keys):
        for tag, table in enumerate(tables):
            if key in table:
                src[q], slot[q] = tag, table[key]
                break
    return src, slot
