"""PS client library: splits a batch's keys by shard and talks to all shards in parallel
through one transport. Every method blocks until all shards have answered. Calls may run
from several threads at once (the trainer's pipeline pulls and pushes concurrently): the
split is pure, the shard calls go through a thread pool, and the transports are thread-safe.

    pull(table, keys)                 -> weights [n, dim]
    pull(table, keys, state=True)     -> optimizer state [n, width] (float64)
    push(table, keys, grads)          -> the shard steps its optimizer once per row
    push(table, keys, deltas, kind="delta") -> the shard adds the state change
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from ctr.model.optim import init_rows
from ctr.model.spec import TableSpec
from ctr.routing import dense_range, shard_of
from ps.api import (
    DELTA,
    GRADIENT,
    MOMENTUM,
    ExportedFile,
    KnownRows,
    ModelIdentity,
    ModelMismatch,
    PushAck,
    Rows,
    SessionLost,
    ShardRestarted,
    ShardStatus,
    StoppedWhileUnreachable,
)
from ps.client.control import ControlPlane
from ps.client.kept_rows import KeptRows
from ps.client.local_aggregate import AggregationPlan, LocalAggregator
from ps.compression.compressor import CodecSpec, Compressor, parse_codec
from ps.compression.payload import VALUE_CODECS, Compressed, value_codec
from ps.transport import ShardTransport, WireLedger

if TYPE_CHECKING:
    from ps.server.lifecycle import Lifecycle
    from ps.server.local_server import LocalServers

EXPORT_DRAIN_CODEC = "bf16"  # residuals sent before an export: fp32's range, a quarter of fp64's bytes

__all__ = [
    "DELTA",
    "GRADIENT",
    "MOMENTUM",
    "VALUE_CODECS",
    "AggregationPlan",
    "ExportedFile",
    "ModelIdentity",
    "ModelMismatch",
    "PSClient",
    "PullSession",
    "ShardRestarted",
    "ShardStatus",
    "StoppedWhileUnreachable",
    "parse_codec",
]

T = TypeVar("T")
DEFAULT_RESIDUAL_ROWS = 1 << 20
DEFAULT_KEPT_ROWS = 1 << 22  # rows a client keeps per table (pull-cache.md); past it the table starts over
KEPT_BYTES = 1 << 30  # and at most this much state per table: FFM rows can be kilobytes
RECENT_PUSHES = 64  # pushes remembered for the pulls they overlapped
FRESH_SESSIONS = 64  # kept pulls remembered for the pushes that name them
# of a kept pull: the keys sent as keys, the rows read for them, and whether no push of this
# client's overlapped the read
Fresh = tuple[npt.NDArray[np.uint64], npt.NDArray[np.float64], npt.NDArray[np.bool_]]


@dataclass(frozen=True)
class PullSession:
    """What a pull leaves for the matching push: the split and each shard's session id."""

    keys: npt.NDArray[np.uint64]
    order: npt.NDArray[np.int64]
    bounds: npt.NDArray[np.int64]
    session_ids: tuple[int, ...]


class PSClient:
    """push_codec: the compressor spec of sparse pushes (ps.compression.compressor), or
    "auto" (or "none"): the uncompressed protocol, fp64 for state deltas (accumulators need
    every digit), fp32 for gradients (why not 1-bit: docs/design/wire-bytes.md).
    residual_rows caps each table's error-feedback memory. pull_codec: the value codec
    sparse pull replies travel in ("auto": raw fp32 weights, fp64 state)."""

    def __init__(
        self,
        transport: ShardTransport,
        shard_count: int,
        push_codec: str = "auto",
        residual_rows: int = DEFAULT_RESIDUAL_ROWS,
        seed: int = 0,
        pull_codec: str = "auto",
    ) -> None:
        self.transport = transport
        self.n = shard_count
        self.push_codec = None if push_codec in ("auto", "none") else parse_codec(push_codec)
        self.pull_codec = "" if pull_codec == "auto" else value_codec(pull_codec).name
        self.residual_rows = residual_rows
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self.compressors: dict[str, Compressor] = {}
        self._kinds: dict[str, str] = {}  # what each table's pushes carry
        self._dense_residual: dict[str, npt.NDArray[np.float64]] = {}  # error feedback of 1-bit dense pushes
        self.rows_may_drop = False  # a shard admits or evicts rows (known from the last status())
        self.pool = ThreadPoolExecutor(max_workers=max(1, shard_count))
        self._dense_len: dict[str, int] = {}
        self.aggregator: LocalAggregator | None = None  # --local-aggregate
        self._control: ControlPlane | None = None
        # rows kept between pulls (docs/design/pull-cache.md), off until keep_rows()
        self.kept_max = 0
        self.client_id = int.from_bytes(os.urandom(8), "little") >> 1 or 1  # the writer id pushes carry
        self._specs: dict[str, TableSpec] = {}
        self._kept: dict[str, KeptRows] = {}
        self._kept_lock = threading.Lock()
        self._push_numbers = itertools.count(1)
        self._next_push = 1
        self._in_flight: dict[int, tuple[str, npt.NDArray[np.uint64]]] = {}
        self._recent: deque[tuple[int, str, npt.NDArray[np.uint64]]] = deque(maxlen=RECENT_PUSHES)
        # per (table, shard, session): the keys a kept pull sent as keys, with the rows it read
        # for them, for the push that names the session to keep (what the shard then holds)
        self._fresh: dict[tuple[str, int, int], Fresh] = {}
        self.kept_stats = {"kept_rows_sent_as_ids": 0, "kept_rows_changed": 0, "rows_pulled": 0, "initial_rows_made": 0}

    @classmethod
    def connect(
        cls,
        addresses: list[str],
        push_codec: str = "auto",
        residual_rows: int = DEFAULT_RESIDUAL_ROWS,
        seed: int = 0,
        pull_codec: str = "auto",
        retry_s: float = 0.0,
        stopping: Callable[[], bool] = lambda: False,
        call_timeout_s: float = 60.0,
    ) -> PSClient:
        """Shard processes over gRPC; a call to an unreachable shard retries for retry_s, or
        until stopping() (then StoppedWhileUnreachable); a call unanswered after
        call_timeout_s is retried too when sending it twice changes nothing, and otherwise
        raises ShardRestarted (every shard goes back to the last cut)."""
        from ps.client.grpc_transport import GrpcTransport  # gRPC loads only for shard processes

        transport = GrpcTransport(addresses, timeout=call_timeout_s, retry_s=retry_s, stopping=stopping)
        return cls(transport, len(addresses), push_codec, residual_rows, seed, pull_codec)

    @classmethod
    def local(
        cls,
        shard_count: int = 1,
        push_codec: str = "auto",
        residual_rows: int = DEFAULT_RESIDUAL_ROWS,
        seed: int = 0,
        pull_codec: str = "auto",
        data_dir: Path | None = None,
        lifecycle: Lifecycle | None = None,
        export_root: Path | None = None,
    ) -> PSClient:
        """In-process shards behind the same API (`--ps local`), each with a RocksDB store
        under data_dir/ps{i} when given (checkpoint cuts, as shard processes keep them) and
        the row lifecycle given."""
        # the server side loads only for in-process shards: a client of shard processes needs none of it
        from ps.server.local_transport import LocalTransport
        from ps.server.shard import Shard
        from ps.server.store import ShardStore

        stores = [ShardStore(data_dir / f"ps{i}") if data_dir else None for i in range(shard_count)]
        shards = [Shard(i, shard_count, stores[i], lifecycle=lifecycle, export_root=export_root) for i in range(shard_count)]
        return cls(LocalTransport(shards), shard_count, push_codec, residual_rows, seed, pull_codec)

    def serve_local(self) -> LocalServers:
        """Serves in-process shards over gRPC on 127.0.0.1 (free ports), so worker processes
        can share them (`--ps local --workers W`)."""
        if self.remote:
            raise RuntimeError("only in-process shards can be served")
        from ps.server.local_server import serve_shards  # gRPC servicer code loads only when asked for
        from ps.server.local_transport import LocalTransport

        assert isinstance(self.transport, LocalTransport)

        return serve_shards(self.transport.shards)

    @property
    def control(self) -> ControlPlane:
        """The coordinator's calls: declare, export, checkpoint cuts, restore, status."""
        if self._control is None:
            self._control = ControlPlane(self)
        return self._control

    @property
    def remote(self) -> bool:
        """Whether calls cross a network (gRPC), so overlapping them with work pays."""
        return self.transport.remote

    @property
    def pull_bytes(self) -> int:
        return self.transport.pull_bytes

    @property
    def push_bytes(self) -> int:
        return self.transport.push_bytes

    def know(self, specs: list[TableSpec]) -> None:
        """Remembers the dense tables' lengths (a worker that did not declare them learns
        them here), so dense calls skip the shards that hold none of a vector."""
        for spec in specs:
            if spec.kind == "dense":
                self._dense_len[spec.name] = spec.dim
            else:
                self._specs[spec.name] = spec

    def keep_rows(self, max_rows: int = DEFAULT_KEPT_ROWS) -> None:
        """From now on, state pulls of known sparse tables keep their rows on this client
        (docs/design/pull-cache.md): a row travels when this client does not hold it or
        another writer changed it. Not under local aggregation (the leader pushes the
        host's sums, so no client's copy follows its own pushes)."""
        self.kept_max = max_rows

    def _keeping(self, table: str) -> bool:
        return self.kept_max > 0 and self.aggregator is None and table in self._specs

    def _kept_table(self, table: str) -> KeptRows:
        kept = self._kept.get(table)
        if kept is None:
            width = self._specs[table].width
            kept = self._kept[table] = KeptRows(width, self.n, min(self.kept_max, KEPT_BYTES // (8 * width)))
        return kept

    @contextmanager
    def _flying(self, table: str, keys: npt.NDArray[np.uint64]) -> Iterator[None]:
        """A push of these keys is on its way: a pull that overlaps it cannot tell whether
        its rows include it, so it keeps none of them."""
        with self._kept_lock:
            number = next(self._push_numbers)
            self._next_push = number + 1
            self._in_flight[number] = (table, keys)
            self._recent.append((number, table, keys))
        try:
            yield
        finally:
            with self._kept_lock:
                del self._in_flight[number]

    def _overlapping(self, table: str, first: int, flying: list[npt.NDArray[np.uint64]]) -> npt.NDArray[np.uint64] | None:
        """Keys of the pushes in flight when a pull was sent (`flying`) or started since
        (number >= first); None when those are no longer all remembered. Caller holds the lock."""
        if self._recent and self._recent[0][0] > first and self._next_push > first:
            return None
        later = [k for n, t, k in self._recent if n >= first and t == table]
        parts = flying + later
        if len(parts) == 1:
            return parts[0]  # sorted and unique already
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.uint64)

    def _dense_shards(self, table: str) -> list[int]:
        length = self._dense_len.get(table)
        return list(range(self.n)) if length is None else _holding(length, self.n)

    def close(self) -> None:
        self.pool.shutdown()
        self.transport.close()

    def on_shards(self, fn: Callable[[int], T], shards: list[int] | None = None) -> list[T]:
        targets = list(range(self.n)) if shards is None else shards
        if len(targets) == 1:
            return [fn(targets[0])]
        return list(self.pool.map(fn, targets))

    def _split(self, keys: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        owner = shard_of(keys, self.n)
        order = np.argsort(owner, kind="stable")  # stable keeps each shard's keys sorted
        bounds = np.searchsorted(owner[order], np.arange(self.n + 1))
        return order, bounds

    def pull(
        self, table: str, keys: npt.NDArray[np.uint64], session: bool = True, state: bool = False
    ) -> tuple[Rows, PullSession]:
        """Rows for sorted unique keys, and the session a following push may name."""
        if state and session and self._keeping(table):
            return self._pull_kept(table, keys)
        order, bounds = self._split(keys)

        def one(s: int) -> tuple[int, Rows]:
            part = keys[order[bounds[s] : bounds[s + 1]]]
            if part.shape[0] == 0:
                return 0, np.zeros((0, 0), dtype=np.float32)
            return self.transport.pull(s, table, part, session, state, self.pull_codec)

        results = self.on_shards(one)
        dim = max((r.shape[1] for _, r in results if r.shape[0]), default=1)
        rows = np.zeros((keys.shape[0], dim), dtype=np.float64 if state else np.float32)
        for s, (_, r) in enumerate(results):
            if r.shape[0]:
                rows[order[bounds[s] : bounds[s + 1]]] = r
        return rows, PullSession(keys, order, bounds, tuple(sid for sid, _ in results))

    def _pull_kept(self, table: str, keys: npt.NDArray[np.uint64]) -> tuple[Rows, PullSession]:
        """A state pull that sends only the keys this client does not hold and the row ids
        of those it does; rows come back for the former (stored ones: absent keys read as
        their initial rows, made here) and for the latter another writer changed."""
        spec = self._specs[table]
        params = spec.optimizer.params()
        order, bounds = self._split(keys)
        kept = self._kept_table(table)
        with self._kept_lock:
            first = self._next_push
            flying = [k for t, k in self._in_flight.values() if t == table]

        def one(s: int) -> tuple[int, npt.NDArray[np.float64]]:
            part = keys[order[bounds[s] : bounds[s + 1]]]
            if part.shape[0] == 0:
                return 0, np.zeros((0, spec.width))
            with self._kept_lock:  # the copies read now: a row this shard's reply does not send is unchanged
                held, ids, copies = kept.take(part)
                layout = kept.layouts[s]
            known = KnownRows(self.client_id, layout, np.sort(ids))
            got = self.transport.pull_known(s, table, part[~held], known, self.pull_codec)
            if got.stale:  # rows moved on the shard: every key of this part travels
                with self._kept_lock:
                    kept.drop_shard(s)
                    kept.layouts[s] = got.layout
                held = np.zeros(part.shape[0], dtype=np.bool_)
                ids = np.zeros(0, dtype=np.int64)
                copies = np.zeros((0, spec.width))
                got = self.transport.pull_known(s, table, part, KnownRows(self.client_id, got.layout, ids), self.pull_codec)
            held_at = np.flatnonzero(held)[np.argsort(ids, kind="stable")]  # in the order of the ids sent
            new_at = np.flatnonzero(~held)
            rows = np.empty((part.shape[0], spec.width), dtype=np.float64)
            stored_at, made_at, changed_at = new_at[got.stored], new_at[~got.stored], held_at[got.changed]
            rows[held] = copies
            rows[changed_at] = got.changed_rows
            rows[stored_at] = got.stored_rows
            rows[made_at] = init_rows(part[made_at], spec.width, spec.dim, params)
            with self._kept_lock:
                overlap = self._overlapping(table, first, flying)
                sure = np.zeros(part.shape[0], dtype=np.bool_) if overlap is None else ~_among(part, overlap)
                kept.store(part[stored_at[sure[stored_at]]], got.stored_ids[sure[stored_at]], got.stored_rows[sure[stored_at]])
                kept.update(part[changed_at[sure[changed_at]]], got.changed_rows[sure[changed_at]])
                # a returned row an overlapping push may or may not include: not kept (a held
                # row that did not travel keeps its copy, which that push's reply updates)
                kept.invalidate(part[changed_at[~sure[changed_at]]])
                kept.layouts[s] = got.layout
                self._fresh[(table, s, got.session_id)] = (part[new_at], rows[new_at], sure[new_at])
                while len(self._fresh) > FRESH_SESSIONS:  # sessions never pushed (a pipeline abandoned)
                    del self._fresh[next(iter(self._fresh))]
                st = self.kept_stats
                st["kept_rows_sent_as_ids"] += int(held_at.shape[0])
                st["kept_rows_changed"] += int(changed_at.shape[0])
                st["rows_pulled"] += int(stored_at.shape[0] + changed_at.shape[0])
                st["initial_rows_made"] += int(made_at.shape[0])
            return got.session_id, rows

        results = self.on_shards(one)
        rows = np.zeros((keys.shape[0], spec.width), dtype=np.float64)
        for s, (_, r) in enumerate(results):
            if r.shape[0]:
                rows[order[bounds[s] : bounds[s + 1]]] = r
        return rows, PullSession(keys, order, bounds, tuple(sid for sid, _ in results))

    def _landed(
        self,
        table: str,
        shard: int,
        named: npt.NDArray[np.uint64],
        packed: Compressed,
        ack: PushAck | None,
        session: int = 0,
    ) -> None:
        """A push of this client's landed: its kept copies of the rows it changed take the
        delta as the shard did, or are dropped where the shard says they are not the rows;
        rows its pull read for keys it held no copy of are kept from now on, with the push's
        delta, when the shard gave their ids (the pull read them with no push of this
        client's in flight, so what it read plus this delta is the row)."""
        if ack is None:
            return
        assert packed.values is not None, "the encoder keeps the values it sent"
        values = packed.values  # as the encoder made them: what the shard decodes, bit for bit
        subset = packed.sent if packed.count != named.shape[0] else None
        keys = named if subset is None else named[subset]
        bad = ack.conflicts if subset is None else ack.conflicts[subset]
        with self._kept_lock:
            kept = self._kept_table(table)
            kept.landed(keys, values, bad)
            fresh = self._fresh.pop((table, shard, session), None) if session else None
            if fresh is None or not ack.new_ids.shape[0] or ack.layout != kept.layouts[shard]:
                return
            sent_as_keys, read, sure = fresh
            listed = _among(keys, sent_as_keys) & ~bad  # the keys new_ids speaks of
            if int(listed.sum()) != ack.new_ids.shape[0]:
                return  # not the session the reply speaks of: keep nothing
            at = np.searchsorted(sent_as_keys, keys[listed])
            held = kept.held(keys[listed])
            take = (ack.new_ids >= 0) & sure[at] & ~held
            rows = read[at[take]] + values[listed][take]  # the shard's arithmetic: row + delta
            kept.store(keys[listed][take], ack.new_ids[take], rows)

    def push(
        self,
        table: str,
        keys: npt.NDArray[np.uint64],
        grads: Rows,
        session: PullSession | None = None,
        kind: str = GRADIENT,
        samples: int = 0,
    ) -> None:
        """Pushes per-key gradients (or state deltas with kind="delta") of `samples` samples
        (the shards count them per table) through the table's
        compressor; names the pull session when keys are the pulled ones, so they are not
        sent again. Residuals the compressor evicts are pushed exactly. Under local
        aggregation the push goes to the host's leader, and returns once the shards hold it."""
        if keys.shape[0] == 0:
            return
        g = np.asarray(grads, dtype=np.float64).reshape(keys.shape[0], -1)
        named = session is not None and session.keys is keys
        if self.aggregator is not None:
            sids = session.session_ids if session is not None and named else (0,) * self.n
            self.aggregator.push(table, keys, g, sids, kind, samples)
            return
        if session is not None and named:
            order, bounds = session.order, session.bounds
            targets: list[tuple[int, ...]] = [(sid,) if sid else () for sid in session.session_ids]
        else:
            order, bounds = self._split(keys)
            targets = [()] * self.n
        self._send(table, keys, g, order, bounds, targets, kind, samples)

    def push_merged(
        self,
        table: str,
        keys: npt.NDArray[np.uint64],
        rows: npt.NDArray[np.float64],
        targets: list[tuple[int, ...]],
        kind: str,
        samples: int = 0,
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float64] | None]:
        """The leader's push of a host's summed pushes (ps.client.local_aggregate): sorted unique
        keys; targets[s], the pull sessions whose keys' union is shard s's part (): the keys
        travel). Returns the keys whose residual was evicted and sent exactly, and the pushed
        keys' residuals (None: no error feedback), for the other workers' views."""
        order, bounds = self._split(keys)
        gone = self._send(table, keys, rows, order, bounds, targets, kind, samples)
        return gone, self.unsent(table, keys, rows.shape[1])

    def _send(
        self,
        table: str,
        keys: npt.NDArray[np.uint64],
        g: npt.NDArray[np.float64],
        order: npt.NDArray[np.int64],
        bounds: npt.NDArray[np.int64],
        targets: list[tuple[int, ...]],
        kind: str,
        samples: int = 0,
    ) -> npt.NDArray[np.uint64]:
        """Compresses and sends; returns the sorted keys whose residual was evicted (and
        sent exactly)."""
        comp = self._compressor(table, kind)
        parts, flush_keys, flush_rows = [], [], []
        for s in range(self.n):  # compressed in turn (one residual store), then sent in parallel
            idx = order[bounds[s] : bounds[s + 1]]
            if idx.shape[0]:
                packed, gone_keys, gone_rows = comp.compress(keys[idx], g[idx])
                parts.append((s, keys[idx], packed))
                flush_keys.append(gone_keys)
                flush_rows.append(gone_rows)

        client = self.client_id if kind == DELTA and self._keeping(table) else 0

        def one(part: tuple[int, npt.NDArray[np.uint64], Compressed]) -> None:
            s, part_keys, packed = part
            try:
                payload = packed.payload(with_subset=bool(targets[s]))
                ack = self.transport.push(s, table, part_keys, targets[s], payload, kind, samples, client)
                self._landed(table, s, part_keys, packed, ack, targets[s][0] if len(targets[s]) == 1 else 0)
                return
            except SessionLost:
                pass
            sent = part_keys if packed.sent is None else part_keys[packed.sent]
            payload = packed.payload(with_subset=False)
            ack = self.transport.push(s, table, sent, (), payload, kind, samples, client)
            self._landed(table, s, sent, packed, ack)

        with self._flying(table, keys) if client else nullcontext():
            self.on_shards(lambda i: one(parts[i]), list(range(len(parts))))
        gone = np.concatenate(flush_keys) if flush_keys else np.zeros(0, np.uint64)
        order = np.argsort(gone)
        gone = gone[order]
        if gone.shape[0]:
            self._push_exact(table, gone, np.concatenate(flush_rows)[order], kind)
        return gone

    def aggregate_locally(self, plan: AggregationPlan, index: int) -> None:
        """Sends this worker's sparse pushes through the host's local aggregation
        (`--local-aggregate`); worker 0 leads, pushing the sums with this client."""
        self.aggregator = LocalAggregator(plan, index, self.push_merged, self.residual_rows)

    def drain_residuals(self, cause: str) -> None:
        """Every update trained reaches the shards (flush_residuals: exactly, or to bf16's
        rounding for an export): this client's residuals, or with local aggregation the
        leader's (which hold the host's) while the others forget their mirror. With local
        aggregation every worker must be settled first (a cut, an export)."""
        if self.aggregator is None or self.aggregator.leader:
            self.flush_residuals(cause)
        else:
            self.aggregator.forget_residuals()

    def leave_local_aggregation(self, waiting: Callable[[], None] | None = None) -> None:
        """After a worker's last push: joins the remaining rounds until every worker is done
        (the leader sends the others' pushes meanwhile), calling `waiting` now and then.
        Nothing without local aggregation."""
        if self.aggregator is not None:
            self.aggregator.leave(waiting)

    def _compressor(self, table: str, kind: str) -> Compressor:
        if table not in self.compressors:
            spec = self.push_codec or CodecSpec("fp64" if kind == DELTA else "fp32")
            self.compressors[table] = Compressor(spec, self.residual_rows, seed=self.seed * 1000 + len(self.compressors))
            self._kinds[table] = kind
        return self.compressors[table]

    def _push_coded(
        self, table: str, keys: npt.NDArray[np.uint64], rows: npt.NDArray[np.float64], kind: str, codec_name: str
    ) -> npt.NDArray[np.float64]:
        """Sends rows of these keys (keys included) in a value codec; returns what the
        shards received, decoded."""
        codec = value_codec(codec_name)
        sent = np.empty_like(rows)
        order, bounds = self._split(keys)
        client = self.client_id if kind == DELTA and self._keeping(table) else 0
        with self._flying(table, keys) if client else nullcontext():
            for s in range(self.n):
                idx = order[bounds[s] : bounds[s + 1]]
                if idx.shape[0]:
                    body, sent[idx] = codec.encode(rows[idx], self._rng)
                    packed = Compressed(codec, idx.shape[0], rows.shape[1], None, body, sent[idx])
                    ack = self.transport.push(s, table, keys[idx], (), packed.payload(with_subset=False), kind, 0, client)
                    self._landed(table, s, keys[idx], packed, ack)
        return sent

    def _push_exact(self, table: str, keys: npt.NDArray[np.uint64], rows: npt.NDArray[np.float64], kind: str) -> None:
        """Sends residuals leaving the error-feedback memory, in fp64, keys included."""
        self._push_coded(table, keys, rows, kind, "fp64")

    def unsent(self, table: str, keys: npt.NDArray[np.uint64], cols: int) -> npt.NDArray[np.float64] | None:
        """What this client's compressor has not yet sent of these keys' rows, or None when
        the table keeps no error feedback (nothing is ever held back): with state deltas,
        pulled state plus this is the worker's own view."""
        if self.aggregator is not None and not self.aggregator.leader:
            return self.aggregator.unsent(table, keys, cols)  # the leader's residuals, mirrored
        comp = self.compressors.get(table)
        return None if comp is None or comp.residuals is None else comp.unsent(keys, cols)

    def flush_residuals(self, cause: str = "end") -> None:
        """Sends every table's error-feedback residual: at a checkpoint "cut" and the "end"
        exactly, so the shards hold exactly what uncompressed pushes would have left; before
        an "export" in EXPORT_DRAIN_CODEC, keeping what it rounds off (the version served
        lacks at most that rounding). The cause also files the bytes in the wire ledger."""
        with self.transport.wire.draining(cause):
            for table, comp in self.compressors.items():
                keys, rows = comp.drain()
                if not keys.shape[0]:
                    continue
                if cause == "export":  # freshness, not exactness: bf16, what it loses kept for later
                    comp.keep(keys, rows - self._push_coded(table, keys, rows, self._kinds[table], EXPORT_DRAIN_CODEC))
                else:
                    self._push_exact(table, keys, rows, self._kinds[table])

    @property
    def wire(self) -> WireLedger:
        """Every byte of every call, both ways, by table and kind (ps.transport)."""
        return self.transport.wire

    def codecs(self) -> dict[str, str]:
        """What travels, per sparse table pushed so far ("push:TABLE") and for pull replies
        ("pull"): the codecs `auto` chose, spelled as --push-codec and --pull-codec take them."""
        out = {}
        for table, comp in sorted(self.compressors.items()):
            spec = comp.spec
            out[f"push:{table}"] = (f"topk:{spec.topk:g}+" if spec.topk is not None else "") + spec.value
        out["pull"] = self.pull_codec or "raw"
        out["pull_cache"] = "on" if self.kept_max and self.aggregator is None else "off"
        return out

    def compression_stats(self) -> dict[str, float]:
        """Error-feedback memory summed over tables (ps.compression.compressor.stats)."""
        out = {
            "residual_drain_bytes": float(self.wire.total(("drain",))),
            "dense_push_bytes": float(self.wire.total(("dense_push",))),
        }
        if self.aggregator is not None:
            out.update(self.aggregator.stats())
        if self._kept:
            with self._kept_lock:
                out.update({k: float(v) for k, v in self.kept_stats.items()})
                out["kept_rows"] = float(sum(k.size for k in self._kept.values()))
                out["kept_restarts"] = float(sum(k.restarts for k in self._kept.values()))
        for comp in self.compressors.values():
            for k, v in comp.stats().items():
                out[k] = out.get(k, 0.0) + v
        return out

    def pull_dense(self, table: str, state: bool = False) -> Rows:
        """The whole vector's weights [n], or its optimizer state [n, width]."""
        parts = self.on_shards(lambda s: self.transport.pull_dense(s, table, state), self._dense_shards(table))
        return np.concatenate([v for _, v in sorted(parts, key=lambda p: p[0]) if v.shape[0]])

    def push_dense(
        self, table: str, values: Rows, kind: str = GRADIENT, onebit: bool = False, steps: int = 1, samples: int = 0
    ) -> None:
        """A gradient [n], an Adam momentum [n] (standing for `steps` steps) or a state delta
        [n, width] of the whole vector: fp32 (gradient, momentum) or fp64 (delta) values, or
        with onebit=True signs and two means per shard, the quantization error kept for the
        next push."""
        v = np.asarray(values, dtype=np.float64).reshape(values.shape[0], -1)
        if onebit:
            v = v + self._dense_residual.get(table, 0.0)
        codec = VALUE_CODECS["onebit" if onebit else "fp64" if kind == DELTA else "fp32"]
        sent = np.empty_like(v)
        parts = []
        for s in _holding(v.shape[0], self.n):
            lo, hi = dense_range(v.shape[0], s, self.n)
            body, sent[lo:hi] = codec.encode(v[lo:hi], self._rng)
            parts.append((s, Compressed(codec, hi - lo, v.shape[1], None, body).payload(with_subset=False)))
        if onebit:
            self._dense_residual[table] = v - sent
        self.on_shards(
            lambda i: self.transport.push_dense(parts[i][0], table, parts[i][1], kind, steps, samples), list(range(len(parts)))
        )

    def dense_residual(self, table: str) -> Rows | None:
        """The quantization error 1-bit dense pushes of `table` still owe the shards."""
        r = self._dense_residual.get(table)
        return None if r is None else r.copy()

    def set_dense_residual(self, table: str, residual: Rows | None) -> None:
        """Takes up a residual a checkpoint cut recorded (None: none owed)."""
        if residual is None:
            self._dense_residual.pop(table, None)
        else:
            r = np.array(residual, dtype=np.float64)
            self._dense_residual[table] = r.reshape(r.shape[0], -1)  # as push_dense keeps it: [n, 1]

    def reset(self) -> None:
        """Forgets what this client holds back for the shards (error-feedback residuals and
        dense 1-bit residuals): after a restore they belong to a dropped past."""
        for comp in self.compressors.values():
            comp.drain()
        self._dense_residual.clear()
        self.forget_kept_rows()

    def forget_kept_rows(self) -> None:
        """Drops every row kept between pulls (the shards went back to a cut)."""
        with self._kept_lock:
            for kept in self._kept.values():
                kept.clear()
            self._fresh.clear()


def _among(keys: npt.NDArray[np.uint64], sorted_keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.bool_]:
    """Which keys are in sorted_keys (sorted, unique): a binary search each, where np.isin
    would sort both."""
    if sorted_keys.shape[0] == 0:
        return np.zeros(keys.shape[0], dtype=np.bool_)
    pos = np.minimum(np.searchsorted(sorted_keys, keys), sorted_keys.shape[0] - 1)
    return sorted_keys[pos] == keys  # type: ignore[no-any-return]


def _holding(length: int, n: int) -> list[int]:
    """The shards that hold part of a dense vector of `length` (a 1-long bias: one)."""
    return [s for s in range(n) if dense_range(length, s, n)[1] > dense_range(length, s, n)[0]]


def load_wire_kernels() -> None:
    """Imports the gRPC transport and runs its key codec once, so a process that forks
    ranks has them loaded (trainer.preload)."""
    import ps.client.grpc_transport  # noqa: F401
    from ps.wire import KEYS_DELTA_VARINT, encode_keys

    encode_keys(np.array([1, 5], dtype=np.uint64), KEYS_DELTA_VARINT)
