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

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt

from ctr.model.spec import TableSpec
from ctr.routing import dense_range
from ps.api import (
    DELTA,
    GRADIENT,
    MOMENTUM,
    STATE,
    BaseChanged,
    ExportedFile,
    ModelIdentity,
    ModelMismatch,
    Rows,
    ShardRestarted,
    ShardStatus,
    StoppedWhileUnreachable,
)
from ps.client.auto_codec import EXACT_CODEC
from ps.client.control import ControlPlane
from ps.client.local_aggregate import AggregationPlan, LocalAggregator
from ps.client.pull_cache import DEFAULT_KEPT_ROWS, PullCache
from ps.client.push_compression import PushCompression
from ps.client.push_path import PushBatch, ShardSender, split_by_shard
from ps.compression.compressor import parse_codec
from ps.compression.payload import VALUE_CODECS, value_codec
from ps.transport import ShardTransport, WireLedger

if TYPE_CHECKING:
    from ps.server.lifecycle import Lifecycle
    from ps.server.local_server import LocalServers

__all__ = [
    "DELTA",
    "GRADIENT",
    "MOMENTUM",
    "STATE",
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
log = logging.getLogger(__name__)
DEFAULT_RESIDUAL_ROWS = 1 << 20
# a batch's calls that run at once (concurrently): its sparse tables' and the bias's
# (DeepFM over 2 gRPC shards on Frappe: a batch waited on six round trips in turn)
TABLES_AT_ONCE = 3
Keys = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class PullSession:
    """What a pull leaves for the matching push: the split and each shard's session id."""

    keys: npt.NDArray[np.uint64]
    order: npt.NDArray[np.int64]
    bounds: npt.NDArray[np.int64]
    session_ids: tuple[int, ...]


class PSClient:
    """The worker's side of the PS (ps.api states the contract). Pulls go to the shards,
    through the pull cache when it keeps the table; pushes pass the stages of
    ps.client.push_path (local aggregation, compression, the shard sender).

    push_codec: the compressor spec of sparse pushes (ps.compression.compressor); "none":
    the uncompressed protocol, fp64 for state deltas (accumulators need every digit), fp32
    for gradients; "auto": the same in-process, and over a network 1-bit state deltas on
    each table where a window between two checkpoint cuts says they pay
    (ps.client.auto_codec, docs/design/auto-codec.md).
    residual_rows caps each table's error-feedback memory. pull_codec: the value codec
    sparse pull replies travel in ("auto" or "raw": fp32 weights, fp64 state). ranks: how
    many workers push these rows (several bound each one's residuals). cut_drain_codec:
    what residuals travel in at checkpoint cuts (fp64z exactly, or bf16z: cut-drains.md)."""

    def __init__(
        self,
        transport: ShardTransport,
        shard_count: int,
        push_codec: str = "auto",
        residual_rows: int = DEFAULT_RESIDUAL_ROWS,
        seed: int = 0,
        pull_codec: str = "auto",
        ranks: int = 1,
        cut_drain_codec: str = EXACT_CODEC,
    ) -> None:
        self.transport = transport
        self.n = shard_count
        self.pull_codec = "" if pull_codec in ("auto", "raw") else value_codec(pull_codec).name
        self.rows_may_drop = False  # a shard admits or evicts rows (known from the last status())
        # every shard call of up to TABLES_AT_ONCE calls at once (concurrently)
        self.pool = ThreadPoolExecutor(max_workers=max(1, shard_count) * TABLES_AT_ONCE)
        self._tables = ThreadPoolExecutor(max_workers=2 * TABLES_AT_ONCE, thread_name_prefix="tables")
        self._dense_len: dict[str, int] = {}
        self.cache = PullCache(transport, shard_count, self.on_shards)
        sender = ShardSender(transport, shard_count, self.cache, self.on_shards)
        spec = None if push_codec in ("auto", "none") else parse_codec(push_codec)
        auto = push_codec == "auto" and transport.remote  # over a network `auto` compresses where it pays
        self.compression = PushCompression(
            spec, residual_rows, seed, sender, transport.wire, auto, shared=ranks > 1, cut_codec=cut_drain_codec
        )
        self.aggregator: LocalAggregator | None = None  # --local-aggregate
        self._control: ControlPlane | None = None

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
        ranks: int = 1,
        cut_drain_codec: str = EXACT_CODEC,
    ) -> PSClient:
        """Shard processes over gRPC; a call to an unreachable shard retries for retry_s, or
        until stopping() (then StoppedWhileUnreachable); a call unanswered after
        call_timeout_s is retried too when sending it twice changes nothing, and otherwise
        raises ShardRestarted (every shard goes back to the last cut)."""
        from ps.client.grpc_transport import GrpcTransport  # gRPC loads only for shard processes

        transport = GrpcTransport(addresses, timeout=call_timeout_s, retry_s=retry_s, stopping=stopping)
        return cls(transport, len(addresses), push_codec, residual_rows, seed, pull_codec, ranks, cut_drain_codec)

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
        cut_drain_codec: str = EXACT_CODEC,
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
        return cls(LocalTransport(shards), shard_count, push_codec, residual_rows, seed, pull_codec, 1, cut_drain_codec)

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

    @property
    def wire(self) -> WireLedger:
        """Every byte of every call, both ways, by table and kind (ps.transport)."""
        return self.transport.wire

    def know(self, specs: list[TableSpec]) -> None:
        """Remembers the dense tables' lengths (a worker that did not declare them learns
        them here), so dense calls skip the shards that hold none of a vector; and the
        sparse tables' layouts, for the pull cache."""
        for spec in specs:
            if spec.kind == "dense":
                self._dense_len[spec.name] = spec.dim
            else:
                self.cache.know(spec)
                self.compression.know(spec)

    def keep_rows(self, max_rows: int = DEFAULT_KEPT_ROWS) -> None:
        """From now on, state pulls of known sparse tables keep their rows on this client
        (docs/design/pull-cache.md): a row travels when this client does not hold it or
        another writer changed it. Not under local aggregation (the leader pushes the
        host's sums, so no client's copy follows its own pushes)."""
        if self.aggregator is None:
            self.cache.keep(max_rows)

    def forget_kept_rows(self) -> None:
        """Drops every row kept between pulls (the shards went back to a cut)."""
        self.cache.forget()

    def _dense_shards(self, table: str) -> list[int]:
        length = self._dense_len.get(table)
        return list(range(self.n)) if length is None else _holding(length, self.n)

    def close(self) -> None:
        self._tables.shutdown()
        self.pool.shutdown()
        self.transport.close()

    def concurrently(self, *calls: Callable[[], Any]) -> list[Any]:
        """The results of calls to different tables (a batch's pulls, then its pushes), run
        at once where shards are remote, so that their round trips overlap instead of adding
        up; in turn with in-process shards, which have no latency to hide. Returns once every
        call has ended, raising the first error: none is still in flight after."""
        if not self.remote or len(calls) < 2:
            return [c() for c in calls]
        futures = [self._tables.submit(c) for c in calls]
        wait(futures)
        return [f.result() for f in futures]

    def on_shards(self, fn: Callable[[int], T], shards: list[int] | None = None) -> list[T]:
        targets = list(range(self.n)) if shards is None else shards
        if len(targets) == 1:
            return [fn(targets[0])]
        return list(self.pool.map(fn, targets))

    def pull(
        self, table: str, keys: npt.NDArray[np.uint64], session: bool = True, state: bool = False
    ) -> tuple[Rows, PullSession]:
        """Rows for sorted unique keys, and the session a following push may name."""
        order, bounds = split_by_shard(keys, self.n)
        if state and session and self.cache.keeping(table):
            rows, sessions = self.cache.pull(table, keys, order, bounds, self.pull_codec)
            return rows, PullSession(keys, order, bounds, sessions)

        def one(s: int) -> tuple[int, Rows]:
            part = keys[order[bounds[s] : bounds[s + 1]]]
            if part.shape[0] == 0:
                return 0, np.zeros((0, 0), dtype=np.float32)
            return self.transport.pull(s, table, part, session, state, self.pull_codec)

        results = self.on_shards(one)
        dtype = np.float64 if state else np.float32
        sid, only = results[0]
        if self.n == 1 and only.dtype == dtype and only.flags.writeable:  # one shard's rows, in key order: no copy
            return only, PullSession(keys, order, bounds, (sid,))
        dim = max((r.shape[1] for _, r in results if r.shape[0]), default=1)
        rows = np.zeros((keys.shape[0], dim), dtype=dtype)
        for s, (_, r) in enumerate(results):
            if r.shape[0]:
                rows[order[bounds[s] : bounds[s + 1]]] = r
        return rows, PullSession(keys, order, bounds, tuple(sid for sid, _ in results))

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
        (the shards count them per table) through the push path's stages
        (ps.client.push_path); names the pull session when keys are the pulled ones, so they
        are not sent again. Returns once the shards hold it (with local aggregation too)."""
        if keys.shape[0] == 0:
            return
        rows = np.asarray(grads, dtype=np.float64).reshape(keys.shape[0], -1)
        if session is not None and session.keys is keys:
            targets = tuple((sid,) if sid else () for sid in session.session_ids)
            batch = PushBatch(table, keys, rows, targets, kind, samples, (session.order, session.bounds))
        else:
            batch = PushBatch(table, keys, rows, ((),) * self.n, kind, samples)
        if self.aggregator is not None:
            self.aggregator.push(batch)
        else:
            self.compression.push(batch)

    def _push_merged(self, batch: PushBatch) -> tuple[Keys, F64 | None]:
        """The leader's push of a host's summed pushes (ps.client.local_aggregate). Returns
        the keys whose residual was evicted and sent exactly, and the pushed keys'
        residuals (None: no error feedback), for the other workers' views."""
        gone = self.compression.push(batch)
        return gone, self.compression.unsent(batch.table, batch.keys, batch.rows.shape[1])

    def aggregate_locally(self, plan: AggregationPlan, index: int) -> None:
        """Sends this worker's sparse pushes through the host's local aggregation
        (`--local-aggregate`); worker 0 leads, pushing the sums with this client."""
        self.aggregator = LocalAggregator(plan, index, self._push_merged, self.compression.residual_rows)
        self.cache.stop()

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

    def unsent(self, table: str, keys: npt.NDArray[np.uint64], cols: int) -> npt.NDArray[np.float64] | None:
        """What this client's compressor has not yet sent of these keys' rows, or None when
        the table keeps no error feedback (nothing is ever held back): with state deltas,
        pulled state plus this is the worker's own view."""
        if self.aggregator is not None and not self.aggregator.leader:
            return self.aggregator.unsent(table, keys, cols)  # the leader's residuals, mirrored
        return self.compression.unsent(table, keys, cols)

    def flush_residuals(self, cause: str = "end") -> None:
        """Sends every table's error-feedback residual (PushCompression.drain): exactly at a
        "cut" and the "end", in bf16 before an "export"."""
        self.compression.drain(cause)

    def codecs(self) -> dict[str, str]:
        """What travels, per sparse table pushed so far ("push:TABLE") and for pull replies
        ("pull"): the codecs `auto` chose, spelled as --push-codec and --pull-codec take them."""
        out = self.compression.codecs()
        out["pull"] = self.pull_codec or "raw"
        out["pull_cache"] = "on" if self.cache.on else "off"
        return out

    def compression_stats(self) -> dict[str, float]:
        """Error-feedback memory summed over tables, drains, local aggregation and the pull cache."""
        out = {
            "residual_drain_bytes": float(self.wire.total(("drain",))),
            "dense_push_bytes": float(self.wire.total(("dense_push",))),
        }
        if self.aggregator is not None:
            out.update(self.aggregator.stats())
        out.update(self.cache.stats())
        out.update(self.compression.stats())
        return out

    def pull_dense(self, table: str, state: bool = False) -> Rows:
        """The whole vector's weights [n], or its optimizer state [n, width]."""
        parts = self.on_shards(lambda s: self.transport.pull_dense(s, table, state), self._dense_shards(table))
        return np.concatenate([v for _, v in sorted(parts, key=lambda p: p[0]) if v.shape[0]])

    def push_dense(
        self,
        table: str,
        values: Rows,
        kind: str = GRADIENT,
        onebit: bool = False,
        steps: int = 1,
        samples: int = 0,
        base: Rows | None = None,
    ) -> None:
        """A gradient [n], an Adam momentum [n] (standing for `steps` steps), a state delta
        [n, width] or a state [n, width] of the whole vector: fp32 (gradient, momentum) or
        fp64 (delta) values, or with onebit=True signs and two means per shard, the
        quantization error kept for the next push. A state with `base`, what the shards
        are known to hold, may go as its difference from it; a shard that holds anything
        else refuses that, and gets the state whole."""
        v = np.asarray(values, dtype=np.float64).reshape(values.shape[0], -1)
        held = None if base is None else np.asarray(base, dtype=np.float64).reshape(v.shape[0], -1)
        shards = _holding(v.shape[0], self.n)
        parts = self.compression.dense(table, v, kind, onebit, shards, steps, samples, held)

        def one(i: int) -> None:
            try:
                self.transport.push_dense(parts[i])
            except BaseChanged as e:
                log.info("dense table %s: %s; writing the state whole", table, e)
                self.transport.push_dense(self.compression.dense(table, v, kind, onebit, [shards[i]], steps, samples)[0])

        self.on_shards(one, list(range(len(parts))))

    def dense_residual(self, table: str) -> Rows | None:
        """The quantization error 1-bit dense pushes of `table` still owe the shards."""
        return self.compression.dense_residual(table)

    def set_dense_residual(self, table: str, residual: Rows | None) -> None:
        """Takes up a residual a checkpoint cut recorded (None: none owed)."""
        self.compression.set_dense_residual(table, residual)

    def reset(self) -> None:
        """Forgets what this client holds back for the shards (error-feedback residuals and
        dense 1-bit residuals) and the rows it kept: after a restore they belong to a dropped past."""
        self.compression.reset()
        self.forget_kept_rows()


def _holding(length: int, n: int) -> list[int]:
    """The shards that hold part of a dense vector of `length` (a 1-long bias: one)."""
    return [s for s in range(n) if dense_range(length, s, n)[1] > dense_range(length, s, n)[0]]


def load_wire_kernels() -> None:
    """Imports the gRPC transport and runs its key codec once, so a process that forks
    ranks has them loaded (trainer.preload)."""
    import ps.client.grpc_transport  # noqa: F401
    from ps.wire import KEYS_DELTA_VARINT, encode_keys

    encode_keys(np.array([1, 5], dtype=np.uint64), KEYS_DELTA_VARINT)
