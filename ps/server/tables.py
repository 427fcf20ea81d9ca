"""Sparse and dense tables of one shard. Each table's optimizer owns its row layout (float64
state, ctr.model.optim) and the kernels that read and update it; the shard only routes to them.

A push is either a gradient (the table steps its optimizer once per row) or a state delta
(a worker stepped per example on its copy of the rows; the table adds the change)."""

from __future__ import annotations

import itertools
import os
import time

import numpy as np
import numpy.typing as npt

from ctr.format.hashmap import CompactHashMap
from ctr.model.optim import frozen_adam_rows, init_rows, step_rows, weights_of_rows
from ctr.model.spec import TableSpec
from ps.api import DELTA, GRADIENT, MOMENTUM, STATE
from ps.server import kernels
from ps.server.digest import rows_digest

MAX_MOMENTUM_STEPS = 1024  # local steps one momentum push may stand for
STATE_LIMIT = 1e30  # no optimizer state value may pass this: far beyond any trained model
ANONYMOUS = 0  # the writer of rows loaded from a cut, or pushed by a client that keeps no rows
# layout tokens: unique within a process, and (random start) unlikely to repeat across restarts,
# so a client's row ids from before a restart or an eviction are never taken for current ones
_LAYOUTS = itertools.count(int.from_bytes(os.urandom(6), "little") << 8)
# epochs (write-leases.md): a new one whenever a table's writer changes or its rows move; they
# start at the wall clock's nanoseconds, so a restarted shard's epochs come after its last ones
_EPOCHS = itertools.count(time.time_ns())
NO_WRITER = -1


class PushRejected(ValueError):
    """A push whose values are non-finite or beyond the table's limit; nothing was applied."""


def as_rows(table: str, kind: str, values: npt.NDArray[np.float64], n: int, cols: int) -> npt.NDArray[np.float64]:
    """values as n rows of cols float64, or PushRejected when the count does not fit."""
    if values.size != n * cols:
        raise PushRejected(f"table {table}: {values.size} {kind} values for {n} rows of {cols} each")
    return np.ascontiguousarray(values, dtype=np.float64).reshape(n, cols)


def check_values(table: str, values: npt.NDArray[np.float64], limit: float, what: str = "max_abs") -> None:
    if not kernels.all_within(np.ascontiguousarray(values), limit):
        bad = values[~(np.abs(values) <= limit)]
        raise PushRejected(f"table {table}: pushed value {float(bad.reshape(-1)[0])!r} is not finite or exceeds {what} {limit:g}")


class SparseTable:
    """key -> row id in a CompactHashMap; rows (float64 optimizer state and metadata words)
    in dense arrays that double as they fill, so a probe never strides over wide rows."""

    def __init__(self, spec: TableSpec, capacity: int = 1 << 12) -> None:
        self.spec = spec
        self.name = spec.name
        self.dim = spec.dim
        self.width = spec.width
        self.params = spec.optimizer.params()
        self.map = CompactHashMap(2, capacity=capacity)  # key -> row id (uint64 in two words)
        self.size = 0
        self.keys = np.zeros(capacity, dtype=np.uint64)
        self.state = np.zeros((capacity, self.width), dtype=np.float64)
        self.meta = np.zeros((capacity, kernels.META_WORDS), dtype=np.uint32)
        # who wrote each row last, and the sequence of the last write by anyone else (0: none):
        # what tells a client keeping rows whether its copy is still the row (pull-cache.md).
        # Not stored: rows loaded from a cut are ANONYMOUS.
        self.writer = np.zeros(capacity, dtype=np.uint64)
        self.before = np.zeros(capacity, dtype=np.uint64)
        self.layout = next(_LAYOUTS)  # row ids are valid while it holds: a delete moves rows
        # a client's copy confirmed at this epoch is still the row while the epoch holds
        self.epoch = next(_EPOCHS)
        self.last_writer = NO_WRITER

    def retune(self, spec: TableSpec) -> None:
        """Takes other settings of the same optimizer kind and layout (Shard.declare)."""
        assert (spec.kind, spec.dim, spec.optimizer.kind) == (self.spec.kind, self.spec.dim, self.spec.optimizer.kind)
        self.spec = spec
        self.params = spec.optimizer.params()

    def row_seq(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The update sequence of each row's last write (0: never written)."""
        return kernels.row_seqs(self.meta, np.ascontiguousarray(ids, dtype=np.int64))  # type: ignore[no-any-return]

    def changed_for(self, ids: npt.NDArray[np.int64], client: int) -> npt.NDArray[np.bool_]:
        """Rows whose last write was not `client`'s: a copy it keeps may be behind."""
        return self.writer[ids] != np.uint64(client)  # type: ignore[no-any-return]

    def conflicts(
        self, found: npt.NDArray[np.int64], client: int, recorded: npt.NDArray[np.int64] | None
    ) -> npt.NDArray[np.bool_]:
        """Before a push by `client` lands on rows `found` (-1: absent): where the client's
        copy is not the row. With `recorded` (each row's sequence when the client's pull
        session read it, -1 absent), the copy is the row when no one else wrote it since
        (every write since the read was the client's: it wrote last, and the last write by
        anyone else came no later than the read; a row it created: none at all); without,
        when the client wrote it last. Absent rows are never kept copies, and a row gone
        since the read (evicted) conflicts."""
        rec = np.zeros(0, dtype=np.int64) if recorded is None else np.ascontiguousarray(recorded, dtype=np.int64)
        found = np.ascontiguousarray(found, dtype=np.int64)
        return kernels.push_conflicts(self.writer, self.before, self.meta, found, np.uint64(client), rec, recorded is not None)  # type: ignore[no-any-return]

    def mark_written(self, ids: npt.NDArray[np.int64], client: int) -> None:
        """Records `client` as the rows' writer, before their sequence moves."""
        kernels.mark_writer(self.writer, self.before, self.meta, np.ascontiguousarray(ids, dtype=np.int64), np.uint64(client))

    @property
    def row_words(self) -> int:
        """uint32 words of a stored row: the state's float64 values, then the metadata."""
        return 2 * self.width + kernels.META_WORDS

    def digest(self) -> int:
        """ps.server.digest of every row: key and optimizer state."""
        return int(rows_digest(self.keys[: self.size], self.state[: self.size]))

    @property
    def nbytes(self) -> int:
        return int(self.map.nbytes + self.keys.nbytes + self.state.nbytes + self.meta.nbytes)

    def find(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        """Row id of each key, -1 where absent."""
        return self.map.find_ids(keys)

    def _grow(self, n: int) -> None:
        cap = self.keys.shape[0]
        if n <= cap:
            return
        while cap < n:
            cap *= 2
        keys = np.zeros(cap, np.uint64)
        state = np.zeros((cap, self.width), np.float64)
        meta = np.zeros((cap, kernels.META_WORDS), np.uint32)
        writer = np.zeros(cap, np.uint64)
        before = np.zeros(cap, np.uint64)
        n = self.size
        keys[:n], state[:n], meta[:n] = self.keys[:n], self.state[:n], self.meta[:n]
        writer[:n], before[:n] = self.writer[:n], self.before[:n]
        self.keys, self.state, self.meta, self.writer, self.before = keys, state, meta, writer, before

    def insert(
        self, keys: npt.NDArray[np.uint64], ids: npt.NDArray[np.int64] | None = None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """(row id of each key, ids of the rows created for absent keys, zeroed). `ids` are
        the keys' rows from find(), when the caller has them already."""
        ids = self.find(keys) if ids is None else ids.copy()
        absent = np.flatnonzero(ids < 0)
        if absent.shape[0]:
            new = np.arange(self.size, self.size + absent.shape[0], dtype=np.int64)
            self._grow(self.size + absent.shape[0])
            self.map.insert_ids(keys[absent], new)
            self.keys[new] = keys[absent]
            self.size += absent.shape[0]
            ids[absent] = new
        return ids, ids[absent]

    def pull(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.float32]:
        """Weights [n, dim]; absent keys read as their initial weights and are not inserted."""
        return kernels.gather_weights(self.state, self.find(keys), keys, self.dim, self.params)  # type: ignore[no-any-return]

    def pull_state(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.float64]:
        """Optimizer state [n, width]; absent keys read as their initial state."""
        return kernels.gather_state(self.state, self.find(keys), keys, self.dim, self.params)  # type: ignore[no-any-return]

    def apply(
        self,
        kind: str,
        keys: npt.NDArray[np.uint64],
        values: npt.NDArray[np.float64],
        seq: int,
        client: int = ANONYMOUS,
        found: npt.NDArray[np.int64] | None = None,
    ) -> npt.NDArray[np.int64]:
        """Applies gradients (one optimizer step per row) or state deltas (added), absent keys
        starting from their initial row, if all of it is safe: gradients within max_abs;
        deltas keeping every row finite and within STATE_LIMIT. Otherwise raises
        PushRejected and changes nothing. `client` writes the deltas (a gradient step is
        the shard's own arithmetic, which no client copy follows: ANONYMOUS). `found`: the
        keys' row ids when the caller has just looked them up. Returns the rows' ids."""
        if kind not in (GRADIENT, DELTA):
            raise PushRejected(f"table {self.name}: {kind} pushes are for dense tables, not sparse ones")
        v = as_rows(self.name, kind, values, keys.shape[0], self.dim if kind == GRADIENT else self.width)
        if found is None:
            found = self.find(keys)
        if kind == GRADIENT:
            check_values(self.name, v, self.spec.optimizer.max_abs)
        else:
            check_values(self.name, v, STATE_LIMIT, "the state limit")
            if not kernels.merged_within(self.state, found, keys, v, self.dim, self.params, STATE_LIMIT):
                raise PushRejected(f"table {self.name}: the pushed deltas would take a row past {STATE_LIMIT:g}")
        ids, created = self.insert(keys, found)
        if created.shape[0]:
            kernels.init_rows_at(self.state, created, self.keys[created], self.dim, self.params)
        writer = client if kind != GRADIENT else ANONYMOUS
        self.mark_written(ids, writer)
        if writer != self.last_writer:
            self.last_writer = writer
            self.epoch = next(_EPOCHS)
        now = int(time.time())
        if kind == GRADIENT:
            kernels.apply_gradients(self.state, self.meta, ids, v, self.dim, self.params, seq, now)
        else:
            kernels.merge_deltas(self.state, self.meta, ids, v, seq, now)
        return ids

    def delete_rows(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
        """Removes rows (their keys leave the hashmap); the rows after the new end move into
        the holes, so the row arrays stay dense. Returns the keys removed."""
        gone = np.unique(ids[(ids >= 0) & (ids < self.size)])
        if gone.shape[0] == 0:
            return np.zeros(0, dtype=np.uint64)
        n, m = self.size, self.size - gone.shape[0]
        removed = self.keys[gone].copy()
        holes = gone[gone < m]
        tail_dead = np.zeros(n - m, dtype=np.bool_)
        tail_dead[gone[gone >= m] - m] = True
        movers = m + np.flatnonzero(~tail_dead)  # as many as holes
        self.keys[holes], self.state[holes], self.meta[holes] = self.keys[movers], self.state[movers], self.meta[movers]
        self.writer[holes], self.before[holes] = self.writer[movers], self.before[movers]
        self.layout = next(_LAYOUTS)  # rows moved: ids a client holds no longer name them
        self.epoch = next(_EPOCHS)
        self.map.delete(removed)
        if holes.shape[0]:
            self.map.words[self.map.find(self.keys[holes])] = holes.view(np.uint32).reshape(-1, 2)
        self.keys[m:n] = 0
        self.state[m:n] = 0.0
        self.meta[m:n] = 0
        self.writer[m:n] = 0
        self.before[m:n] = 0
        self.size = m
        return removed

    def updated_after(self, seq: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
        """(keys, row ids) of rows updated after sequence number seq (all rows for seq < 0)."""
        ids = np.arange(self.size, dtype=np.int64) if seq < 0 else kernels.rows_updated_after(self.meta, self.size, seq)
        return self.keys[ids], ids

    def weights_at(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        return weights_of_rows(self.state[ids], self.dim, self.params).astype(np.float32)  # type: ignore[no-any-return]

    def raw_rows(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.uint32]:
        """Rows as stored: the state's words, then the metadata words."""
        return kernels.gather_raw(self.state, self.meta, ids)  # type: ignore[no-any-return]

    def load_raw(self, keys: npt.NDArray[np.uint64], rows: npt.NDArray[np.uint32]) -> None:
        if rows.shape[1] != self.row_words:
            raise ValueError(f"table {self.name}: stored rows have {rows.shape[1]} words, the layout needs {self.row_words}")
        ids, _ = self.insert(keys)
        self.state[ids] = np.ascontiguousarray(rows[:, : 2 * self.width]).view(np.float64)
        self.meta[ids] = rows[:, 2 * self.width :]
        self.writer[ids] = ANONYMOUS
        self.before[ids] = 0
        self.epoch = next(_EPOCHS)


class DenseTable:
    """One contiguous range [lo, hi) of a dense vector: float64 optimizer state per element."""

    def __init__(self, spec: TableSpec, lo: int, hi: int) -> None:
        self.spec = spec
        self.name = spec.name
        self.lo = lo
        self.hi = hi
        self.width = spec.width
        self.params = spec.optimizer.params()
        # element i of the whole vector starts from the initial weight of "key" i + 1
        self.state = init_rows(np.arange(lo + 1, hi + 1, dtype=np.uint64), self.width, 1, self.params)

    def retune(self, spec: TableSpec) -> None:
        """Takes other settings of the same optimizer kind and layout (Shard.declare)."""
        assert (spec.kind, spec.dim, spec.optimizer.kind) == (self.spec.kind, self.spec.dim, self.spec.optimizer.kind)
        self.spec = spec
        self.params = spec.optimizer.params()

    def digest(self) -> int:
        """ps.server.digest of the range: element i is key i + 1, so the shards' digests add up."""
        return int(rows_digest(np.arange(self.lo + 1, self.hi + 1, dtype=np.uint64), self.state))

    def weights(self) -> npt.NDArray[np.float32]:
        return weights_of_rows(self.state, 1, self.params).reshape(-1).astype(np.float32)  # type: ignore[no-any-return]

    def push_width(self, kind: str) -> int:
        return self.width if kind in (DELTA, STATE) else 1

    def apply(self, kind: str, values: npt.NDArray[np.float64], steps: int = 1) -> None:
        """Applies a gradient [n], a state delta [n, width], an Adam momentum [n] or the
        state itself [n, width] of this range, if safe (as SparseTable.apply); otherwise
        raises PushRejected and changes nothing."""
        v = as_rows(self.name, kind, values, self.hi - self.lo, self.push_width(kind))
        if kind == MOMENTUM:
            if self.spec.optimizer.kind != "adam":
                raise PushRejected(f"table {self.name}: a momentum push needs an adam table, not {self.spec.optimizer.kind}")
            check_values(self.name, v, self.spec.optimizer.max_abs)
            if not 1 <= steps <= MAX_MOMENTUM_STEPS:
                raise PushRejected(f"table {self.name}: a momentum push standing for {steps} steps (1..{MAX_MOMENTUM_STEPS})")
            frozen_adam_rows(self.state, v, self.params, steps)
            return
        if kind == GRADIENT:
            check_values(self.name, v, self.spec.optimizer.max_abs)
            step_rows(self.state, v, 1, self.params)
            return
        if kind == STATE:  # the worker's own copy, written whole: it replaces this range's
            check_values(self.name, v, STATE_LIMIT, "the state limit")
            self.state = np.array(v, dtype=np.float64)
            return
        merged = self.state + v
        check_values(self.name, merged, STATE_LIMIT, "the state limit")
        self.state = merged
