"""CompactHashMap: uint64 key -> fixed-width row of 32-bit words, packed in one array."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ctr.format import hashmap_kernels as hk

KEY_WORDS = 2
IMAGE_LOAD = 0.88  # load of sized images: memory = 1/0.88 = 1.14x raw key+row bytes


def capacity_for(n: int, load: float) -> int:
    return max(8, math.ceil(n / load) + 1)


class CompactHashMap:
    """Growable open-addressing map; rows are viewed as float32 (`rows`) or uint32 (`words`).

    The map doubles when an insert would pass max_load, so a free slot always exists.
    """

    def __init__(
        self,
        row_words: int,
        capacity: int = 1024,
        max_load: float = 0.9,
        slots: npt.NDArray[np.uint32] | None = None,
        size: int | None = None,
    ) -> None:
        if not 0.1 < max_load < 1.0:
            raise ValueError(f"max_load {max_load} must be in (0.1, 1)")
        self.row_words = row_words
        self.max_load = max_load
        if slots is None:
            slots = np.zeros((max(8, capacity), KEY_WORDS + row_words), dtype=np.uint32)
        if slots.ndim != 2 or slots.shape[1] != KEY_WORDS + row_words:
            raise ValueError(f"slots shape {slots.shape} does not fit row_words={row_words}")
        self.slots = slots
        self.size = int(hk.occupied_slots(slots).shape[0]) if size is None else size

    @property
    def capacity(self) -> int:
        return int(self.slots.shape[0])

    @property
    def rows(self) -> npt.NDArray[np.float32]:
        """Row words as float32 (a view, writable when the slots are)."""
        return self.slots.view(np.float32)[:, KEY_WORDS:]

    @property
    def words(self) -> npt.NDArray[np.uint32]:
        return self.slots[:, KEY_WORDS:]

    @property
    def nbytes(self) -> int:
        return int(self.slots.nbytes)

    def find(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        return hk.find_slots(self.slots, np.ascontiguousarray(keys, dtype=np.uint64))  # type: ignore[no-any-return]

    def insert(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        """Slots of keys, inserting absent ones with zero rows. Key 0 is rejected."""
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        if keys.size and not keys.all():
            raise ValueError("key 0 is reserved for empty slots")
        self.reserve(self.size + keys.shape[0])
        slots, added = hk.insert_keys(self.slots, keys)
        self.size += int(added)
        return slots  # type: ignore[no-any-return]

    def delete(self, keys: npt.NDArray[np.uint64]) -> int:
        """Removes keys and their rows (absent keys are skipped); returns how many went."""
        removed = int(hk.delete_keys(self.slots, np.ascontiguousarray(keys, dtype=np.uint64)))
        self.size -= removed
        return removed

    def find_ids(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        """For a map of key -> int64 id (row_words 2, the id in both words): each key's id,
        -1 where absent."""
        assert self.row_words == 2, "ids take a row of two words"
        return hk.find_ids(self.slots, np.ascontiguousarray(keys, dtype=np.uint64))  # type: ignore[no-any-return]

    def insert_ids(self, keys: npt.NDArray[np.uint64], ids: npt.NDArray[np.int64]) -> None:
        """For a map of key -> int64 id: inserts keys (absent ones; key 0 is rejected) with these ids."""
        assert self.row_words == 2, "ids take a row of two words"
        slots = self.insert(keys)  # first: it may grow the slots the words view
        self.words[slots] = np.ascontiguousarray(ids, dtype=np.int64).view(np.uint32).reshape(-1, 2)

    def reserve(self, n: int) -> None:
        """Grows so that n keys fit under max_load."""
        if n <= self.capacity * self.max_load:
            return
        cap = self.capacity
        while n > cap * self.max_load:
            cap *= 2
        new = np.zeros((cap, self.slots.shape[1]), dtype=np.uint32)
        hk.rehash_into(self.slots, new)
        self.slots = new

    def items(self) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
        """(keys, slot indices) of every entry, in slot order."""
        occ = hk.occupied_slots(self.slots)
        keys = self.slots[occ, :KEY_WORDS].copy().view(np.uint64).reshape(-1)
        return keys, occ

    @classmethod
    def from_rows(cls, keys: npt.NDArray[np.uint64], rows: npt.NDArray[np.uint32], load: float = IMAGE_LOAD) -> CompactHashMap:
        """A map sized to `load` holding keys with their rows (uint32 words)."""
        n, row_words = rows.shape
        m = cls(row_words, capacity=capacity_for(n, load), max_load=min(0.95, load + 0.05))
        slots = m.insert(keys)
        m.slots[slots, KEY_WORDS:] = rows
        return m
