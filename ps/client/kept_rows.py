"""The rows a PS client keeps between pulls, as the shards hold them (docs/design/pull-cache.md).

Per sparse table: key -> an entry holding the row's id on its shard, its optimizer state as
the shard holds it, and whether that copy is still valid. A pull sends the ids of known
entries instead of their keys, those without a valid copy marked stale, and gets back the
rows another writer changed and the stale ones; a push's reply says which rows this client
no longer mirrors. The copy follows the shard's own
arithmetic (state + the decoded delta, in float64), so one client alone keeps it bit for bit.

Not thread-safe: the PS client calls it under its own lock.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ctr.format.hashmap import CompactHashMap
from ctr.routing import shard_of
from ps.client import kept_kernels as kk

Keys = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]


class KeptRows:
    """max_rows bounds the entries; a table that would pass it starts over empty (every row
    then travels once more), which keeps memory bounded without an eviction order."""

    def __init__(self, width: int, shard_count: int, max_rows: int) -> None:
        self.width = width
        self.shard_count = shard_count
        self.max_rows = max(1, max_rows)
        self.layouts = [0] * shard_count  # the layout each shard's row ids belong to
        self.restarts = 0  # times the table passed max_rows and started over
        self._empty()

    def _empty(self) -> None:
        self.index = CompactHashMap(2, capacity=1024)  # key -> entry (int64 in two words)
        self.size = 0
        self.row_id = np.zeros(1024, dtype=np.int64)
        self.rows = np.zeros((1024, self.width), dtype=np.float64)
        self.valid = np.zeros(1024, dtype=np.bool_)
        # the shard table's epoch at which each copy was last known to be the row (0: not
        # known): a push of this client's that landed on it says (write-leases.md)
        self.stamp = np.zeros(1024, dtype=np.int64)

    def clear(self) -> None:
        self._empty()

    def _entries(self, keys: Keys) -> npt.NDArray[np.int64]:
        """Entry of each key, -1 where none."""
        return self.index.find_ids(keys)

    def take(self, keys: Keys) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], npt.NDArray[np.int64], F64]:
        """(whether each key's row id is known, and over those: whether its copy is valid,
        the row ids, the copies). A known id whose copy is not valid still travels as an
        id (marked stale): a bit or a byte where its key would cost 8."""
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        return kk.take_known(self.index.slots, self.valid, self.row_id, self.rows, keys)  # type: ignore[no-any-return]

    def leased(self, keys: Keys, epoch: int) -> F64 | None:
        """The copies of these keys when every one is valid and known to be the row at
        `epoch` (the epoch of a write lease this client holds), else None."""
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        ok, rows = kk.leased_copies(self.index.slots, self.valid, self.row_id, self.stamp, self.rows, keys, epoch)
        return rows if ok else None

    def ids_of(self, keys: Keys) -> npt.NDArray[np.int64]:
        """The row id of each key on its shard, -1 where none is known (valid copy or not)."""
        e = self._entries(keys)
        out = np.full(keys.shape[0], -1, dtype=np.int64)
        out[e >= 0] = self.row_id[e[e >= 0]]
        return out

    def held(self, keys: Keys) -> npt.NDArray[np.bool_]:
        """Whether a valid copy of each key's row is kept."""
        e = self._entries(keys)
        out = e >= 0
        out[out] = self.valid[e[out]]
        return out

    def store(self, keys: Keys, ids: npt.NDArray[np.int64], rows: F64, epoch: int = 0) -> None:
        """Keeps rows as a shard holds them (ids: their row ids there), the rows at `epoch`
        when a push's reply says so (0: a pull's, not known)."""
        if keys.shape[0] == 0:
            return
        e = self._entries(keys)
        absent = e < 0
        if self.size + int(absent.sum()) > self.max_rows:
            self.restarts += 1
            self._empty()
            e = np.full(keys.shape[0], -1, dtype=np.int64)
            absent = np.ones(keys.shape[0], dtype=np.bool_)
        if absent.any():
            new = np.arange(self.size, self.size + int(absent.sum()), dtype=np.int64)
            self._grow(self.size + new.shape[0])
            self.index.insert_ids(keys[absent], new)
            self.size += new.shape[0]
            e[absent] = new
        self.row_id[e] = ids
        self.rows[e] = rows
        self.valid[e] = True
        self.stamp[e] = epoch

    def update(self, keys: Keys, rows: F64) -> None:
        """New rows of kept keys (another writer changed them), same row ids."""
        kk.set_rows(
            self.index.slots,
            self.valid,
            self.rows,
            self.stamp,
            np.ascontiguousarray(keys, dtype=np.uint64),
            np.ascontiguousarray(rows, dtype=np.float64),
        )

    def landed(self, keys: Keys, deltas: F64, conflicts: npt.NDArray[np.bool_], epoch: int = 0) -> None:
        """A push this client made landed on these rows: copies the shard says are still
        the rows add the delta as the shard did (row + delta) and are the rows at `epoch`
        (the reply's), the others are dropped."""
        kk.add_deltas(
            self.index.slots,
            self.valid,
            self.rows,
            np.ascontiguousarray(keys, dtype=np.uint64),
            np.ascontiguousarray(deltas, dtype=np.float64),
            np.ascontiguousarray(conflicts, dtype=np.bool_),
            self.stamp,
            epoch,
        )

    def invalidate(self, keys: Keys) -> None:
        """These copies may not be the rows any more: the next pull asks for them whole."""
        e = self._entries(keys)
        self.valid[e[e >= 0]] = False

    def drop_shard(self, shard: int) -> None:
        """A shard's row ids no longer hold (its table's layout changed): drops its copies
        and their ids."""
        keys, slots = self.index.items()
        mine = shard_of(keys, self.shard_count) == shard
        entries = self.index.words[slots[mine]].view(np.int64).reshape(-1)
        self.valid[entries] = False
        self.row_id[entries] = -1

    def _grow(self, n: int) -> None:
        cap = self.row_id.shape[0]
        if n <= cap:
            return
        while cap < n:
            cap *= 2
        row_id = np.zeros(cap, dtype=np.int64)
        rows = np.zeros((cap, self.width), dtype=np.float64)
        valid = np.zeros(cap, dtype=np.bool_)
        stamp = np.zeros(cap, dtype=np.int64)
        row_id[: self.size], rows[: self.size], valid[: self.size], stamp[: self.size] = (
            self.row_id[: self.size],
            self.rows[: self.size],
            self.valid[: self.size],
            self.stamp[: self.size],
        )
        self.row_id, self.rows, self.valid, self.stamp = row_id, rows, valid, stamp
