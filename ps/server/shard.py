"""One PS shard: the table store (its sparse and dense tables, pull sessions, pushes) and its
parts: checkpoint cuts (ps/server/checkpoints.py), export (ps/server/export.py) and the row
lifecycle (ps/server/row_lifecycle.py), all under one lock. No protobuf here."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from ctr.model.spec import TableSpec
from ctr.routing import dense_range
from ps.api import (
    CachedPull,
    Declared,
    ExportedFile,
    KnownRows,
    ModelIdentity,
    TableStats,
    layout_differences,
    layout_of,
    mismatch,
    settings_change,
)
from ps.compression.state_diff import as_fp32_bits, base_digest, decode_state_diff
from ps.server import kernels
from ps.server.checkpoints import Checkpoints, CutImage, CutSnapshot, read_cut
from ps.server.errors import BaseMismatch, RowsMoved, SessionExpired, ShardError, StaleGeneration
from ps.server.export import changed_rows, export_folder, write_export
from ps.server.leases import DEFAULT_LEASE_S, WriteLeases
from ps.server.lifecycle import Lifecycle
from ps.server.row_lifecycle import RowLifecycle
from ps.server.store import CutMeta, ShardStore
from ps.server.tables import ANONYMOUS, GRADIENT, MOMENTUM, STATE, DenseTable, PushRejected, SparseTable

log = logging.getLogger("ps")
Recorded = npt.NDArray[np.int64] | None  # per session key, its row's sequence when pulled (-1 absent)


class Session(NamedTuple):
    """What a pull leaves for the push that names it."""

    table: str
    keys: npt.NDArray[np.uint64]
    recorded: Recorded  # for a client keeping rows (pull-cache.md), None otherwise
    client: int
    as_key: npt.NDArray[np.bool_] | None = None  # which keys the client sent as keys (it holds no copy)

    def reads_of(self, client: int, subset: npt.NDArray[np.int64] | None) -> tuple[Recorded, npt.NDArray[np.bool_] | None]:
        """(recorded sequences, sent-as-key flags) of the rows a push by `client` carries
        (`subset` of the session's keys, None: all); (None, None) when another opened it."""
        if self.client != client or self.recorded is None:
            return None, None
        if subset is None:
            return self.recorded, self.as_key
        return self.recorded[subset], None if self.as_key is None else self.as_key[subset]


class PushOutcome(NamedTuple):
    """What a push by a client that keeps rows learns (pull-cache.md): per key named,
    whether its copy is no longer the row; for the keys its pull sent as keys and that do
    not conflict, in key order, their row ids (the rows it may keep from now on) and the
    layout they belong to."""

    applied: int
    conflicts: npt.NDArray[np.bool_]
    new_ids: npt.NDArray[np.int64]
    layout: int
    epoch: int = 0  # the table's epoch after the push, at which the copies it leaves are the rows
    lease_s: float = 0.0  # the write lease granted with it (write-leases.md), 0: none
    waited_s: float = 0.0  # how long it waited for another client's lease

    def conflicts_of_named(self, named: int, subset: npt.NDArray[np.int64] | None) -> npt.NDArray[np.bool_]:
        """The conflicts over all `named` keys of a push that carried `subset` of them."""
        out = np.zeros(named, dtype=np.bool_)
        out[subset if subset is not None else slice(None)] = self.conflicts
        return out


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
        lease_s: float = DEFAULT_LEASE_S,
        lease_quiet_s: float | None = None,
    ) -> None:
        if not 0 <= index < count:
            raise ValueError(f"shard index {index} outside 0..{count - 1}")
        self.index = index
        self.count = count
        self.sparse: dict[str, SparseTable] = {}
        self.dense: dict[str, DenseTable] = {}
        self.store = store
        if store is not None:
            store.claim_place(index, count)  # before anything is read from it
        self.export_root = export_root  # exports land only in folders under it (none: no exports)
        self.lock = threading.Lock()
        self.update_seq = 0
        self.export_seq = -1  # no export yet: the first delta holds everything
        self.samples: dict[str, int] = {}  # per table, samples of the pushes applied
        self._sessions: OrderedDict[int, Session] = OrderedDict()
        self._session_ids = itertools.count(1)
        self._max_sessions = max_sessions
        self.incarnation = int.from_bytes(os.urandom(8), "little") >> 1  # new at every start
        # of the trainer that last restored this shard (older pushes are refused) and the cut it
        # went back to; kept in the store, so a restart does not let an older trainer back in
        self.generation, self.restored_cut = store.generation() if store is not None else (0, 0)
        self._created: set[str] = set()  # tables declared empty since the last restore, not pushed to since
        self.checkpoints = Checkpoints(store, index, full_every)
        self.rows = RowLifecycle(lifecycle or Lifecycle())
        # no leases where rows are evicted: they move at update counts, the same in a run that
        # died and took up at a cut (exactly once), and a lease would hold them back by time
        self.leases = WriteLeases(0.0 if self.lifecycle.evicts else lease_s, lease_quiet_s)
        held = store.model() if store is not None else None
        self.model: ModelIdentity | None = ModelIdentity.from_json(held) if held else None  # the model it holds
        if store is not None:
            self._load(store.committed())

    @property
    def lifecycle(self) -> Lifecycle:
        return self.rows.policy

    @property
    def drops_rows(self) -> bool:
        """A push may not land on every row it names (admission drops it, eviction follows)."""
        return self.rows.drops_rows

    @property
    def committed(self) -> CutMeta:
        return self.checkpoints.committed

    @property
    def failed_cuts(self) -> int:
        return self.checkpoints.failed_cuts

    @property
    def checkpoint_seq(self) -> int:
        return self.committed.seq

    @property
    def checkpoint_offsets(self) -> bytes:
        return self.committed.offsets

    def _held(self) -> ModelIdentity | None:
        """The model this shard holds, with the layout of the tables it holds (in memory or
        in its store): what the tables' rows mean, whatever the stored identity says."""
        if self.model is None:
            return None
        specs = {n: t.spec for n, t in (self.sparse | self.dense).items()}
        if self.store is not None:
            for name in self.store.table_names():
                stored = self.store.table_spec(name) if name not in specs else None
                if stored is not None:
                    specs[name] = stored
        return dataclasses.replace(self.model, layout=layout_of(specs.values()))

    def _drop_other(self, model: ModelIdentity | None) -> bool:
        """Drops every table and cut when the shard holds another model than `model` (the
        trainer asked to replace it); True when it did. Caller holds the lock."""
        held = self._held()
        if model is None or held is None or not held.conflict(model):
            return False
        tables = "; ".join(layout_differences(held.layout, model.layout))
        log.warning(
            "shard %d: dropping model %s for %s%s (--replace-model)",
            self.index,
            held.describe(),
            model.describe(),
            f" ({tables})" if tables else "",
        )
        self.checkpoints.drop_everything()
        self.model = None
        self._load(0)
        return True

    def _claim(self, model: ModelIdentity | None) -> None:
        """Records the model this shard holds; refuses another one (ModelMismatch). Caller
        holds the lock. The layout is not recorded: the tables themselves tell it."""
        if model is None:
            return
        held = self._held()
        if held is not None and held.conflict(model):
            raise mismatch(held, model, self.index)
        claimed = dataclasses.replace(model.merged(self.model) if self.model is not None else model, layout="")
        if claimed != self.model:
            self.model = claimed
            if self.store is not None:
                self.store.put_model(claimed.to_json())

    def declare(self, specs: list[TableSpec], model: ModelIdentity | None = None, replace: bool = False) -> Declared:
        """Creates the tables; per table, whether it starts empty (not loaded from the
        committed cut): one a declaration created since the last restore and that no push
        has written since, so that a declaration sent again after its deadline answers as
        the first did, while a second worker finds the first one's start. A table that
        exists, here or in the store, with another layout is refused, and so is a model
        other than the one the shard holds (ModelMismatch), unless the trainer `replace`s it.
        A table held with other settings of its optimizer's kind (a rate, l1) takes the
        declared ones: the trainer steps its rows with them, so the shard's own steps, the
        initial rows it makes and the weights it derives for pulls and exports must too.
        Those changes are returned, to be said where the trainer runs."""
        created = []
        retuned = []
        with self.lock:
            if replace:
                self._drop_other(model)
            self._claim(model)
            stored_specs = {spec.name: self.store.table_spec(spec.name) if self.store is not None else None for spec in specs}
            for spec in specs:  # every layout first: a refusal changes nothing
                have = self.sparse.get(spec.name) or self.dense.get(spec.name)
                held = have.spec if have is not None else stored_specs[spec.name]
                if held is not None:
                    self._same_layout(held, spec)
            for spec in specs:
                have = self.sparse.get(spec.name) or self.dense.get(spec.name)
                stored = stored_specs[spec.name]
                held = have.spec if have is not None else stored
                if held is not None:
                    change = settings_change(held, spec)
                    if change:
                        retuned.append(change)
                        log.warning("shard %d: table %s from now on; its rows keep their state", self.index, change)
                        if self.store is not None:  # first: a failed write changes nothing
                            self.store.put_table_spec(spec)
                        if have is not None:
                            have.retune(spec)
                if have is not None:
                    created.append(spec.name in self._created)
                    continue
                if spec.kind == "sparse":
                    self.sparse[spec.name] = SparseTable(spec)
                else:
                    self.dense[spec.name] = DenseTable(spec, *dense_range(spec.dim, self.index, self.count))
                if self.store is not None and stored is None:
                    self.store.put_table_spec(spec)
                self._created.add(spec.name)
                created.append(True)
            # the declared order, which exports write their columns in: tables loaded from the
            # store come in its (alphabetical) order, and a restarted shard exported v before w
            order = [spec.name for spec in specs]
            self.sparse = {n: self.sparse[n] for n in order if n in self.sparse} | self.sparse
            self.dense = {n: self.dense[n] for n in order if n in self.dense} | self.dense
        return Declared(created, retuned)

    def _same_layout(self, have: TableSpec, want: TableSpec) -> None:
        """A table held (here or in the store) laid out otherwise than declared: another
        model (ModelMismatch)."""
        if (have.kind, have.dim, have.optimizer.kind) != (want.kind, want.dim, want.optimizer.kind):
            held = self.model or ModelIdentity("", "")  # a shard no trainer has named its model to
            raise mismatch(
                dataclasses.replace(held, layout=layout_of([have])),
                dataclasses.replace(held, layout=layout_of([want])),
                self.index,
            )

    def _load(self, cut: int, image: CutImage | None = None) -> None:
        """Replaces every table by what the store holds at `cut` (0: nothing), read first
        (`image`, when the caller has it): a cut that cannot be read whole changes nothing.
        Caller holds the lock, or the shard is not serving yet."""
        image = image if image is not None else read_cut(self.store, cut, self.index, self.count)
        self.sparse.clear()
        self.dense.clear()
        self.leases.clear()
        self.sparse.update(image.sparse)
        self.dense.update(image.dense)
        self._sessions.clear()
        self._created.clear()
        self.checkpoints.loaded(cut, image.meta)
        self.samples = dict(self.committed.samples)
        self.rows.load(self.committed.lifecycle, image.blooms)
        # the cut's own sequence: rows loaded are older, and a row's age in updates (TTL)
        # is what it was at the cut
        self.update_seq = self.committed.seq
        self.export_seq = -1  # the next export carries every row as loaded

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
        fault = kernels.key_fault(keys, self.count, self.index)
        if fault == kernels.KEYS_UNSORTED:
            raise ShardError("keys are not sorted and unique")
        if fault == kernels.KEYS_ELSEWHERE:
            raise ShardError(f"keys routed to shard {self.index} that belong to another shard")
        if fault == kernels.KEY_ZERO:
            raise ShardError("key 0 is reserved")

    def pull(
        self, table: str, keys: npt.NDArray[np.uint64], open_session: bool, state: bool = False
    ) -> tuple[int, npt.NDArray[np.float32] | npt.NDArray[np.float64]]:
        """Weights [n, dim] (or optimizer state [n, width] with state=True) and a session id."""
        t = self._table(table)
        self.check_keys(keys)
        with self.lock:
            rows = t.pull_state(keys) if state else t.pull(keys)
            sid = self._open(Session(table, keys, None, ANONYMOUS)) if open_session else 0
        return sid, rows

    def _open(self, session: Session) -> int:
        """Keeps a session for the push that names it (the oldest go past max_sessions).
        Caller holds the lock."""
        sid = next(self._session_ids)
        self._sessions[sid] = session
        while len(self._sessions) > self._max_sessions:
            self._sessions.popitem(last=False)
        return sid

    def pull_known(self, table: str, keys: npt.NDArray[np.uint64], known: KnownRows) -> CachedPull:
        """The state pull of a client that keeps rows (docs/design/pull-cache.md): rows of
        the keys it sends that the shard stores (absent ones it makes itself), and those of
        its known row ids another writer changed or whose copy it marks stale. Opens a
        session over the union of both, in key order, recording each row's sequence for the
        push's conflict check."""
        if known.client == ANONYMOUS:
            raise ShardError("a pull with known rows needs a nonzero client id")
        t = self._table(table)
        self.check_keys(keys)
        ids = known.ids
        if ids.shape[0] > 1 and not bool(np.all(ids[1:] > ids[:-1])):
            raise ShardError("known row ids are not sorted and unique")
        if known.stale is not None and known.stale.shape[0] != ids.shape[0]:
            raise ShardError(f"{known.stale.shape[0]} stale flags for {ids.shape[0]} known row ids")
        empty = np.zeros(0, dtype=np.bool_)
        with self.lock:
            if ids.shape[0] and known.layout != t.layout:
                none = np.zeros((0, t.width))
                return CachedPull(0, True, t.layout, empty, np.zeros(0, np.int64), none, empty, none)
            if ids.shape[0] and (ids[0] < 0 or ids[-1] >= t.size):
                raise ShardError(f"known row id {int(ids[-1])} outside table {table}'s {t.size} rows")
            found = t.find(keys)
            stored = found >= 0
            stored_ids = found[stored]
            changed = t.changed_for(ids, known.client)
            if known.stale is not None:
                changed |= known.stale
            all_keys = np.concatenate([keys, t.keys[ids]])
            recorded = np.full(all_keys.shape[0], -1, dtype=np.int64)
            recorded[: keys.shape[0]][stored] = t.row_seq(stored_ids)
            recorded[keys.shape[0] :] = t.row_seq(ids)
            as_key = np.zeros(all_keys.shape[0], dtype=np.bool_)
            as_key[: keys.shape[0]] = True
            order = np.argsort(all_keys, kind="stable")
            all_keys, recorded, as_key = all_keys[order], recorded[order], as_key[order]
            if all_keys.shape[0] > 1 and not bool(np.all(all_keys[1:] > all_keys[:-1])):
                raise ShardError("a key sent is also named by a known row id")
            sid = self._open(Session(table, all_keys, recorded, known.client, as_key))
            return CachedPull(sid, False, t.layout, stored, stored_ids, t.state[stored_ids], changed, t.state[ids[changed]])

    def id_limit(self, table: str) -> int:
        """A bound on the row ids a request may name, so that a few bytes cannot make the
        decoder build a huge set: the table's rows, but at least the 2**25 ids a 4 MiB bitmap
        names, so ids of an older, larger layout still decode and are answered `stale`."""
        return max(int(self._table(table).size), 1 << 25)

    def keys_of(self, table: str, layout: int, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
        """The keys of the sorted unique row ids a push names (ids of `layout`), sorted: the
        push then lands as if they had travelled. Resolved under the lock, so they are the
        keys the ids named, whatever moves after."""
        t = self._table(table)
        if ids.shape[0] > 1 and not bool(np.all(ids[1:] > ids[:-1])):
            raise ShardError("row ids are not sorted and unique")
        with self.lock:
            if layout != t.layout:
                raise RowsMoved(f"table {table}'s rows moved since layout {layout}: name them by key")
            if ids.shape[0] and (ids[0] < 0 or ids[-1] >= t.size):
                bad = int(ids[-1]) if ids[-1] >= t.size else int(ids[0])
                raise ShardError(f"row id {bad} outside table {table}'s {t.size} rows")
            return np.sort(t.keys[ids])

    def session(self, table: str, session_ids: Sequence[int]) -> Session:
        """The pull sessions a push names (each used once): one session, or the sorted union
        of several (pushes a host's workers summed, --local-aggregate; nothing recorded)."""
        with self.lock:
            entries = [(sid, self._sessions.pop(sid, None)) for sid in session_ids]
        if not entries:
            raise ShardError("a push named no pull session")
        parts = []
        for sid, entry in entries:
            if entry is None:
                raise SessionExpired(f"pull session {sid} is unknown or expired")
            if entry.table != table:
                raise ShardError(f"pull session {sid} was opened on table {entry.table!r}, not {table!r}")
            parts.append(entry)
        if len(parts) == 1:
            return parts[0]
        return Session(table, np.unique(np.concatenate([p.keys for p in parts])), None, ANONYMOUS)

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
        if kind == STATE:
            raise ShardError(f"table {table!r}: state pushes are for dense tables, not sparse ones")
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
        return self.push_as(ANONYMOUS, None, table, keys, values, kind, samples, generation).applied

    def push_as(
        self,
        client: int,
        recorded: Recorded,
        table: str,
        keys: npt.NDArray[np.uint64],
        values: npt.NDArray[np.float64],
        kind: str = GRADIENT,
        samples: int = 0,
        generation: int = 0,
        as_key: npt.NDArray[np.bool_] | None = None,
    ) -> PushOutcome:
        """push() by writer `client`; also returns, per key, whether the client's copy of
        the row is no longer the row once this push lands (SparseTable.conflicts against
        the session's `recorded` sequences, or None for a push that named no session of
        its own; rows admission dropped count too; all False for ANONYMOUS), and the row
        ids of the keys `as_key` marks that do not conflict."""
        self._table(table)
        self.check_keys(keys)
        waited = 0.0
        while True:
            # another client's write lease (write-leases.md) holds this write back until it ends
            with self.lock:
                wait = self.leases.wait_to_write(table, client if kind != GRADIENT else ANONYMOUS)
                if wait <= 0:
                    t = self._table(table)  # a restore while this push waited replaced it
                    out = self._push_locked(client, recorded, t, keys, values, kind, samples, generation, as_key)
                    return out._replace(waited_s=waited) if waited else out
            time.sleep(wait)
            waited += wait

    def _push_locked(
        self,
        client: int,
        recorded: Recorded,
        t: SparseTable,
        keys: npt.NDArray[np.uint64],
        values: npt.NDArray[np.float64],
        kind: str,
        samples: int,
        generation: int,
        as_key: npt.NDArray[np.bool_] | None,
    ) -> PushOutcome:
        """push_as under the lock, no other client's lease held."""
        table = t.name
        self._check_generation(generation)
        named = keys
        conflicts = np.zeros(keys.shape[0], dtype=np.bool_)
        found = None  # the named keys' row ids before the push, when looked up
        if client != ANONYMOUS:
            found = t.find(keys)
            conflicts = t.conflicts(found, client, recorded) | (kind == GRADIENT)
        if self.rows.admits:
            keys, values = self.rows.admit(t, keys, values)
            if keys.shape[0] < named.shape[0]:
                found = None  # ids of other keys than the applied ones
                if client != ANONYMOUS:
                    conflicts |= ~np.isin(named, keys, assume_unique=True)
        try:
            ids = t.apply(kind, keys, values, self.update_seq + 1, client, found)
        except PushRejected as e:
            raise ShardError(str(e)) from None
        self.update_seq += 1
        self.samples[table] = self.samples.get(table, 0) + samples
        self._created.discard(table)
        writer = client if kind != GRADIENT else ANONYMOUS
        self.leases.wrote(table, writer)
        new_ids = np.zeros(0, dtype=np.int64)
        if as_key is not None and client != ANONYMOUS and kind != GRADIENT:
            wanted = as_key & ~conflicts  # conflicting keys include every one admission dropped
            new_ids = ids[wanted] if keys is named else t.find(named[wanted])
        layout, epoch = t.layout, t.epoch  # what the reply speaks of: an eviction below draws new ones
        if self.lifecycle.evicts:  # then no lease is held: WriteLeases(0)
            self.rows.evict(t, self.update_seq)
        return PushOutcome(int(keys.shape[0]), conflicts, new_ids, layout, epoch, self.leases.grant(table, writer))

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
            self._apply_dense(t, kind, values, steps, samples)

    def push_dense_diff(self, table: str, body: bytes, digest: int, samples: int = 0, generation: int = 0) -> None:
        """A STATE write of this range as its difference from the base of `digest`
        (ps.compression.state_diff); refused with BaseMismatch, changing nothing, when this
        range holds anything else."""
        t = self._dense(table)
        with self.lock:
            self._check_generation(generation)
            held = as_fp32_bits(t.state)
            if held is None or base_digest(held) != digest:
                raise BaseMismatch(
                    f"dense table {table!r}: this shard's range is not the base the state difference was taken from"
                )
            self._apply_dense(t, STATE, decode_state_diff(body, held), 1, samples)

    def _apply_dense(self, t: DenseTable, kind: str, values: npt.NDArray[np.float64], steps: int, samples: int) -> None:
        """Under the lock: applies a dense push and counts it, or changes nothing."""
        try:
            t.apply(kind, values, steps)
        except PushRejected as e:
            raise ShardError(str(e)) from None
        self.update_seq += 1
        self.samples[t.name] = self.samples.get(t.name, 0) + samples
        self._created.discard(t.name)

    def export_folder(self, name: str) -> Path:
        return export_folder(self.export_root, name)

    def export(self, full: bool, name: str) -> tuple[list[ExportedFile], int]:
        """Writes this shard's sparse weights (full image, or delta of rows changed since the
        last export) into the folder `name` under the export root."""
        directory = self.export_folder(name)
        with self.lock:
            tables = list(self.sparse.values())
            keys, rows = changed_rows(tables, -1 if full else self.export_seq)
            tombstones = self.rows.take_export_tombstones(tables)
            self.export_seq = self.update_seq
            seq = self.update_seq
        columns = ",".join(f"{t.name}:{t.dim}" for t in tables)
        return [write_export(directory, self.index, full, keys, rows, tombstones, columns)], seq

    def _check_generation(self, generation: int) -> None:
        if generation < self.generation:
            raise StaleGeneration(f"a call from trainer generation {generation}; this shard follows generation {self.generation}")

    def prepare(self, cut: int, offsets: bytes, generation: int = 0) -> int:
        """Phase one of a checkpoint: snapshots, under the lock, the rows changed since the
        last durable cut (every row, every `full_every` cuts) with the trainer's stream
        offsets, and writes them as cut `cut` in the background. Returns the rows in the cut.
        A prepare from an older trainer generation (a late copy of one that passed its
        deadline, after the trainer restored every shard) changes nothing."""
        self.checkpoints.need_store()
        self.checkpoints.wait_writes()  # outside the lock: whether they succeeded decides `since`
        with self.lock:
            self._check_generation(generation)
            since, first, compact = self.checkpoints.begin(cut)
            sparse = {}
            for name, t in self.sparse.items():
                keys, ids = t.updated_after(since)
                sparse[name] = (keys, t.raw_rows(ids))  # copies; in row order (a load sorts)
            # each table's rows in this cut and in all: a load that reads fewer is refused
            tables = {n: {"written": int(sparse[n][0].shape[0]), "rows": int(t.size)} for n, t in self.sparse.items()}
            names = list(self.sparse)
            meta = CutMeta(cut, offsets, self.update_seq, first, dict(self.samples), self.rows.clocks(names), tables)
            snapshot = CutSnapshot(
                meta,
                sparse,
                {name: d.state.copy() for name, d in self.dense.items()},
                {name: self.rows.take_cut_tombstones(t) for name, t in self.sparse.items()},
                self.rows.counters(),
                {name: t.row_words for name, t in self.sparse.items()},
            )
            self.checkpoints.submit(snapshot, compact)
        return snapshot.rows

    def commit(self, cut: int) -> int:
        """Phase two: waits until cut `cut` is written, then makes it the committed cut.
        Returns the rows it holds (0 when it was written before this process started)."""
        written, meta = self.checkpoints.written(cut)
        with self.lock:
            self.checkpoints.commit(meta)
        return written

    def restore(self, cut: int, generation: int, model: ModelIdentity | None = None, replace: bool = False) -> None:
        """Goes back to committed cut `cut` (0: empty tables), dropping newer cuts and every
        change since, and follows trainer generation `generation` from now on. A trainer of
        another model than the one held is refused (ModelMismatch) before anything changes,
        unless it `replace`s it: then every table and cut goes, and the shard holds the new
        model from cut 0. A second restore under the generation the shard already follows
        changes nothing: it is a copy of one that was sent again after a deadline passed,
        and, run late, it would undo the pushes the trainer made after the first one."""
        self.checkpoints.wait_writes()  # a failed cut is dropped below anyway
        with self.lock:
            if generation < self.generation:
                raise StaleGeneration(f"a restore from trainer generation {generation}; this shard follows {self.generation}")
            if generation == self.generation > 0:
                if cut != self.restored_cut:
                    raise StaleGeneration(
                        f"a restore to cut {cut} under trainer generation {generation}, which restored cut {self.restored_cut}"
                    )
                return
            if replace and self._drop_other(model):
                cut = 0
            self._claim(model)
            self.checkpoints.check_restorable(cut)
            # read the cut whole before anything changes: a damaged one is refused (StoreCorrupted);
            # a shard that just loaded the cut (it restarted) holds it already
            image = None if self.checkpoints.holds(cut, self.update_seq) else read_cut(self.store, cut, self.index, self.count)
            if self.store is not None:  # first: a write that fails (a full disk) changes nothing
                self.store.put_generation(generation, cut)
            self.checkpoints.go_back(cut)
            if image is not None:
                self._load(cut, image)
            self._sessions.clear()
            self._created.clear()
            self.leases.clear()  # the clients of the generation before are refused from now on
            self.generation = generation
            self.restored_cut = cut

    def close(self) -> None:
        self.checkpoints.close()

    def cuts(self) -> list[int]:
        """The cuts written to the store and not dropped, oldest first."""
        return self.checkpoints.cuts()

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
                    self.rows.not_admitted.get(n, 0),
                    self.rows.evicted.get(n, 0),
                )
                for n, t in self.sparse.items()
            ]
            out += [
                TableStats(n, "dense", d.hi - d.lo, d.hi - d.lo, 1, d.state.nbytes, d.digest(), self.samples.get(n, 0))
                for n, d in self.dense.items()
            ]
        return out
