"""Sparse and dense tables of one shard. Each table's optimizer owns its row layout (float64
state, ctr.optim) and the kernels that read and update it; the shard only routes to them.

A push is either a gradient (the table steps its optimizer once per row) or a state delta
(a worker stepped per example on its copy of the rows; the table adds the change)."""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt

from ctr.hashmap import CompactHashMap
from ctr.modelspec import TableSpec
from ctr.optim import accumulator_columns, init_rows, step_rows, weights_of_rows
from ps import kernels

GRADIENT = "gradient"
DELTA = "delta"


class PushRejected(ValueError):
    """A push whose values are non-finite or beyond the table's limit; nothing was applied."""


def check_values(table: str, values: npt.NDArray[np.float64], limit: float) -> None:
    if not kernels.all_within(np.ascontiguousarray(values), limit):
        bad = values[~(np.abs(values) <= limit)]
        raise PushRejected(f"table {table}: pushed value {bad.reshape(-1)[0]!r} is not finite or exceeds max_abs {limit:g}")


class SparseTable:
    """key -> float64 optimizer state + metadata, in a CompactHashMap."""

    def __init__(self, spec: TableSpec, capacity: int = 1 << 16) -> None:
        self.spec = spec
        self.name = spec.name
        self.dim = spec.dim
        self.width = spec.width
        self.params = spec.optimizer.params()
        acc = accumulator_columns(spec.optimizer.kind, spec.dim)
        self.acc_lo, self.acc_hi = acc.start, acc.stop
        self.map = CompactHashMap(2 * self.width + kernels.META_WORDS, capacity=capacity)

    @property
    def state(self) -> npt.NDArray[np.float64]:
        """The slot array as float64: [capacity, 1 + width + 2] (key, state, metadata)."""
        return self.map.slots.view(np.float64)

    def pull(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.float32]:
        """Weights [n, dim]; absent keys read as their initial weights and are not inserted."""
        return kernels.gather_weights(self.state, self.map.find(keys), keys, self.width, self.dim, self.params)  # type: ignore[no-any-return]

    def pull_state(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.float64]:
        """Optimizer state [n, width]; absent keys read as their initial state."""
        return kernels.gather_state(self.state, self.map.find(keys), keys, self.width, self.dim, self.params)  # type: ignore[no-any-return]

    def check(self, kind: str, values: npt.NDArray[np.float64], n: int) -> npt.NDArray[np.float64]:
        cols = self.dim if kind == GRADIENT else self.width
        if values.size != n * cols:
            raise PushRejected(f"table {self.name}: {values.size} {kind} values for {n} keys of {cols} each")
        v = np.ascontiguousarray(values, dtype=np.float64).reshape(n, cols)
        check_values(self.name, v, self.spec.optimizer.max_abs)
        return v

    def push(self, kind: str, keys: npt.NDArray[np.uint64], values: npt.NDArray[np.float64], seq: int) -> None:
        """Applies checked values (see check): inserts absent keys at their initial row first."""
        fresh = self.map.find(keys) < 0
        slots = self.map.insert(keys)
        state = self.state
        if fresh.any():
            kernels.init_slots(state, slots, fresh, keys, self.width, self.dim, self.params)
        now = int(time.time())
        if kind == GRADIENT:
            kernels.apply_gradients(state, self.map.words, slots, values, self.width, self.dim, self.params, seq, now)
        else:
            kernels.merge_deltas(state, self.map.words, slots, values, self.width, self.acc_lo, self.acc_hi, seq, now)

    def updated_after(self, seq: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
        """(keys, slots) of rows updated after sequence number seq (all rows for seq < 0)."""
        keys, occ = self.map.items()
        if seq < 0:
            return keys, occ
        sel = kernels.rows_updated_after(self.map.words, occ, self.width, seq)
        return self.map.slots[sel, :2].copy().view(np.uint64).reshape(-1), sel

    def weights_at(self, slots: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        rows = np.ascontiguousarray(self.state[slots, 1 : 1 + self.width])
        return weights_of_rows(rows, self.dim, self.params).astype(np.float32)  # type: ignore[no-any-return]

    def raw_rows(self, slots: npt.NDArray[np.int64]) -> npt.NDArray[np.uint32]:
        return self.map.words[slots]

    def load_raw(self, keys: npt.NDArray[np.uint64], rows: npt.NDArray[np.uint32]) -> None:
        if rows.shape[1] != self.map.row_words:
            raise ValueError(f"table {self.name}: stored rows have {rows.shape[1]} words, the layout needs {self.map.row_words}")
        slots = self.map.insert(keys)
        self.map.words[slots] = rows


class DenseTable:
    """One contiguous range [lo, hi) of a dense vector: float64 optimizer state per element."""

    def __init__(self, spec: TableSpec, lo: int, hi: int) -> None:
        self.spec = spec
        self.name = spec.name
        self.lo = lo
        self.hi = hi
        self.width = spec.width
        self.params = spec.optimizer.params()
        acc = accumulator_columns(spec.optimizer.kind, 1)
        self.acc_lo, self.acc_hi = acc.start, acc.stop
        # element i of the whole vector starts from the initial weight of "key" i + 1
        self.state = init_rows(np.arange(lo + 1, hi + 1, dtype=np.uint64), self.width, 1, self.params)

    def weights(self) -> npt.NDArray[np.float32]:
        return weights_of_rows(self.state, 1, self.params).reshape(-1).astype(np.float32)  # type: ignore[no-any-return]

    def check(self, kind: str, values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        cols = 1 if kind == GRADIENT else self.width
        n = self.hi - self.lo
        if values.size != n * cols:
            raise PushRejected(f"dense table {self.name}: {values.size} {kind} values, its range holds {n} x {cols}")
        v = np.ascontiguousarray(values, dtype=np.float64).reshape(n, cols)
        check_values(self.name, v, self.spec.optimizer.max_abs)
        return v

    def push(self, kind: str, values: npt.NDArray[np.float64]) -> None:
        if kind == GRADIENT:
            step_rows(self.state, values, 1, self.params)
        else:
            merged = self.state + values
            merged[:, self.acc_lo : self.acc_hi] = np.maximum(merged[:, self.acc_lo : self.acc_hi], 0.0)
            self.state = merged
