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

from ctr.format.bucket_kernels import AHEAD, B, _prefetch_keys, _probe, first_bucket, mix, second_bucket, slots_of
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
    src[q] = tag and slot[q] = the key's slot where the table holds it. Both buckets of a
    key are prefetched AHEAD positions before its probe."""
    if slots_of(table) != B:
        raise ValueError("locate reads wide tables only (1-word rows are copied)")
    keys64 = table.view(np.uint64)
    buckets = table.shape[0]
    for i in range(lo, hi + AHEAD):
        if i < hi:
            q = at[i] if at.shape[0] else i
            if src[q] < 0 and (bits.shape[0] == 0 or may_contain(bits, keys[q])):
                m = mix(keys[q])
                _prefetch_keys(table, first_bucket(m, buckets))
                _prefetch_keys(table, second_bucket(m, buckets))
        j = i - AHEAD
        if j >= lo:
            q = at[j] if at.shape[0] else j
            if src[q] < 0 and (bits.shape[0] == 0 or may_contain(bits, keys[q])):
                s = _probe(keys64, buckets, keys[q], B)
                if s >= 0:
                    src[q] = tag
                    slot[q] = s


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
