"""The pull cache (docs/design/pull-cache.md): a client that keeps the rows it pulled, as
the shards hold them, sends the row ids of the rows it knows instead of their keys and gets
back only rows that are new to it, that another writer changed, or whose copy it dropped
(sent as ids marked stale). Its pushes carry its
writer id; their replies say which copies no longer mirror the shard, and the rest take the
push's decoded delta as the shard did (row + delta), so one client alone stays bit-identical.

A pull that overlaps one of this client's pushes of the same keys cannot tell whether the
rows it read include that push, so it keeps none of them (`flying`).

Thread-safe: the trainer's pipeline pulls batch i+1 while batch i pushes; every copy is
read and changed under one lock, never across a shard call."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import numpy.typing as npt

from ctr.data.unique import stable_order
from ctr.model.optim import init_rows
from ctr.model.spec import TableSpec
from ps.api import DELTA, KnownRows, PushAck
from ps.client.kept_rows import KeptRows
from ps.compression.payload import Compressed
from ps.transport import FanOut, ShardTransport

Keys = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

DEFAULT_KEPT_ROWS = 1 << 22  # rows a client keeps per table; past it the table starts over
KEPT_BYTES = 1 << 30  # and at most this much state per table: FFM rows can be kilobytes
RECENT_PUSHES = 64  # pushes remembered for the pulls they overlapped
FRESH_SESSIONS = 64  # kept pulls remembered for the pushes that name them
# of a kept pull: the keys sent as keys, the rows read for them, and whether no push of this
# client's overlapped the read
Fresh = tuple[Keys, F64, npt.NDArray[np.bool_]]


class PullCache:
    """Off until `keep(max_rows)`; then state pulls of the sparse tables it `know`s keep
    their rows."""

    def __init__(self, transport: ShardTransport, shard_count: int, on_shards: FanOut) -> None:
        self.transport = transport
        self.n = shard_count
        self.on_shards = on_shards
        self.max_rows = 0
        self.client_id = int.from_bytes(os.urandom(8), "little") >> 1 or 1  # the writer id pushes carry
        self._specs: dict[str, TableSpec] = {}
        self._kept: dict[str, KeptRows] = {}
        self._lock = threading.Lock()
        self._push_numbers = itertools.count(1)
        self._next_push = 1
        self._in_flight: dict[int, tuple[str, Keys]] = {}
        self._recent: deque[tuple[int, str, Keys]] = deque(maxlen=RECENT_PUSHES)
        # per (table, shard, session): the keys a kept pull sent as keys, with the rows it read
        # for them, for the push that names the session to keep (what the shard then holds)
        self._fresh: dict[tuple[str, int, int], Fresh] = {}
        # per (table, shard): the latest table epoch a push's reply named, and the write lease
        # held (when it ends on this client's clock, the epoch it was granted at)
        self._epochs: dict[tuple[str, int], int] = {}
        self._leases: dict[tuple[str, int], tuple[float, int]] = {}
        self.counts = {
            "kept_rows_sent_as_ids": 0,
            "kept_rows_stale": 0,  # of those, ids whose copy the client had dropped
            "kept_rows_changed": 0,
            "rows_pulled": 0,
            "initial_rows_made": 0,
            "rows_pushed_as_ids": 0,  # rows of pushes with no session (drains) named by row id
            "row_ids_moved": 0,  # such pushes a shard refused: its rows had moved
            "pulls_leased": 0,  # shard parts of pulls a write lease made unnecessary
            "rows_leased": 0,  # the rows those read from their copies
        }

    def know(self, spec: TableSpec) -> None:
        self._specs[spec.name] = spec

    def keep(self, max_rows: int = DEFAULT_KEPT_ROWS) -> None:
        self.max_rows = max_rows

    def stop(self) -> None:
        """Keeps nothing from now on (local aggregation: the leader pushes the host's sums,
        so no client's copy follows its own pushes)."""
        self.max_rows = 0
        self.forget()

    @property
    def on(self) -> bool:
        return self.max_rows > 0

    def keeping(self, table: str) -> bool:
        return self.max_rows > 0 and table in self._specs

    def writer(self, table: str, kind: str) -> int:
        """The writer id a push of this table and kind carries (0: none; only state deltas
        keep copies, gradients are stepped on the shard)."""
        return self.client_id if kind == DELTA and self.keeping(table) else 0

    def _table(self, table: str) -> KeptRows:
        kept = self._kept.get(table)
        if kept is None:
            width = self._specs[table].width
            kept = self._kept[table] = KeptRows(width, self.n, min(self.max_rows, KEPT_BYTES // (8 * width)))
        return kept

    @contextmanager
    def flying(self, table: str, keys: Keys) -> Iterator[None]:
        """A push of these keys is on its way: a pull that overlaps it keeps none of them."""
        with self._lock:
            number = next(self._push_numbers)
            self._next_push = number + 1
            self._in_flight[number] = (table, keys)
            self._recent.append((number, table, keys))
        try:
            yield
        finally:
            with self._lock:
                del self._in_flight[number]

    def _overlapping(self, table: str, first: int, flying: list[Keys]) -> Keys | None:
        """Keys of the pushes in flight when a pull was sent (`flying`) or started since
        (number >= first); None when those are no longer all remembered. Caller holds the lock."""
        if self._recent and self._recent[0][0] > first and self._next_push > first:
            return None
        later = [k for n, t, k in self._recent if n >= first and t == table]
        parts = flying + later
        if len(parts) == 1:
            return parts[0]  # sorted and unique already
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.uint64)

    def pull(self, table: str, keys: Keys, order: I64, bounds: I64, codec: str) -> tuple[F64, tuple[int, ...]]:
        """A state pull that sends only the keys this client does not hold and the row ids
        of those it does; rows come back for the former (stored ones: absent keys read as
        their initial rows, made here) and for the latter another writer changed. `order`
        and `bounds` split the keys by shard. Returns the rows and each shard's session."""
        spec = self._specs[table]
        kept = self._table(table)
        with self._lock:
            first = self._next_push
            flying = [k for t, k in self._in_flight.values() if t == table]

        def one(s: int) -> tuple[int, F64]:
            part = keys[order[bounds[s] : bounds[s + 1]]]
            if part.shape[0] == 0:
                return 0, np.zeros((0, spec.width))
            with self._lock:  # the copies read now: a row this shard's reply does not send is unchanged
                leased = self._leased_copies(table, s, kept, part)
                if leased is not None:  # no session: the push names the rows by id
                    self.counts["pulls_leased"] += 1
                    self.counts["rows_leased"] += int(part.shape[0])
                    return 0, leased
                known, fresh, ids, copies = kept.take(part)
                layout = kept.layouts[s]
            by_id = stable_order(ids)  # row ids >= 0, unique
            stale = ~fresh[by_id]  # ids whose copy is gone: the shard sends them whole
            asked = KnownRows(self.client_id, layout, ids[by_id], stale if stale.any() else None)
            got = self.transport.pull_known(s, table, part[~known], asked, codec)
            # rows moved on the shard (or it did not send every stale row, as a shard that
            # predates the flags would not): every key of this part travels
            if got.stale or not bool(np.all(got.changed[stale])):
                with self._lock:
                    kept.drop_shard(s)
                    self._end_leases(table, s)
                    kept.layouts[s] = got.layout if got.stale else layout
                known = np.zeros(part.shape[0], dtype=np.bool_)
                by_id = ids = np.zeros(0, dtype=np.int64)
                stale = np.zeros(0, dtype=np.bool_)
                copies = np.zeros((0, spec.width))
                got = self.transport.pull_known(s, table, part, KnownRows(self.client_id, kept.layouts[s], ids), codec)
            held_at = np.flatnonzero(known)[by_id]  # in the order of the ids sent
            new_at = np.flatnonzero(~known)
            rows = np.empty((part.shape[0], spec.width), dtype=np.float64)
            stored_at, made_at, changed_at = new_at[got.stored], new_at[~got.stored], held_at[got.changed]
            rows[known] = copies  # a stale copy is replaced below: the shard sent its row
            # one worker's usual pull changes no row and makes none: those steps are skipped
            if changed_at.shape[0]:
                rows[changed_at] = got.changed_rows
            rows[stored_at] = got.stored_rows
            if made_at.shape[0]:
                rows[made_at] = init_rows(part[made_at], spec.width, spec.dim, spec.optimizer.params())
            with self._lock:
                if got.layout != kept.layouts[s]:
                    # the shard's rows moved since the ids this client holds there (a pull that
                    # named none of them, so the shard could not answer `stale`): none holds
                    kept.drop_shard(s)
                    self._end_leases(table, s)
                    kept.layouts[s] = got.layout
                overlap = self._overlapping(table, first, flying)
                sure = np.zeros(part.shape[0], dtype=np.bool_) if overlap is None else ~among(part, overlap)
                if stored_at.shape[0]:
                    new_sure = sure[stored_at]
                    kept.store(part[stored_at[new_sure]], got.stored_ids[new_sure], got.stored_rows[new_sure])
                if changed_at.shape[0]:
                    kept.update(part[changed_at[sure[changed_at]]], got.changed_rows[sure[changed_at]])
                    # a returned row an overlapping push may or may not include: not kept (a held
                    # row that did not travel keeps its copy, which that push's reply updates)
                    kept.invalidate(part[changed_at[~sure[changed_at]]])
                kept.layouts[s] = got.layout
                self._fresh[(table, s, got.session_id)] = (part[new_at], rows[new_at], sure[new_at])
                while len(self._fresh) > FRESH_SESSIONS:  # sessions never pushed (a pipeline abandoned)
                    del self._fresh[next(iter(self._fresh))]
                c = self.counts
                c["kept_rows_sent_as_ids"] += int(held_at.shape[0])
                c["kept_rows_stale"] += int(stale.sum())
                c["kept_rows_changed"] += int(changed_at.shape[0])
                c["rows_pulled"] += int(stored_at.shape[0] + changed_at.shape[0])
                c["initial_rows_made"] += int(made_at.shape[0])
            return got.session_id, rows

        results = self.on_shards(one)
        rows = np.zeros((keys.shape[0], spec.width), dtype=np.float64)
        for s, (_, r) in enumerate(results):
            if r.shape[0]:
                rows[order[bounds[s] : bounds[s + 1]]] = r
        return rows, tuple(sid for sid, _ in results)

    def _leased_copies(self, table: str, shard: int, kept: KeptRows, keys: Keys) -> F64 | None:
        """The copies of one shard's part of a pull when a write lease makes the pull
        unnecessary (docs/design/write-leases.md): the lease runs, was granted at the latest
        epoch any reply named, and every copy is the row at that epoch. Caller holds the lock."""
        lease = self._leases.get((table, shard))
        if lease is None or lease[0] <= time.monotonic() or lease[1] != self._epochs.get((table, shard)):
            return None
        return kept.leased(keys, lease[1])

    def _lease_from(self, table: str, shard: int, ack: PushAck, sent_at: float) -> None:
        """Notes a push reply's epoch and lease. A lease counts from when the push was sent,
        so it ends here no later than on the shard. Caller holds the lock."""
        key = (table, shard)
        latest = max(self._epochs.get(key, 0), ack.epoch)
        self._epochs[key] = latest
        if ack.lease_s <= 0 or sent_at <= 0 or ack.epoch != latest:
            return
        until = sent_at + ack.lease_s
        held = self._leases.get(key)
        if held is None or held[1] != latest or held[0] < until:
            self._leases[key] = (until, latest)

    def _end_leases(self, table: str | None = None, shard: int | None = None) -> None:
        """Forgets leases and epochs (copies dropped; a restarted shard's epochs start anew).
        Caller holds the lock."""
        for key in [k for k in self._epochs if (table is None or k[0] == table) and (shard is None or k[1] == shard)]:
            del self._epochs[key]
            self._leases.pop(key, None)

    def landed(
        self,
        table: str,
        shard: int,
        named: Keys,
        packed: Compressed,
        ack: PushAck | None,
        session: int = 0,
        sent_at: float = 0.0,
    ) -> None:
        """A push of this client's landed: its kept copies of the rows it changed take the
        delta as the shard did, or are dropped where the shard says they are not the rows;
        rows its pull read for keys it held no copy of are kept from now on, with the push's
        delta, when the shard gave their ids (the pull read them with no push of this
        client's in flight, so what it read plus this delta is the row). The copies it
        leaves are the rows at the reply's epoch; a lease in the reply is held from `sent_at`
        (time.monotonic() when the push was sent)."""
        if ack is None:
            return
        assert packed.values is not None, "the encoder keeps the values it sent"
        values = packed.values  # as the encoder made them: what the shard decodes, bit for bit
        subset = packed.sent if packed.count != named.shape[0] else None
        keys = named if subset is None else named[subset]
        bad = ack.conflicts if subset is None else ack.conflicts[subset]
        with self._lock:
            kept = self._table(table)
            self._lease_from(table, shard, ack, sent_at)
            kept.landed(keys, values, bad, ack.epoch)
            fresh = self._fresh.pop((table, shard, session), None) if session else None
            if fresh is None or not ack.new_ids.shape[0] or ack.layout != kept.layouts[shard]:
                return
            sent_as_keys, read, sure = fresh
            listed = among(keys, sent_as_keys) & ~bad  # the keys new_ids speaks of
            if int(listed.sum()) != ack.new_ids.shape[0]:
                return  # not the session the reply speaks of: keep nothing
            at = np.searchsorted(sent_as_keys, keys[listed])
            held = kept.held(keys[listed])
            take = (ack.new_ids >= 0) & sure[at] & ~held
            rows = read[at[take]] + values[listed][take]  # the shard's arithmetic: row + delta
            kept.store(keys[listed][take], ack.new_ids[take], rows, ack.epoch)

    def row_ids(self, table: str, shard: int, keys: Keys) -> tuple[I64, int]:
        """(the row id of each of these keys of one shard, -1 where unknown; the layout the
        ids belong to): a push with no session can name its rows by them."""
        if not self.keeping(table):
            return np.full(keys.shape[0], -1, dtype=np.int64), 0
        with self._lock:
            kept = self._table(table)
            return kept.ids_of(np.ascontiguousarray(keys, dtype=np.uint64)), kept.layouts[shard]

    def count(self, name: str, n: int) -> None:
        with self._lock:
            self.counts[name] += n

    def forget_ids(self, table: str, shard: int) -> None:
        """The shard's rows moved since the ids this client holds: its copies go too."""
        with self._lock:
            self._table(table).drop_shard(shard)
            self._end_leases(table, shard)
            self.counts["row_ids_moved"] += 1

    def forget(self) -> None:
        """Drops every row kept (the shards went back to a cut)."""
        with self._lock:
            for kept in self._kept.values():
                kept.clear()
            self._fresh.clear()
            self._end_leases()

    def stats(self) -> dict[str, float]:
        """What the cache saved and held, for the trainer's summary (empty while off)."""
        if not self._kept:
            return {}
        with self._lock:
            out = {k: float(v) for k, v in self.counts.items()}
            out["kept_rows"] = float(sum(k.size for k in self._kept.values()))
            out["kept_restarts"] = float(sum(k.restarts for k in self._kept.values()))
        return out


def among(keys: Keys, sorted_keys: Keys) -> npt.NDArray[np.bool_]:
    """Which keys are in sorted_keys (sorted, unique): a binary search each, where np.isin
    would sort both."""
    if sorted_keys.shape[0] == 0:
        return np.zeros(keys.shape[0], dtype=np.bool_)
    pos = np.minimum(np.searchsorted(sorted_keys, keys), sorted_keys.shape[0] - 1)
    return sorted_keys[pos] == keys  # type: ignore[no-any-return]
