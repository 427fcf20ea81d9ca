"""BucketMap: uint64 key -> fixed-width row of 32-bit words, a bucketized cuckoo table
(ctr.format.bucket_kernels) in one uint32 array, so a model image maps it from a file as is.

Serving's images and delta overlay are BucketMaps; the parameter server keeps its growable
linear-probing CompactHashMap (ctr.format.hashmap), which hands out stable slots.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ctr.format import bucket_kernels as bk
from ctr.format.bucket_placement import place_first_preferring

B = bk.B
IMAGE_LOAD = 0.95  # wide images: memory = 1/0.95 = 1.053x raw key+row bytes
LINE_IMAGE_LOAD = 0.98  # line images (1-word rows): 64 / 5 / 0.98 = 13.06 B a key, 1.088x raw
NO_FILTER = np.zeros(0, dtype=np.uint64)
GROW_LOAD = 0.9  # a mutable map doubles past this load, so inserts rarely walk far
LINE_BYTES = 64


def slots_for(row_words: int) -> int:
    return bk.LINE_SLOTS if row_words == 1 else B


def image_load(row_words: int) -> float:
    return LINE_IMAGE_LOAD if row_words == 1 else IMAGE_LOAD


def buckets_for(n: int, load: float, slots: int) -> int:
    """Buckets of `slots` slots that hold n keys at `load`."""
    return max(2, math.ceil(n / (slots * load)))


def aligned_zeros(buckets: int, width: int) -> npt.NDArray[np.uint32]:
    """A zeroed uint32[buckets, width] table starting on a cache line, so that each bucket
    of the line layout is one line (numpy aligns to 16 bytes only)."""
    raw = np.zeros(buckets * width + LINE_BYTES // 4, dtype=np.uint32)
    skip = (-raw.ctypes.data % LINE_BYTES) // 4
    return raw[skip : skip + buckets * width].reshape(buckets, width)


class BucketMap:
    """Rows are read with `get`/`gather` and written with `put`: a slot's row sits in its
    bucket, next to the key (one cache line, or the one beside it, per hit)."""

    def __init__(self, row_words: int, buckets: int = 2, table: npt.NDArray[np.uint32] | None = None, size: int | None = None):
        self.row_words = row_words
        if table is None:
            table = aligned_zeros(max(2, buckets), bk.width_for(row_words))
        if table.ndim != 2 or table.shape[0] < 2 or bk.row_words_of(table.shape[1]) != row_words:
            raise ValueError(f"table shape {table.shape} does not fit row_words={row_words}")
        self.table = table
        self.size = int(bk.occupied_slots(table).shape[0]) if size is None else size
        self._seed = 0x2545F491

    @property
    def buckets(self) -> int:
        return int(self.table.shape[0])

    @property
    def slots(self) -> int:
        """Slots a bucket (its layout, from the table's width)."""
        return int(bk.slots_of(self.table))

    @property
    def capacity(self) -> int:
        return self.buckets * self.slots

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes)

    def find(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        """Slot of each key (b * B + j), -1 where absent."""
        return bk.find_slots(self.table, np.ascontiguousarray(keys, dtype=np.uint64))  # type: ignore[no-any-return]

    def gather_words(self, slots: npt.NDArray[np.int64]) -> npt.NDArray[np.uint32]:
        """Rows of slots as uint32 words (zero rows where a slot is -1)."""
        out = np.zeros((slots.shape[0], self.row_words), dtype=np.uint32)
        bk.gather_into(self.table, np.ascontiguousarray(slots, dtype=np.int64), out)
        return out

    def gather(self, slots: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """Rows of slots as float32 (zero rows where a slot is -1)."""
        return self.gather_words(slots).view(np.float32)

    def get(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.float32]:
        """float32 rows of keys; absent keys read as zero rows (one fused, grouped pass)."""
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        out = np.zeros((keys.shape[0], self.row_words), dtype=np.uint32)
        found = np.zeros(keys.shape[0], dtype=np.bool_)
        bk.lookup_rows(self.table, keys, 0, keys.shape[0], NO_FILTER, out, found)
        return out.view(np.float32)

    def put(self, keys: npt.NDArray[np.uint64], rows: npt.NDArray[np.float32] | npt.NDArray[np.uint32]) -> None:
        """Sets each key's row (inserting absent keys); for a repeated key the last row wins.
        Key 0 is rejected. Grows past GROW_LOAD, or when an insert finds no room."""
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        words = np.ascontiguousarray(rows).reshape(keys.shape[0], self.row_words).view(np.uint32)
        if words.dtype.itemsize != 4:
            raise ValueError(f"rows of {rows.dtype} are not 32-bit words")
        if keys.size and not keys.all():
            raise ValueError("key 0 is reserved for empty slots")
        if self.size + keys.shape[0] > self.capacity * GROW_LOAD:
            self._rebuild(buckets_for(self.size + keys.shape[0], GROW_LOAD / 1.5, self.slots))
        homeless = np.empty(self.row_words, dtype=np.uint32)
        while keys.shape[0]:
            self._seed += 1
            done, added, lost = bk.put_rows(self.table, keys, words, self._seed, homeless)
            self.size += int(added)
            if lost == 0:
                return
            self.size -= 1  # the homeless entry is out of the table until it is put back
            self._rebuild(self.buckets * 2)
            self.put(np.array([lost], dtype=np.uint64), homeless.copy().reshape(1, -1))
            keys, words = keys[done:], words[done:]

    def delete(self, keys: npt.NDArray[np.uint64]) -> int:
        """Removes keys and their rows (absent keys are skipped); returns how many went."""
        removed = int(bk.delete_keys(self.table, np.ascontiguousarray(keys, dtype=np.uint64)))
        self.size -= removed
        return removed

    def items(self) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
        """(keys, slots) of every entry, in slot order."""
        slots = bk.occupied_slots(self.table)
        return bk.keys_of(self.table, slots), slots

    def copy(self) -> BucketMap:
        table = aligned_zeros(*self.table.shape)
        table[:] = self.table
        return BucketMap(self.row_words, table=table, size=self.size)

    def _rebuild(self, buckets: int) -> None:
        """Moves every entry into a table of at least `buckets` buckets."""
        keys, slots = self.items()
        self._fill(keys, self.gather_words(slots), buckets)

    def _fill(self, keys: npt.NDArray[np.uint64], rows: npt.NDArray[np.uint32], buckets: int) -> None:
        """Replaces the table with a fresh one of `buckets` holding keys (unique) -> rows,
        as many as can be in their first bucket (ctr.format.bucket_placement), 1% larger
        each time two choices of a bucket's slots cannot hold them."""
        if keys.size and not keys.all():
            raise ValueError("key 0 is reserved for empty slots")
        while True:
            table = aligned_zeros(max(2, buckets), bk.width_for(self.row_words))
            if place_first_preferring(table, keys, rows, self._seed) == 0:
                break
            buckets = math.ceil(buckets * 1.01) + 1
        self.table, self.size = table, int(keys.shape[0])

    @classmethod
    def from_rows(cls, keys: npt.NDArray[np.uint64], rows: npt.NDArray[np.uint32], load: float | None = None) -> BucketMap:
        """A table sized to `load` (default: the layout's image load) holding keys (unique)
        with their rows (uint32 words)."""
        n, row_words = rows.shape
        m = cls(row_words)
        buckets = buckets_for(n, image_load(row_words) if load is None else load, slots_for(row_words))
        m._fill(np.ascontiguousarray(keys, dtype=np.uint64), np.ascontiguousarray(rows, dtype=np.uint32), buckets)
        return m
