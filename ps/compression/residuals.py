"""Error-feedback memory: the part of each row's updates that compression has not sent yet,
for at most `capacity` rows. Past that, the least recently pushed rows leave, and the
caller sends their residual exactly (flush), so no update is ever lost."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Keys = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]


class ResidualStore:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"residual capacity {capacity} must be >= 1 row")
        self.capacity = capacity
        self.keys = np.zeros(0, dtype=np.uint64)  # sorted
        self.rows = np.zeros((0, 0))
        self.last = np.zeros(0, dtype=np.int64)  # the push that last touched each row
        self.tick = 0
        self.peak_rows = 0

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.rows.nbytes + self.last.nbytes)

    def take(self, keys: Keys, cols: int) -> F64:
        """The residual of each of the sorted unique keys (zero when it has none)."""
        out = np.zeros((keys.shape[0], cols))
        if self.keys.shape[0]:
            pos, found = self._find(keys)
            out[found] = self.rows[pos[found]]
        return out

    def put(self, keys: Keys, rows: F64, touch: bool = True) -> tuple[Keys, F64]:
        """Sets the residual of sorted unique keys; returns the rows evicted to stay within
        capacity (keys, residuals) for the caller to send exactly. With `touch` False the
        rows keep the tick of their last push (what a lossy drain left of them is not a
        push: take_pushed_since skips them until they are pushed again)."""
        if touch:
            self.tick += 1
        if self.rows.shape[1:] != rows.shape[1:]:
            self.rows = np.zeros((self.keys.shape[0], rows.shape[1]))
        pos, found = self._find(keys)
        self.rows[pos[found]] = rows[found]
        if touch:
            self.last[pos[found]] = self.tick
        new = ~found
        if new.any():
            at = np.searchsorted(self.keys, keys[new])
            self.keys = np.insert(self.keys, at, keys[new])
            self.rows = np.insert(self.rows, at, rows[new], axis=0)
            # a drain's leftovers, put back untouched, count as pushed before any drain (tick 0)
            self.last = np.insert(self.last, at, self.tick if touch else 0)
        self.peak_rows = max(self.peak_rows, min(self.keys.shape[0], self.capacity))
        return self._evict()

    def take_pushed_since(self, tick: int) -> tuple[Keys, F64]:
        """Removes and returns (keys, residuals) of the rows pushed after `tick`."""
        pushed = self.last > tick
        out = self.keys[pushed], self.rows[pushed]
        keep = ~pushed
        self.keys, self.rows, self.last = self.keys[keep], self.rows[keep], self.last[keep]
        return out

    def drop(self, keys: Keys) -> None:
        """Forgets the residuals of these sorted unique keys (they were sent exactly)."""
        if self.keys.shape[0] and keys.shape[0]:
            pos, found = self._find(keys)
            keep = np.ones(self.keys.shape[0], dtype=np.bool_)
            keep[pos[found]] = False
            self.keys, self.rows, self.last = self.keys[keep], self.rows[keep], self.last[keep]

    def _find(self, keys: Keys) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        if self.keys.shape[0] == 0:
            return np.zeros(keys.shape[0], dtype=np.int64), np.zeros(keys.shape[0], dtype=np.bool_)
        pos = np.minimum(np.searchsorted(self.keys, keys), max(self.keys.shape[0] - 1, 0))
        return pos.astype(np.int64), self.keys[pos] == keys

    def _evict(self) -> tuple[Keys, F64]:
        excess = self.keys.shape[0] - self.capacity
        if excess <= 0:
            return np.zeros(0, dtype=np.uint64), np.zeros((0, self.rows.shape[1]))
        gone = np.zeros(self.keys.shape[0], dtype=np.bool_)
        gone[np.argpartition(self.last, excess - 1)[:excess]] = True
        out = self.keys[gone], self.rows[gone]
        self.keys, self.rows, self.last = self.keys[~gone], self.rows[~gone], self.last[~gone]
        return out
