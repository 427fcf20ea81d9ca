"""The life of a sparse row on a shard: admission and eviction.

- Admission: a counting Bloom filter per table counts the pushes that name each key the
  table does not hold; a key gets a row only from its `admit_after`-th sighting. Until
  then pulls read it as its initial row (absent keys are never inserted by a pull) and
  its pushed updates are dropped and counted.
- Eviction: rows not updated for `ttl_s` seconds or for `ttl_updates` of the shard's
  updates, and, past `max_rows`, the least recently updated, leave the table: their keys
  are deleted from the hashmap and go out as tombstones in the next checkpoint cut (so a
  restore does not bring them back) and in the next delta export (so serving drops them).
"""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

from ps.api import Lifecycle

U8 = npt.NDArray[np.uint8]
U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
HASHES = 3


@nb.njit(cache=True, inline="always")
def _slot(key: np.uint64, i: int, size: int) -> int:
    x = key + np.uint64(i + 1) * np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return int(x % np.uint64(size))


@nb.njit(cache=True, nogil=True)
def count_sightings(counters: U8, keys: U64) -> U8:
    """Counts one sighting of each key and returns its estimated count: the minimum of its
    HASHES counters after each distinct one went up by one (saturating at 255)."""
    out = np.empty(keys.shape[0], dtype=np.uint8)
    size = counters.shape[0]
    slots = np.empty(HASHES, dtype=np.int64)
    for q in range(keys.shape[0]):
        for i in range(HASHES):
            s = _slot(keys[q], i, size)
            slots[i] = s
            seen = False
            for j in range(i):
                seen = seen or slots[j] == s
            if not seen and counters[s] < 255:
                counters[s] += np.uint8(1)
        low = 255
        for i in range(HASHES):
            low = min(low, int(counters[slots[i]]))
        out[q] = np.uint8(low)
    return out


class CountingBloom:
    def __init__(self, counters: int) -> None:
        self.counters = np.zeros(self.size(counters), dtype=np.uint8)

    @staticmethod
    def size(counters: int) -> int:
        return max(64, counters)

    @classmethod
    def of(cls, counters: U8) -> CountingBloom:
        """A filter with these counters (a checkpoint cut's)."""
        bloom = cls(0)
        bloom.counters = np.array(counters, dtype=np.uint8)
        return bloom

    def admitted(self, keys: U64, after: int) -> npt.NDArray[np.bool_]:
        """Counts a sighting of each key; True where it has now been seen `after` times."""
        return count_sightings(self.counters, np.ascontiguousarray(keys, dtype=np.uint64)) >= after  # type: ignore[no-any-return]


def to_evict(meta: U32, keys: U64, size: int, now: int, seq: int, policy: Lifecycle, sweep: bool) -> I64:
    """Row ids to evict: expired ones (when `sweep`), then the least recently updated past
    the row cap, ties (rows of one push) going by key, so the choice does not depend on the
    order rows sit in (a restored table's differs). meta columns: update count, last update
    time (s), update sequence lo, hi."""
    m = meta[:size]
    last_seq = m[:, 2].astype(np.int64) | (m[:, 3].astype(np.int64) << 32)
    gone = np.zeros(size, dtype=np.bool_)
    if sweep and policy.ttl_s > 0:
        gone |= (now - m[:, 1].astype(np.int64)) > policy.ttl_s
    if sweep and policy.ttl_updates > 0:
        gone |= (seq - last_seq) > policy.ttl_updates
    excess = size - int(gone.sum()) - policy.max_rows if policy.max_rows > 0 else 0
    if excess > 0:
        alive = np.flatnonzero(~gone)
        seqs = last_seq[alive]
        cutoff = np.partition(seqs, excess - 1)[excess - 1]
        older = alive[seqs < cutoff]
        tied = alive[seqs == cutoff]
        gone[older] = True
        gone[tied[np.argsort(keys[tied], kind="stable")[: excess - older.shape[0]]]] = True
    return np.flatnonzero(gone).astype(np.int64)
