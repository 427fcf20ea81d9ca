"""One PS shard: its tables, pull sessions, export, checkpoint and restore. No protobuf here."""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ctr.format import modelfile
from ctr.model.spec import TableSpec
from ctr.routing import dense_range, shard_of
from ps.api import ExportedFile, ModelIdentity, TableStats, mismatch
from ps.server.lifecycle import CountingBloom, Lifecycle, to_evict
from ps.server.store import CutMeta, ShardStore, StoreCorrupted
from ps.server.tables import GRADIENT, MOMENTUM, DenseTable, PushRejected, SparseTable

log = logging.getLogger("ps")


class ShardError(ValueError):
    """A request this shard cannot serve as asked (unknown table, misrouted keys...)."""


class SessionExpired(ShardError):
    """A push named a pull session this shard no longer remembers."""


class StaleGeneration(ShardError):
    """A push from a trainer generation older than the one that last restored this shard."""


class Shard:
    """Tables are declared by the trainer (declare), restored from the store when it holds
    them. Every public method is thread-safe; pull and push hold the lock while they run."""

    def __init__(
        self,
        index: int,
        count: int,
        store: ShardStore | None = None,
        max_sessions: int = 1024,
        full_every: int = 10,
        lifecycle: Lifecycle | None = None,
        export_root: Path | None = None,
    ) -> None:
        if not 0 <= index < count:
            raise ValueError(f"shard index {index} outside 0..{count - 1}")
        self.index = index
        self.count = count
        self.sparse: dict[str, SparseTable] = {}
        self.dense: dict[str, DenseTable] = {}
        self.store = store
        self.export_root = export_root  # exports land only in folders under it (none: no exports)
        self.lock = threading.Lock()
        self.update_seq = 0
        self.export_seq = -1  # no export yet: the first delta holds everything
        self.samples: dict[str, int] = {}  # per table, samples of the pushes applied
        self._sessions: OrderedDict[int, tuple[str, npt.NDArray[np.uint64]]] = OrderedDict()
        self._session_ids = itertools.count(1)
        self._max_sessions = max_sessions
        # checkpoint cuts (ps/server/store.py): written in the background, one at a time
        self.incarnation = int.from_bytes(os.urandom(8), "little") >> 1  # new at every start
        self.generation = 0  # of the trainer that last restored this shard; older pushes are refused
        self.full_every = full_every
        self.committed = CutMeta(0, b"", 0, True)
        self._last_cut = 0  # the newest cut prepared
        self._last_full = 0
        # rows updated after this are in no cut known to be written: it advances only once a
        # cut's background write succeeded, so a failed write's rows go into the next cut
        self._persisted_seq = 0
        self._pending: dict[int, tuple[int, bool]] = {}  # cut -> (its update seq, full?) until its write ends
        self.failed_cuts = 0  # background writes that failed (a full disk): their rows went into later cuts
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="cut-writer")
        self._writes: dict[int, Future[int]] = {}
        # row lifecycle (ps/server/lifecycle.py), per sparse table
        self.lifecycle = lifecycle or Lifecycle()
        self._blooms: dict[str, CountingBloom] = {}
        self.not_admitted: dict[str, int] = {}
        self.evicted: dict[str, int] = {}
        self._last_sweep: dict[str, tuple[float, int]] = {}  # per table: time and update seq
        self._tombstones_cut: dict[str, list[npt.NDArray[np.uint64]]] = {}  # evicted since the last cut
        self._tombstones_export: list[npt.NDArray[np.uint64]] = []  # evicted since the last export
        held = store.model() if store is not None else None
        self.model: ModelIdentity | None = ModelIdentity.from_json(held) if held else None  # the model it holds
        if store is not None:
            self._load(store.committed())

    @property
    def drops_rows(self) -> bool:
        """A push may not land on every row it names (admission drops it, eviction follows)."""
        return self.lifecycle.admit_after > 1 or self.lifecycle.evicts

    @property
    def checkpoint_seq(self) -> int:
        return self.committed.seq

    @property
    def checkpoint_offsets(self) -> bytes:
        return self.committed.offsets

    def _drop_other(self, model: ModelIdentity | None) -> bool:
        """Drops every table and cut when the shard holds another model than `model` (the
        trainer asked to replace it); True when it did. Caller holds the lock."""
        if model is None or self.model is None or not self.model.conflict(model):
            return False
        log.warning("shard %d: dropping model %s for %s (--replace-model)", self.index, self.model.describe(), model.describe())
        if self.store is not None:
            self.store.drop_everything()
        self.model, self._last_cut, self._last_full = None, 0, 0
        self._writes.clear()
        self._load(0)
        return True

    def _claim(self, model: ModelIdentity | None) -> None:
        """Records the model this shard holds; refuses another one (ModelMismatch). Caller
        holds the lock."""
        if model is None:
            return
        if self.model is not None and self.model.conflict(model):
            raise mismatch(self.model, model, self.index)
        claimed = model.merged(self.model) if self.model is not None else model
        if claimed != self.model:
            self.model = claimed
            if self.store is not None:
                self.store.put_model(claimed.to_json())

    def declare(self, specs: list[TableSpec], model: ModelIdentity | None = None, replace: bool = False) -> list[bool]:
        """Creates the tables; True for each table that starts empty (not loaded from the
        committed cut). A table that exists, here or in the store, with another layout is
        refused, and so is a model other than the one the shard holds (ModelMismatch),
        unless the trainer `replace`s it."""
        created = []
        with self.lock:
            if replace:
                self._drop_other(model)
            self._claim(model)
            for spec in specs:
                have = self.sparse.get(spec.name) or self.dense.get(spec.name)
                if have is not None:
                    _same_layout(have.spec, spec, "this shard")
                    created.append(False)
                    continue
                stored = self.store.table_spec(spec.name) if self.store is not None else None
                if stored is not None:
                    _same_layout(stored, spec, "the shard's store")
                if spec.kind == "sparse":
                    self.sparse[spec.name] = SparseTable(spec)
                else:
                    self.dense[spec.name] = DenseTable(spec, *dense_range(spec.dim, self.index, self.count))
                if self.store is not None and stored is None:
                    self.store.put_table_spec(spec)
                created.append(True)
            # the declared order, which exports write their columns in: tables loaded from the
            # store come in its (alphabetical) order, and a restarted shard exported v before w
            order = [spec.name for spec in specs]
            self.sparse = {n: self.sparse[n] for n in order if n in self.sparse} | self.sparse
            self.dense = {n: self.dense[n] for n in order if n in self.dense} | self.dense
        return created

    def _read(self, cut: int) -> tuple[CutMeta | None, dict[str, SparseTable], dict[str, DenseTable]]:
        """The tables the store holds at `cut`, read whole or not at all: a block that fails
        its checksum, a block missing, or a table with fewer rows than the cut recorded
        raises StoreCorrupted, and nothing of this shard has changed."""
        meta = self.store.meta(cut) if self.store is not None and cut else None
        sparse: dict[str, SparseTable] = {}
        dense: dict[str, DenseTable] = {}
        if self.store is None or meta is None:
            if cut and self.store is not None:
                raise StoreCorrupted(f"shard {self.index}: checkpoint cut {cut} is not in the store at {self.store.path}")
            return meta, sparse, dense
        for name in self.store.table_names():
            spec = self.store.table_spec(name)
            assert spec is not None
            if spec.kind == "sparse":
                t = SparseTable(spec)
                keys, rows = self.store.sparse_at(name, t.row_words, cut)
                expected = meta.tables.get(name, {}).get("rows")
                if expected is not None and keys.shape[0] != expected:
                    raise StoreCorrupted(
                        f"shard {self.index}: table {name} reads {keys.shape[0]} rows at cut {cut}, which recorded {expected}"
                    )
                t.load_raw(keys, rows)
                sparse[name] = t
            else:
                d = DenseTable(spec, *dense_range(spec.dim, self.index, self.count))
                state = self.store.dense_at(name, d.hi - d.lo, d.width, cut)
                if state is not None:
                    d.state = state
                    dense[name] = d
        return meta, sparse, dense

    def _load(self, cut: int, read: tuple[CutMeta | None, dict[str, SparseTable], dict[str, DenseTable]] | None = None) -> None:
        """Replaces every table by what the store holds at `cut` (0: nothing), read first
        (`read`, when the caller has it): a cut that cannot be read whole changes nothing.
        Caller holds the lock, or the shard is not serving yet."""
        meta, sparse, dense = read if read is not None else self._read(cut)
        self.sparse.clear()
        self.dense.clear()
        self.sparse.update(sparse)
        self.dense.update(dense)
        self._sessions.clear()
        self.committed = meta or CutMeta(0, b"", 0, True)
        self.samples = dict(self.committed.samples)
        if self.store is not None and meta is not None:
            fulls = [m.cut for m in self.store.metas() if m.full and m.cut <= cut]
            self._last_full = max(fulls, default=0)
        else:
            self._last_full = 0
        self._load_lifecycle(cut)
        self._tombstones_cut.clear()
        self._tombstones_export.clear()
        # the cut's own sequence: rows loaded are older, and a row's age in updates (TTL)
        # is what it was at the cut
        self.update_seq = self.committed.seq
        self._persisted_seq = self.update_seq
        self._pending.clear()
        self._last_cut = cut
        self.export_seq = -1  # the next export carries every row as loaded

    def _load_lifecycle(self, cut: int) -> None:
        """The admission filters and eviction clocks as of `cut` (0: fresh ones)."""
        self._blooms.clear()
        self._last_sweep = {n: (float(c["sweep_time"]), int(c["sweep_seq"])) for n, c in self.committed.lifecycle.items()}
        self.not_admitted = {n: int(c["not_admitted"]) for n, c in self.committed.lifecycle.items()}
        self.evicted = {n: int(c["evicted"]) for n, c in self.committed.lifecycle.items()}
        if self.store is None or not cut:
            return
        for name in self.sparse:
            counters = self.store.bloom_at(name, cut)
            if counters is None:
                continue
            if counters.shape[0] != CountingBloom.size(self.lifecycle.bloom_counters):
                log.warning("table %s: the stored admission filter has another size than --bloom-mb; it starts empty", name)
                continue
            self._blooms[name] = CountingBloom.of(counters)

    def _lifecycle_clocks(self) -> dict[str, dict[str, float]]:
        """What a cut records of the lifecycle besides the filters. Caller holds the lock."""
        return {
            name: {
                "sweep_time": self._last_sweep.get(name, (0.0, 0))[0],
                "sweep_seq": self._last_sweep.get(name, (0.0, 0))[1],
                "not_admitted": self.not_admitted.get(name, 0),
                "evicted": self.evicted.get(name, 0),
            }
            for name in self.sparse
        }

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

    def pull(
        self, table: str, keys: npt.NDArray[np.uint64], open_session: bool, state: bool = False
    ) -> tuple[int, npt.NDArray[np.float32] | npt.NDArray[np.float64]]:
        """Weights [n, dim] (or optimizer state [n, width] with state=True) and a session id."""
        t = self._table(table)
        self.check_keys(keys)
        with self.lock:
            rows = t.pull_state(keys) if state else t.pull(keys)
            sid = 0
            if open_session:
                sid = next(self._session_ids)
                self._sessions[sid] = (table, keys)
                while len(self._sessions) > self._max_sessions:
                    self._sessions.popitem(last=False)
        return sid, rows

    def session_keys(self, table: str, session_ids: Sequence[int]) -> npt.NDArray[np.uint64]:
        """The keys of the pull sessions a push names (each used once): one session's, or
        the sorted union of several (pushes a host's workers summed, --local-aggregate)."""
        with self.lock:
            entries = [(sid, self._sessions.pop(sid, None)) for sid in session_ids]
        if not entries:
            raise ShardError("a push named no pull session")
        parts = []
        for sid, entry in entries:
            if entry is None:
                raise SessionExpired(f"pull session {sid} is unknown or expired")
            if entry[0] != table:
                raise ShardError(f"pull session {sid} was opened on table {entry[0]!r}, not {table!r}")
            parts.append(entry[1])
        return parts[0] if len(parts) == 1 else np.unique(np.concatenate(parts))

    def dense_push_shape(self, table: str, kind: str) -> tuple[int, int]:
        """(rows, values per row) of a dense push of `kind` to this shard's range."""
        t = self._dense(table)
        return t.hi - t.lo, t.push_width(kind)

    def push_width(self, table: str, kind: str) -> int:
        """Values per row a push of `kind` carries: the weights' dim for gradients, the
        state's width for deltas."""
        t = self._table(table)
        if kind == MOMENTUM:
            raise ShardError(f"table {table!r}: momentum pushes are for dense adam tables, not sparse ones")
        return t.dim if kind == GRADIENT else t.width

    def push(
        self,
        table: str,
        keys: npt.NDArray[np.uint64],
        values: npt.NDArray[np.float64],
        kind: str = GRADIENT,
        samples: int = 0,
        generation: int = 0,
    ) -> int:
        """Applies gradients or state deltas of `samples` samples; a push with a bad value,
        or from a trainer generation older than the current one, changes nothing."""
        t = self._table(table)
        self.check_keys(keys)
        with self.lock:  # a delta is checked against the rows it lands on
            self._check_generation(generation)
            if self.lifecycle.admit_after > 1:
                keys, values = self._admit(t, keys, values)
            try:
                t.apply(kind, keys, values, self.update_seq + 1)
            except PushRejected as e:
                raise ShardError(str(e)) from None
            self.update_seq += 1
            self.samples[table] = self.samples.get(table, 0) + samples
            if self.lifecycle.evicts:
                self._evict(t)
        return int(keys.shape[0])

    def _admit(
        self, t: SparseTable, keys: npt.NDArray[np.uint64], values: npt.NDArray[np.float64]
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float64]]:
        """The push less the rows of keys the table does not hold and has not seen
        `admit_after` times (this sighting counted). Caller holds the lock."""
        absent = t.find(keys) < 0
        if not absent.any():
            return keys, values
        bloom = self._blooms.get(t.name)
        if bloom is None:
            bloom = self._blooms[t.name] = CountingBloom(self.lifecycle.bloom_counters)
        keep = ~absent
        keep[absent] = bloom.admitted(keys[absent], self.lifecycle.admit_after)
        self.not_admitted[t.name] = self.not_admitted.get(t.name, 0) + int((~keep).sum())
        return keys[keep], values.reshape(keys.shape[0], -1)[keep]

    def _evict(self, t: SparseTable) -> None:
        """Evicts expired rows (a sweep every sweep_every_s, or every quarter of ttl_updates
        updates) and, once the table is 5% past max_rows, the least recently updated down
        to it. Caller holds the lock."""
        policy = self.lifecycle
        now = time.time()
        last_time, last_seq = self._last_sweep.get(t.name, (0.0, 0))
        sweep = (policy.ttl_s > 0 and now - last_time >= policy.sweep_every_s) or (
            policy.ttl_updates > 0 and self.update_seq - last_seq >= max(1, policy.ttl_updates // 4)
        )
        over = policy.max_rows > 0 and t.size > policy.max_rows * 1.05
        if not (sweep or over):
            return
        if sweep:
            self._last_sweep[t.name] = (now, self.update_seq)
        removed = t.delete_rows(to_evict(t.meta, t.keys, t.size, int(now), self.update_seq, policy, sweep))
        if removed.shape[0]:
            self.evicted[t.name] = self.evicted.get(t.name, 0) + int(removed.shape[0])
            self._tombstones_cut.setdefault(t.name, []).append(removed)
            self._tombstones_export.append(removed)

    def pull_dense(self, table: str, state: bool = False) -> tuple[int, npt.NDArray[np.float32] | npt.NDArray[np.float64]]:
        """(offset of this shard's range, weights [n] or state [n, width])."""
        t = self._dense(table)
        with self.lock:
            return t.lo, (t.state.copy() if state else t.weights())

    def push_dense(
        self,
        table: str,
        values: npt.NDArray[np.float64],
        kind: str = GRADIENT,
        steps: int = 1,
        samples: int = 0,
        generation: int = 0,
    ) -> None:
        t = self._dense(table)
        with self.lock:
            self._check_generation(generation)
            try:
                t.apply(kind, values, steps)
            except PushRejected as e:
                raise ShardError(str(e)) from None
            self.update_seq += 1
            self.samples[table] = self.samples.get(table, 0) + samples

    def export_folder(self, name: str) -> Path:
        """The folder of export `name` under the export root: the caller names a folder, it
        never gives a path, so a caller cannot make the shard write anywhere else."""
        if self.export_root is None:
            raise ShardError("this shard has no export root (--export-root): it writes no exports")
        if not modelfile.EXPORT_NAME.fullmatch(name):
            raise ShardError(f"directory: {name[:80]!r} is not an export name (letters, digits, '.', '_', '-'; no path)")
        return self.export_root / name

    def export(self, full: bool, name: str) -> tuple[list[ExportedFile], int]:
        """Writes this shard's sparse weights as one file whose rows hold every sparse table's
        weights side by side (full image or delta of rows changed since the last export),
        into the folder `name` under the export root."""
        directory = self.export_folder(name)
        directory.mkdir(parents=True, exist_ok=True)
        with self.lock:
            since = -1 if full else self.export_seq
            changed = [t.updated_after(since)[0] for t in self.sparse.values()]
            keys = np.unique(np.concatenate(changed)) if changed else np.empty(0, np.uint64)
            parts = []
            for t in self.sparse.values():
                ids = t.find(keys)
                w = np.zeros((keys.shape[0], t.dim), dtype=np.float32)
                present = ids >= 0
                w[present] = t.weights_at(ids[present])
                parts.append(w)
            rows = np.concatenate(parts, axis=1) if parts else np.zeros((0, 1), np.float32)
            tombstones = self._gone(self._tombstones_export, list(self.sparse.values()))
            self._tombstones_export.clear()
            self.export_seq = self.update_seq
            seq = self.update_seq
        columns = ",".join(f"{t.name}:{t.dim}" for t in self.sparse.values())
        if full:
            path, role = directory / f"shard{self.index}-sparse.image", "sparse_full"
            modelfile.write_image(path, keys, rows)
        else:
            path, role = directory / f"shard{self.index}-sparse.delta", "sparse_delta"
            modelfile.write_delta(path, keys, rows, tombstones)  # evicted keys: serving drops them
        f = ExportedFile(path.name, "sparse", role, path.stat().st_size, modelfile.sha256_file(path), int(keys.shape[0]), columns)
        return [f], seq

    @staticmethod
    def _gone(evicted: list[npt.NDArray[np.uint64]], tables: list[SparseTable]) -> npt.NDArray[np.uint64]:
        """Keys evicted that none of `tables` holds again (a key may come back before the
        cut or export that would carry its tombstone)."""
        if not evicted:
            return np.zeros(0, dtype=np.uint64)
        keys = np.unique(np.concatenate(evicted))
        back = np.zeros(keys.shape[0], dtype=np.bool_)
        for t in tables:
            back |= t.find(keys) >= 0
        return keys[~back]

    def _check_generation(self, generation: int) -> None:
        if generation < self.generation:
            raise StaleGeneration(f"a push from trainer generation {generation}; this shard follows generation {self.generation}")

    def _need_store(self) -> ShardStore:
        if self.store is None:
            raise ShardError("this shard runs without a data directory; nothing to checkpoint into")
        return self.store

    def prepare(self, cut: int, offsets: bytes) -> int:
        """Phase one of a checkpoint: snapshots, under the lock, the rows changed since the
        last cut (every row, every `full_every` cuts) with the trainer's stream offsets, and
        writes them as cut `cut` in the background. Returns the rows in the cut."""
        store = self._need_store()
        for pending in list(self._writes.values()):
            pending.exception()  # waits (outside the lock): whether they succeeded decides `since`
        with self.lock:
            if cut <= self._last_cut:
                raise ShardError(f"checkpoint cut {cut} is not newer than this shard's cut {self._last_cut}")
            self._settle_writes()
            first = self._last_full == 0  # every row changed since nothing: a full cut by itself
            compact = not first and cut - self._last_full >= self.full_every
            since = -1 if first else self._persisted_seq
            sparse = {}
            for name, t in self.sparse.items():
                keys, ids = t.updated_after(since)
                sparse[name] = (keys, t.raw_rows(ids))  # copies; in row order (a load sorts)
            dense = {name: d.state.copy() for name, d in self.dense.items()}
            deleted = {name: self._gone(self._tombstones_cut.pop(name, []), [t]) for name, t in self.sparse.items()}
            blooms = {name: b.counters.copy() for name, b in self._blooms.items()}
            # each table's rows in this cut and in all: a load that reads fewer is refused
            tables = {n: {"written": int(sparse[n][0].shape[0]), "rows": int(t.size)} for n, t in self.sparse.items()}
            meta = CutMeta(cut, offsets, self.update_seq, first, dict(self.samples), self._lifecycle_clocks(), tables)
            self._pending[cut] = (self.update_seq, first or compact)  # durable once its write succeeds
            self._last_cut = cut
            words = {name: t.row_words for name, t in self.sparse.items()}
            self._writes[cut] = self._writer.submit(
                self._write, store, meta, sparse, dense, deleted, blooms, words if compact else None
            )
        return sum(int(k.shape[0]) for k, _ in sparse.values())

    def _settle_writes(self) -> None:
        """Takes in the outcome of the cuts' finished background writes. Caller holds the
        lock. A written cut advances what is durable; a failed one (a full disk) is dropped
        from the store, whatever part of it landed, and its rows stay due for the next cut,
        which then holds every row changed since the last cut written whole."""
        store = self.store
        for cut in sorted(self._pending):
            done = self._writes.get(cut)
            if done is None or not done.done():
                continue
            seq, full = self._pending.pop(cut)
            error = done.exception()
            if error is None:
                self._persisted_seq = seq
                if full:
                    self._last_full = cut
                continue
            self.failed_cuts += 1
            log.error("shard %d: checkpoint cut %d was not written (%s); its rows go into the next cut", self.index, cut, error)
            if store is not None:
                good = max((m.cut for m in store.metas() if m.cut < cut), default=0)
                try:
                    store.drop_cuts_after(good)
                except Exception as e:  # noqa: BLE001 - the disk may still be full: the cut is refused at load anyway
                    log.warning("shard %d: the remains of cut %d stay in the store for now: %s", self.index, cut, e)

    @staticmethod
    def _write(
        store: ShardStore,
        meta: CutMeta,
        sparse: dict[str, tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint32]]],
        dense: dict[str, npt.NDArray[np.float64]],
        deleted: dict[str, npt.NDArray[np.uint64]],
        blooms: dict[str, npt.NDArray[np.uint8]],
        compact_words: dict[str, int] | None,
    ) -> int:
        """The writer thread: the cut's changed rows and evicted keys, then (every
        full_every cuts) the cut rewritten whole from the store's chain, so a full cut never
        stalls training."""
        written = store.write_cut(meta, sparse, dense, deleted, blooms)
        if compact_words is not None:
            store.make_full(meta.cut, compact_words)
        return written

    def commit(self, cut: int) -> int:
        """Phase two: waits until cut `cut` is written, then makes it the committed cut.
        Returns the rows it holds (0 when it was written before this process started)."""
        store = self._need_store()
        pending = self._writes.get(cut)
        written = pending.result() if pending is not None else 0  # a failed write raises here
        meta = store.meta(cut)
        if meta is None:
            raise ShardError(f"checkpoint cut {cut} was never prepared on this shard")
        with self.lock:
            self._settle_writes()  # this cut's write succeeded: what it holds is durable
            if cut > self.committed.cut or store.committed() != cut:
                store.commit(cut)
                self.committed = meta
            for c in [c for c in self._writes if c <= cut]:
                del self._writes[c]
        return written

    def restore(self, cut: int, generation: int, model: ModelIdentity | None = None, replace: bool = False) -> None:
        """Goes back to committed cut `cut` (0: empty tables), dropping newer cuts and every
        change since, and follows trainer generation `generation` from now on. A trainer of
        another model than the one held is refused (ModelMismatch) before anything changes,
        unless it `replace`s it: then every table and cut goes, and the shard holds the new
        model from cut 0."""
        for pending in list(self._writes.values()):
            pending.exception()  # waits; a failed cut is dropped below anyway
        with self.lock:
            if generation < self.generation:
                raise StaleGeneration(f"a restore from trainer generation {generation}; this shard follows {self.generation}")
            if replace and self._drop_other(model):
                cut = 0
            self._claim(model)
            store = self.store
            if store is not None:
                if cut and store.meta(cut) is None:
                    raise ShardError(f"checkpoint cut {cut} is not stored on this shard")
            elif cut:
                raise ShardError("this shard runs without a data directory; it holds no cut to restore")
            self._settle_writes()
            unchanged = 0 < cut == self.committed.cut == self._last_cut and self.update_seq == self._persisted_seq
            # read the cut whole before anything changes: a damaged one is refused (StoreCorrupted)
            read = None if unchanged else self._read(cut)
            if store is not None:
                store.drop_cuts_after(cut)
                if cut and store.committed() != cut:
                    store.commit(cut)
            self._writes.clear()
            if read is not None:  # a shard that just loaded the cut (it restarted) holds it already
                self._load(cut, read)
            self._sessions.clear()
            self.generation = generation

    def close(self) -> None:
        self._writer.shutdown(wait=True)

    def cuts(self) -> list[int]:
        """The cuts written to the store and not dropped, oldest first."""
        return [] if self.store is None else [m.cut for m in self.store.metas()]

    def stats(self) -> list[TableStats]:
        with self.lock:
            out = [
                TableStats(
                    n,
                    "sparse",
                    t.size,
                    t.keys.shape[0],
                    t.dim,
                    t.nbytes,
                    t.digest(),
                    self.samples.get(n, 0),
                    self.not_admitted.get(n, 0),
                    self.evicted.get(n, 0),
                )
                for n, t in self.sparse.items()
            ]
            out += [
                TableStats(n, "dense", d.hi - d.lo, d.hi - d.lo, 1, d.state.nbytes, d.digest(), self.samples.get(n, 0))
                for n, d in self.dense.items()
            ]
        return out


def _same_layout(have: TableSpec, want: TableSpec, where: str) -> None:
    if (have.kind, have.dim, have.optimizer.kind) != (want.kind, want.dim, want.optimizer.kind):
        raise ShardError(
            f"table {want.name}: declared as {want.kind} dim {want.dim} with {want.optimizer.kind}, "
            f"but {where} holds it as {have.kind} dim {have.dim} with {have.optimizer.kind}"
        )
