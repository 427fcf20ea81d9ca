"""A shard's checkpoint cuts (the protocol is in docs/design/; the layout in
ps/server/store.py): the shard takes each cut's snapshot under its lock, and one background
thread writes the cuts in order, so a cut never stalls training. What is durable advances
only once a cut's write succeeded: the rows of a failed write (a full disk) go into the
next cut. Methods marked "caller holds the lock" run under the shard's lock."""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ctr.routing import dense_range
from ps.server.errors import ShardError
from ps.server.store import CutMeta, ShardStore, StoreCorrupted
from ps.server.tables import DenseTable, SparseTable

log = logging.getLogger("ps")


@dataclass
class CutImage:
    """The tables a store holds at one cut, read whole."""

    meta: CutMeta | None
    sparse: dict[str, SparseTable] = field(default_factory=dict)
    dense: dict[str, DenseTable] = field(default_factory=dict)
    blooms: dict[str, npt.NDArray[np.uint8]] = field(default_factory=dict)


@dataclass
class CutSnapshot:
    """What one cut writes: the rows changed since the last durable cut, the dense states,
    the keys evicted since the last cut, the admission filters."""

    meta: CutMeta
    sparse: dict[str, tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint32]]]
    dense: dict[str, npt.NDArray[np.float64]]
    deleted: dict[str, npt.NDArray[np.uint64]]
    blooms: dict[str, npt.NDArray[np.uint8]]
    row_words: dict[str, int]

    @property
    def rows(self) -> int:
        return sum(int(k.shape[0]) for k, _ in self.sparse.values())


def read_cut(store: ShardStore | None, cut: int, index: int, count: int) -> CutImage:
    """The tables `store` holds at `cut` (0: none) for shard `index` of `count`, read whole
    or not at all: a block that fails its checksum, a block missing, or a table with fewer
    rows than the cut recorded raises StoreCorrupted."""
    meta = store.meta(cut) if store is not None and cut else None
    image = CutImage(meta)
    if store is None or meta is None:
        if cut and store is not None:
            raise StoreCorrupted(f"shard {index}: checkpoint cut {cut} is not in the store at {store.path}")
        return image
    for name in store.table_names():
        spec = store.table_spec(name)
        assert spec is not None
        if spec.kind == "sparse":
            t = SparseTable(spec)
            keys, rows = store.sparse_at(name, t.row_words, cut)
            expected = meta.tables.get(name, {}).get("rows")
            if expected is not None and keys.shape[0] != expected:
                raise StoreCorrupted(
                    f"shard {index}: table {name} reads {keys.shape[0]} rows at cut {cut}, which recorded {expected}"
                )
            t.load_raw(keys, rows)
            image.sparse[name] = t
            counters = store.bloom_at(name, cut)
            if counters is not None:
                image.blooms[name] = counters
        else:
            d = DenseTable(spec, *dense_range(spec.dim, index, count))
            state = store.dense_at(name, d.hi - d.lo, d.width, cut)
            if state is not None:
                d.state = state
                image.dense[name] = d
    return image


class Checkpoints:
    def __init__(self, store: ShardStore | None, index: int, full_every: int) -> None:
        self.store = store
        self.index = index
        self.full_every = full_every
        self.committed = CutMeta(0, b"", 0, True)
        self.last_cut = 0  # the newest cut prepared
        self.last_full = 0
        # rows updated after this are in no cut known to be written
        self.persisted_seq = 0
        self._pending: dict[int, tuple[int, bool]] = {}  # cut -> (its update seq, full?) until its write ends
        self.failed_cuts = 0  # background writes that failed: their rows went into later cuts
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="cut-writer")
        self._writes: dict[int, Future[int]] = {}

    def need_store(self) -> ShardStore:
        if self.store is None:
            raise ShardError("this shard runs without a data directory; nothing to checkpoint into")
        return self.store

    def wait_writes(self) -> None:
        """Waits for every write in flight; call it outside the lock."""
        for pending in list(self._writes.values()):
            pending.exception()

    def begin(self, cut: int) -> tuple[int, bool, bool]:
        """For a new cut `cut`: (the update seq it holds rows changed after, whether it is
        the first cut, whether it is rewritten whole). Caller holds the lock, and waited."""
        if cut <= self.last_cut:
            raise ShardError(f"checkpoint cut {cut} is not newer than this shard's cut {self.last_cut}")
        self.settle()
        first = self.last_full == 0  # every row changed since nothing: a full cut by itself
        compact = not first and cut - self.last_full >= self.full_every
        return (-1 if first else self.persisted_seq), first, compact

    def submit(self, snapshot: CutSnapshot, compact: bool) -> None:
        """Queues the cut's write. Caller holds the lock."""
        store = self.need_store()
        cut = snapshot.meta.cut
        self._pending[cut] = (snapshot.meta.seq, snapshot.meta.full or compact)  # durable once written
        self.last_cut = cut
        self._writes[cut] = self._writer.submit(_write, store, snapshot, compact)

    def settle(self) -> None:
        """Takes in the outcome of finished writes. Caller holds the lock. A written cut
        advances what is durable; a failed one is dropped from the store, whatever part of
        it landed, and its rows stay due for the next cut, which then holds every row
        changed since the last cut written whole."""
        for cut in sorted(self._pending):
            done = self._writes.get(cut)
            if done is None or not done.done():
                continue
            seq, full = self._pending.pop(cut)
            error = done.exception()
            if error is None:
                self.persisted_seq = seq
                if full:
                    self.last_full = cut
                continue
            self.failed_cuts += 1
            log.error("shard %d: checkpoint cut %d was not written (%s); its rows go into the next cut", self.index, cut, error)
            if self.store is not None:
                good = max((m.cut for m in self.store.metas() if m.cut < cut), default=0)
                try:
                    self.store.drop_cuts_after(good)
                except Exception as e:  # noqa: BLE001 - the disk may still be full: the cut is refused at load anyway
                    log.warning("shard %d: the remains of cut %d stay in the store for now: %s", self.index, cut, e)

    def written(self, cut: int) -> tuple[int, CutMeta]:
        """Waits until cut `cut` is written (a failed write raises): the rows it holds (0
        when it was written before this process started) and its record. Outside the lock."""
        store = self.need_store()
        pending = self._writes.get(cut)
        written = pending.result() if pending is not None else 0
        meta = store.meta(cut)
        if meta is None:
            raise ShardError(f"checkpoint cut {cut} was never prepared on this shard")
        return written, meta

    def commit(self, meta: CutMeta) -> None:
        """Makes the written cut `meta` the committed one. Caller holds the lock."""
        store = self.need_store()
        if meta.cut < self.committed.cut:  # a late copy of a commit sent again: a newer cut stands
            return
        self.settle()  # this cut's write succeeded: what it holds is durable
        if meta.cut > self.committed.cut or store.committed() != meta.cut:
            store.commit(meta.cut)
            self.committed = meta
        for c in [c for c in self._writes if c <= meta.cut]:
            del self._writes[c]

    def check_restorable(self, cut: int) -> None:
        """Refuses a restore to a cut this shard does not hold. Caller holds the lock."""
        if self.store is not None:
            if cut and self.store.meta(cut) is None:
                raise ShardError(f"checkpoint cut {cut} is not stored on this shard")
        elif cut:
            raise ShardError("this shard runs without a data directory; it holds no cut to restore")
        self.settle()

    def holds(self, cut: int, update_seq: int) -> bool:
        """The shard is exactly at committed cut `cut` (it just loaded it): a restore to it
        needs no read."""
        return 0 < cut == self.committed.cut == self.last_cut and update_seq == self.persisted_seq

    def go_back(self, cut: int) -> None:
        """Drops the cuts newer than `cut` and commits it. Caller holds the lock."""
        if self.store is not None:
            self.store.drop_cuts_after(cut)
            if cut and self.store.committed() != cut:
                self.store.commit(cut)
        self._writes.clear()

    def drop_everything(self) -> None:
        """Another model replaces this one: no cut is left. Caller holds the lock."""
        if self.store is not None:
            self.store.drop_everything()
        self.last_cut, self.last_full = 0, 0
        self._writes.clear()

    def loaded(self, cut: int, meta: CutMeta | None) -> None:
        """The shard now holds cut `cut` as read (`meta`; none for 0). Caller holds the lock."""
        self.committed = meta or CutMeta(0, b"", 0, True)
        if self.store is not None and meta is not None:
            self.last_full = max((m.cut for m in self.store.metas() if m.full and m.cut <= cut), default=0)
        else:
            self.last_full = 0
        self.persisted_seq = self.committed.seq
        self._pending.clear()
        self.last_cut = cut

    def cuts(self) -> list[int]:
        """The cuts written to the store and not dropped, oldest first."""
        return [] if self.store is None else [m.cut for m in self.store.metas()]

    def close(self) -> None:
        self._writer.shutdown(wait=True)


def _write(store: ShardStore, snapshot: CutSnapshot, compact: bool) -> int:
    """The writer thread: the cut's changed rows and evicted keys, then (every full_every
    cuts) the cut rewritten whole from the store's chain."""
    written = store.write_cut(snapshot.meta, snapshot.sparse, snapshot.dense, snapshot.deleted, snapshot.blooms)
    if compact:
        store.make_full(snapshot.meta.cut, snapshot.row_words)
    return written
