"""Error-feedback memory: the part of each row's updates that compression has not sent yet,
for at most `capacity` rows. Past that, the least recently pushed rows leave, and the
caller sends their residual exactly (flush), so no update is ever lost.

Rows live in slots of one buffer, found through a hash index (key -> slot), so a push's
new rows cost their own bytes only: a store kept sorted by key moved every row it held
for each push that brought a new key (16-26 ms a push of 1,000 keys among 190,000 rows of
65-130 values, against the 1-2 ms of the push itself). What leaves the store (a drain,
an eviction) comes out sorted by key, as the wire's key codecs need."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ctr.data.unique import stable_order
from ctr.format.hashmap import CompactHashMap
from ps.compression.residual_kernels import put_at, rows_at

Keys = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


class ResidualStore:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"residual capacity {capacity} must be >= 1 row")
        self.capacity = capacity
        self.tick = 0
        self.peak_rows = 0
        self._index = CompactHashMap(2, capacity=64)  # key -> slot (an int64 in two words); key 0 never comes (shards refuse it)
        self._width = 0
        self._rows = np.zeros((0, 0))  # [slots, width]
        self._key = np.zeros(0, dtype=np.uint64)  # the key in each slot, 0 when free
        self._last = np.zeros(0, dtype=np.int64)  # the push that last touched each slot's row
        self._free = np.zeros(0, dtype=np.int64)  # freed slots, reused before the buffer grows
        self._used = 0  # slots [0, _used) have been handed out

    def __len__(self) -> int:
        return self._index.size

    def items(self) -> tuple[Keys, F64]:
        """Every key held, sorted, and its residual: one sort for both (a cut's drain of
        400k rows sorted them twice, once for the keys and once for the rows)."""
        live = self._live()
        live = live[stable_order(self._key[live])]
        return self._key[live], self._rows[live]

    @property
    def nbytes(self) -> int:
        return int(self._index.nbytes + self._rows.nbytes + self._key.nbytes + self._last.nbytes + self._free.nbytes)

    def take(self, keys: Keys, cols: int) -> F64:
        """The residual of each of the sorted unique keys (zero when it has none)."""
        return self.take_slots(keys, cols)[0]

    def take_slots(self, keys: Keys, cols: int) -> tuple[F64, I64]:
        """take's residuals, and each key's slot (-1 where it has none): a put of the same
        keys before any other change to the store reuses them instead of a second lookup
        (a push's lookups were a third of its compression)."""
        if not len(self):
            return np.zeros((keys.shape[0], cols)), np.full(keys.shape[0], -1, dtype=np.int64)
        slot = self._index.find_ids(keys)
        return rows_at(self._rows, slot, cols), slot

    def put(self, keys: Keys, rows: F64, touch: bool = True, slots: I64 | None = None) -> tuple[Keys, F64]:
        """Sets the residual of sorted unique keys; returns the rows evicted to stay within
        capacity (keys, residuals) for the caller to send exactly. With `touch` False the
        rows keep the tick of their last push (what a lossy drain left of them is not a
        push: take_pushed_since skips them until they are pushed again). `slots`: what
        take_slots gave for these keys, the store unchanged since."""
        if touch:
            self.tick += 1
        if rows.shape[1] != self._width:  # the first rows set the width (a table's never changes)
            self._width = rows.shape[1]
            self._rows = np.zeros((self._rows.shape[0], self._width))
        if slots is not None:
            slot = slots.copy()
        else:
            slot = self._index.find_ids(keys) if len(self) else np.full(keys.shape[0], -1, dtype=np.int64)
        new = slot < 0
        if new.any():
            slot[new] = self._claim(keys[new])
            self._last[slot[new]] = 0  # a drain's leftovers, put back untouched, count as pushed before any drain
        put_at(self._rows, self._last, slot, np.ascontiguousarray(rows, dtype=np.float64), self.tick if touch else -1)
        self.peak_rows = max(self.peak_rows, min(len(self), self.capacity))
        return self._evict()

    def take_pushed_since(self, tick: int) -> tuple[Keys, F64]:
        """Removes and returns (keys, residuals) of the rows pushed after `tick`, sorted by key."""
        live = self._live()
        return self._remove(live[self._last[live] > tick])

    def drop(self, keys: Keys) -> None:
        """Forgets the residuals of these sorted unique keys (they were sent exactly)."""
        if len(self) and keys.shape[0]:
            self.drop_slots(self._index.find_ids(keys))

    def drop_slots(self, slots: I64) -> None:
        """drop() by the slots take_slots gave (-1: no residual held), the store unchanged
        since: no second lookup."""
        held = slots[slots >= 0]
        if held.shape[0]:
            self._remove(held)

    def _live(self) -> I64:
        return np.flatnonzero(self._key[: self._used]).astype(np.int64)

    def _claim(self, keys: Keys) -> I64:
        """Slots for new keys: freed ones first, then the buffer's next (growing it)."""
        n = keys.shape[0]
        reused = self._free[-n:] if n <= self._free.shape[0] else self._free
        self._free = self._free[: self._free.shape[0] - reused.shape[0]]
        fresh = np.arange(self._used, self._used + n - reused.shape[0], dtype=np.int64)
        self._used += fresh.shape[0]
        if self._used > self._key.shape[0]:
            self._grow(self._used)
        slot = np.concatenate([reused, fresh])
        self._key[slot] = keys
        self._index.insert_ids(keys, slot)
        return slot

    def _grow(self, n: int) -> None:
        cap = max(64, self._key.shape[0])
        while cap < n:
            cap *= 2
        rows = np.zeros((cap, self._width))
        rows[: self._rows.shape[0]] = self._rows
        key = np.zeros(cap, dtype=np.uint64)
        key[: self._key.shape[0]] = self._key
        last = np.zeros(cap, dtype=np.int64)
        last[: self._last.shape[0]] = self._last
        self._rows, self._key, self._last = rows, key, last

    def _remove(self, slot: I64) -> tuple[Keys, F64]:
        """Frees these slots; returns their (keys, residuals) sorted by key."""
        slot = slot[stable_order(self._key[slot])]
        keys, rows = self._key[slot].copy(), self._rows[slot]
        self._index.delete(keys)
        self._key[slot] = 0
        self._rows[slot] = 0.0
        self._free = np.concatenate([self._free, slot])
        return keys, rows

    def _evict(self) -> tuple[Keys, F64]:
        excess = len(self) - self.capacity
        if excess <= 0:
            return np.zeros(0, dtype=np.uint64), np.zeros((0, self._width))
        live = self._live()
        return self._remove(live[np.argpartition(self._last[live], excess - 1)[:excess]])
