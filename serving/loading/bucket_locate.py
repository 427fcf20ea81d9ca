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

from ctr.format.bucket_kernels import B, slots_of, wide_hits

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
    src[q] = tag and slot[q] = the key's slot where the table holds it. The keys are found
    as the wide lookups find them (ctr.format.bucket_kernels.wide_hits, two branch-free
    passes); prefetching both buckets of every key fetched a second line for the 87% of keys
    an image holds in their first."""
    if slots_of(table) != B:
        raise ValueError("locate reads wide tables only (1-word rows are copied)")
    hit_at, hit_slot, n_hit = wide_hits(table, keys, at, lo, hi, bits, src >= 0)
    for h in range(n_hit):
        src[hit_at[h]] = tag
        slot[hit_at[h]] = hit_slot[h]


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
