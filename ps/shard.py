"""One PS shard: its tables, pull sessions, export, checkpoint and restore. No protobuf here."""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ctr import modelfile
from ctr.routing import dense_range, shard_of
from ps.store import ShardStore
from ps.tables import DenseTable, FtrlParams, SparseTable


class ShardError(ValueError):
    """A request this shard cannot serve as asked (unknown table, misrouted keys...)."""


class SessionExpired(ShardError):
    """A push named a pull session this shard no longer remembers."""


@dataclass(frozen=True)
class TableSpec:
    name: str
    kind: str  # "sparse" | "dense"
    size: int  # row dim for sparse tables, whole vector length for dense ones


def parse_table_specs(text: str) -> list[TableSpec]:
    """`name:sparse:DIM,name:dense:LENGTH,...`"""
    specs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        bits = part.split(":")
        if len(bits) != 3 or bits[1] not in ("sparse", "dense") or not bits[2].isdigit():
            raise ValueError(f"table spec {part!r} is not name:sparse|dense:SIZE")
        specs.append(TableSpec(bits[0], bits[1], int(bits[2])))
    return specs


@dataclass(frozen=True)
class ExportedFile:
    name: str
    table: str
    role: str
    size: int
    sha256: str
    rows: int


@dataclass(frozen=True)
class TableStats:
    name: str
    kind: str
    rows: int
    capacity: int
    dim: int
    memory_bytes: int


class Shard:
    def __init__(
        self,
        index: int,
        count: int,
        specs: list[TableSpec],
        ftrl: FtrlParams,
        store: ShardStore | None = None,
        max_sessions: int = 1024,
    ) -> None:
        if not 0 <= index < count:
            raise ValueError(f"shard index {index} outside 0..{count - 1}")
        self.index = index
        self.count = count
        self.sparse = {s.name: SparseTable(s.name, s.size, ftrl) for s in specs if s.kind == "sparse"}
        self.dense = {s.name: DenseTable(s.name, *dense_range(s.size, index, count), ftrl) for s in specs if s.kind == "dense"}
        self.store = store
        self.lock = threading.Lock()
        self.update_seq = 0
        self.export_seq = -1  # no export yet: the first delta holds everything
        self.checkpoint_seq = 0
        self.checkpoint_offsets = b""
        self._sessions: OrderedDict[int, tuple[str, npt.NDArray[np.uint64]]] = OrderedDict()
        self._session_ids = itertools.count(1)
        self._max_sessions = max_sessions
        if store is not None:
            self._restore(store)

    def _table(self, name: str) -> SparseTable:
        t = self.sparse.get(name)
        if t is None:
            raise ShardError(f"unknown sparse table {name!r}; this shard has {sorted(self.sparse)}")
        return t

    def _dense(self, name: str) -> DenseTable:
        t = self.dense.get(name)
        if t is None:
            raise ShardError(f"unknown dense table {name!r}; this shard has {sorted(self.dense)}")
        return t

    def check_keys(self, keys: npt.NDArray[np.uint64]) -> None:
        if keys.shape[0] > 1 and not bool(np.all(keys[1:] > keys[:-1])):
            raise ShardError("keys are not sorted and unique")
        if keys.shape[0] and not bool(np.all(shard_of(keys, self.count) == self.index)):
            raise ShardError(f"keys routed to shard {self.index} that belong to another shard")
        if keys.shape[0] and keys[0] == 0:
            raise ShardError("key 0 is reserved")

    def pull(self, table: str, keys: npt.NDArray[np.uint64], open_session: bool) -> tuple[int, npt.NDArray[np.float32]]:
        t = self._table(table)
        self.check_keys(keys)
        with self.lock:
            rows = t.pull(keys)
            sid = 0
            if open_session:
                sid = next(self._session_ids)
                self._sessions[sid] = (table, keys)
                while len(self._sessions) > self._max_sessions:
                    self._sessions.popitem(last=False)
        return sid, rows

    def session_keys(self, table: str, session_id: int) -> npt.NDArray[np.uint64]:
        with self.lock:
            entry = self._sessions.pop(session_id, None)
        if entry is None:
            raise SessionExpired(f"pull session {session_id} is unknown or expired")
        if entry[0] != table:
            raise ShardError(f"pull session {session_id} was opened on table {entry[0]!r}, not {table!r}")
        return entry[1]

    def push(self, table: str, keys: npt.NDArray[np.uint64], grads: npt.NDArray[np.float32]) -> int:
        t = self._table(table)
        if grads.size != keys.shape[0] * t.dim:
            raise ShardError(f"{grads.size} gradient values for {keys.shape[0]} keys of dim {t.dim}")
        self.check_keys(keys)
        with self.lock:
            self.update_seq += 1
            t.push(keys, grads, self.update_seq)
        return int(keys.shape[0])

    def pull_dense(self, table: str) -> tuple[int, npt.NDArray[np.float32]]:
        t = self._dense(table)
        with self.lock:
            return t.lo, t.weights()

    def push_dense(self, table: str, grads: npt.NDArray[np.float32]) -> None:
        t = self._dense(table)
        with self.lock:
            try:
                t.push(grads)
            except ValueError as e:
                raise ShardError(str(e)) from None
            self.update_seq += 1

    def export(self, full: bool, directory: Path) -> tuple[list[ExportedFile], int]:
        """Writes this shard's files (full images or deltas, plus dense ranges) into directory."""
        directory.mkdir(parents=True, exist_ok=True)
        out: list[tuple[Path, str, str, int]] = []
        with self.lock:
            since = -1 if full else self.export_seq
            for name, t in self.sparse.items():
                keys, slots = t.updated_after(since)
                weights = t.weights_at(slots)
                if full:
                    path = directory / f"shard{self.index}-{name}.image"
                    modelfile.write_image(path, keys, weights)
                    out.append((path, name, "sparse_full", int(keys.shape[0])))
                else:
                    path = directory / f"shard{self.index}-{name}.delta"
                    modelfile.write_delta(path, keys, weights, np.empty(0, dtype=np.uint64))
                    out.append((path, name, "sparse_delta", int(keys.shape[0])))
            for name, d in self.dense.items():
                path = directory / f"shard{self.index}-{name}.dense"
                modelfile.write_dense(path, d.weights(), d.lo)
                out.append((path, name, "dense", d.hi - d.lo))
            self.export_seq = self.update_seq
            seq = self.update_seq
        files = [
            ExportedFile(p.name, table, role, p.stat().st_size, modelfile.sha256_file(p), rows) for p, table, role, rows in out
        ]
        return files, seq

    def checkpoint(self, offsets: bytes) -> tuple[int, int]:
        """Persists rows changed since the last checkpoint, with the trainer's stream offsets."""
        if self.store is None:
            raise ShardError("this shard runs without a data directory; nothing to checkpoint into")
        with self.lock:
            sparse = {}
            for name, t in self.sparse.items():
                keys, slots = t.updated_after(self.checkpoint_seq)
                sparse[name] = (keys, t.raw_rows(slots))
            dense = {name: (d.z.copy(), d.n.copy()) for name, d in self.dense.items()}
            seq = self.update_seq
            written = self.store.write_checkpoint(sparse, dense, offsets, seq)
            self.checkpoint_seq = seq
            self.checkpoint_offsets = offsets
        return written, seq

    def _restore(self, store: ShardStore) -> None:
        self.checkpoint_offsets, self.checkpoint_seq = store.checkpoint_meta()
        self.update_seq = self.checkpoint_seq
        for name, t in self.sparse.items():
            for keys, rows in store.sparse_rows(name, t.map.row_words):
                t.load_raw(keys, rows)
        for name, d in self.dense.items():
            state = store.dense_state(name, d.hi - d.lo)
            if state is not None:
                d.z, d.n = state

    def stats(self) -> list[TableStats]:
        with self.lock:
            out = [TableStats(n, "sparse", t.map.size, t.map.capacity, t.dim, t.map.nbytes) for n, t in self.sparse.items()]
            out += [TableStats(n, "dense", d.hi - d.lo, d.hi - d.lo, 1, d.z.nbytes + d.n.nbytes) for n, d in self.dense.items()]
        return out
