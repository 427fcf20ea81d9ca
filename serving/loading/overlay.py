"""The delta overlay of a servable version: the rows its deltas changed, in a BucketMap,
behind a Bloom filter of its keys, so lookups probe it only for keys it may hold.

Deleting a key leaves its filter bits set (a filter cannot unset them): a stale bit costs a
probe that misses, never a wrong row. The filter is rebuilt when the overlay outgrows it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ctr.format import key_filter
from ctr.format.bucket_map import BucketMap


class Overlay:
    def __init__(self, row_words: int) -> None:
        self.map = BucketMap(row_words)
        self._refilter()

    def _refilter(self) -> None:
        """A filter of every key, with room for as many again."""
        self.bits = np.zeros(key_filter.words_for(max(1024, 2 * self.map.size)), dtype=np.uint64)
        self._capacity = self.bits.shape[0] * 64 // key_filter.BITS_PER_KEY
        if self.map.size:
            key_filter.add_keys(self.bits, self.map.items()[0])

    @property
    def size(self) -> int:
        return self.map.size

    @property
    def row_words(self) -> int:
        return self.map.row_words

    def put(self, keys: npt.NDArray[np.uint64], rows: npt.NDArray[np.float32]) -> None:
        self.map.put(keys, rows)
        if self.map.size > self._capacity:  # past 16 bits per key: a wider filter
            self._refilter()
        else:
            key_filter.add_keys(self.bits, np.ascontiguousarray(keys, dtype=np.uint64))

    def delete(self, keys: npt.NDArray[np.uint64]) -> int:
        return self.map.delete(keys)

    def find(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        return self.map.find(keys)

    def get(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.float32]:
        return self.map.get(keys)

    def items(self) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
        return self.map.items()

    def copy(self) -> Overlay:
        twin = Overlay.__new__(Overlay)
        twin.map, twin.bits, twin._capacity = self.map.copy(), self.bits.copy(), self._capacity
        return twin
