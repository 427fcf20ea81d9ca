"""The gRPC transport of the PS client: shard processes reached over the network."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt

from ctr.model.spec import TableSpec
from ctr.runtime.daemon import PS_MAX_MESSAGE_BYTES
from ctr.runtime.security import open_channel
from protos import ps_pb2, ps_pb2_grpc
from ps.api import (
    STATE_DIFF,
    BaseChanged,
    CachedPull,
    Declared,
    DensePush,
    ExportedFile,
    KnownRows,
    ModelIdentity,
    ModelMismatch,
    PushAck,
    Rows,
    SessionLost,
    ShardRestarted,
    ShardStatus,
    SparsePush,
    StoppedWhileUnreachable,
    Superseded,
    TableStats,
)
from ps.compression.payload import decode_payload
from ps.transport import CONTROL, ByteCounter
from ps.wire import (
    KEYS_DELTA_VARINT,
    decode_bits,
    decode_rows,
    decode_varint_list,
    encode_bits,
    encode_keys,
    encode_known_ids,
)

log = logging.getLogger("ps.client")
_PUSH_KINDS = {
    "gradient": ps_pb2.PUSH_GRADIENT,
    "delta": ps_pb2.PUSH_STATE_DELTA,
    "momentum": ps_pb2.PUSH_MOMENTUM,
    "state": ps_pb2.PUSH_STATE,
    "state_diff": ps_pb2.PUSH_STATE_DIFF,
}


# a shard that cannot be reached (down, restarting), or that cancelled the call as it
# stopped (SIGTERM): the call is retried, after checking which process answers
RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
# a shard that did not answer in time (hung, swapping, a full stop of the world) is retried
# like one that cannot be reached, for calls that change nothing when sent twice; a push or
# a prepare may have landed, so its timeout takes every shard back to the last cut instead
IDEMPOTENT = frozenset({"Pull", "PullDense", "Stats", "DeclareTables", "Commit", "Restore"})
STILL_DOWN_LOG_S = 10.0  # how often a shard that does not answer is logged while retried
# what gRPC answers past a server's --max-concurrent, before any handler ran: the call is
# backed off and sent again (never applied twice), for up to the call's own timeout
BUSY_DETAILS = "Concurrent RPC limit exceeded"


def identity_message(model: ModelIdentity | None) -> ps_pb2.ModelIdentity | None:
    if model is None:
        return None
    return ps_pb2.ModelIdentity(
        name=model.name, type=model.type, fields_sha256=model.fields_sha256, fields=model.fields, layout=model.layout
    )


def table_decl(spec: TableSpec) -> ps_pb2.TableDecl:
    opt = {k: float(v) for k, v in spec.optimizer.to_dict().items() if k != "kind"}
    return ps_pb2.TableDecl(
        name=spec.name, kind=spec.kind, dim=spec.dim, update=spec.update, optimizer=spec.optimizer.kind, params=opt
    )


def cached_pull(resp: ps_pb2.PullResponse, sent: int, known: int, codec: str) -> CachedPull:
    """The reply to a pull with known rows, decoded (ps.api.CachedPull)."""
    if resp.stale:
        none = np.zeros((0, 0))
        return CachedPull(0, True, resp.layout, np.zeros(0, np.bool_), np.zeros(0, np.int64), none, np.zeros(0, np.bool_), none)
    stored = decode_bits(resp.stored, sent, "stored")
    changed = decode_bits(resp.changed, known, "changed")
    n_stored, n_changed = int(stored.sum()), int(changed.sum())
    ids = decode_varint_list(resp.stored_ids, n_stored, "stored_ids")
    n = n_stored + n_changed
    rows = np.asarray(
        decode_payload(resp.rows, n, resp.dim)[1] if codec else decode_rows(resp.rows, n, resp.dim, np.float64), np.float64
    )
    return CachedPull(resp.session_id, False, resp.layout, stored, ids, rows[:n_stored], changed, rows[n_stored:])


def _busy(e: grpc.RpcError) -> bool:
    return e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and BUSY_DETAILS in (e.details() or "")  # type: ignore[attr-defined]


class GrpcTransport(ByteCounter):
    """One channel per shard address; protobuf stays inside this class. A call to a shard
    that cannot be reached (UNAVAILABLE: down, or restarting; CANCELLED: it was stopping) is
    retried with backoff for up to `retry_s`, each retry after the first checking the
    incarnation of the process that answers (ShardRestarted when it changed). Once `stopping()`
    is true, a failed call is not retried: StoppedWhileUnreachable, so that SIGTERM stops a
    trainer whose shards are down at once instead of after `retry_s`."""

    remote = True

    def __init__(
        self,
        addresses: list[str],
        key_encoding: int = KEYS_DELTA_VARINT,
        timeout: float = 60.0,
        retry_s: float = 0.0,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        super().__init__()
        opts = [
            ("grpc.max_receive_message_length", PS_MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", PS_MAX_MESSAGE_BYTES),
        ]
        self.channels = [open_channel(a, opts) for a in addresses]
        self.stubs = [ps_pb2_grpc.ParameterServerStub(c) for c in self.channels]
        self.key_encoding = key_encoding
        self.timeout = timeout
        self.retry_s = retry_s
        self.stopping = stopping
        self.addresses = addresses

    def _control(self, shard: int, method: str, req: Any, timeout: float | None = None) -> Any:
        """A control-plane call, counted under CONTROL."""
        resp = self._rpc(shard, method, req, timeout)
        self.count("", CONTROL, req.ByteSize(), resp.ByteSize())
        return resp

    def _rpc(self, shard: int, method: str, req: Any, timeout: float | None = None) -> Any:
        started = time.monotonic()
        deadline = started + self.retry_s
        busy_until = time.monotonic() + (timeout or self.timeout)
        delay = 0.05
        busy_delay = 0.01
        said = 0.0
        while True:
            try:
                if delay > 0.05 and method != "Stats":  # back after an outage: the same process?
                    stats = self.stubs[shard].Stats(ps_pb2.StatsRequest(), timeout=self.timeout)
                    self.count("", CONTROL, 0, stats.ByteSize())
                    self.saw(shard, stats.incarnation)
                return getattr(self.stubs[shard], method)(req, timeout=timeout or self.timeout)
            except grpc.RpcError as e:
                late = e.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                if late and method not in IDEMPOTENT:
                    raise ShardRestarted(
                        shard,
                        f"PS shard {shard} at {self.addresses[shard]} did not answer {method} within"
                        f" {timeout or self.timeout:g} s: it may have applied it, so every shard goes back to the last cut",
                    ) from e
                if (_busy(e) or e.code() in RETRIED or late) and self.stopping():
                    raise StoppedWhileUnreachable(
                        f"asked to stop while PS shard {shard} at {self.addresses[shard]} answered {e.code().name}"
                    ) from e
                if _busy(e) and time.monotonic() + busy_delay < busy_until:
                    if busy_delay == 0.01:
                        log.warning("PS shard %d at %s is at its call limit; backing off", shard, self.addresses[shard])
                    time.sleep(busy_delay)
                    busy_delay = min(0.2, busy_delay * 2)
                    continue
                if e.code() not in RETRIED and not late:
                    self._saw_in(shard, e)  # a refusal from a process that restarted says so
                    if e.code() == grpc.StatusCode.ABORTED:  # the shard follows a newer trainer generation
                        raise Superseded(
                            f"PS shard {shard} at {self.addresses[shard]} refused {method}: {e.details()}. Another trainer"  # type: ignore[attr-defined]
                            " restored these shards after this one started (two trainers, not ranks of one group, on one"
                            " PS?); this trainer stops, and what it trained since the last cut is not kept"
                        ) from None
                    raise
                now = time.monotonic()
                if now + delay > deadline:
                    raise
                if now - said >= STILL_DOWN_LOG_S:  # said at once, then every few seconds while it lasts
                    said = now
                    log.warning(
                        "PS shard %d at %s %s; retrying %s for up to %.0f s more (%s)",
                        shard,
                        self.addresses[shard],
                        "did not answer in time" if late else "is unreachable",
                        method,
                        deadline - now,
                        e.code().name,
                    )
                time.sleep(delay)
                delay = min(0.5, delay * 2)

    def _saw_in(self, shard: int, e: grpc.RpcError) -> None:
        for key, value in e.trailing_metadata() or ():  # type: ignore[attr-defined]
            if key == "incarnation" and value.isdigit():
                self.saw(shard, int(value))

    def _refusing_other_models(self, shard: int, method: str, req: Any, timeout: float | None = None) -> Any:
        """A restore or a declaration; a shard holding another model refuses it with
        FAILED_PRECONDITION, raised here as ModelMismatch with the shard's message."""
        try:
            return self._control(shard, method, req, timeout)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.FAILED_PRECONDITION:
                raise ModelMismatch(f"{self.addresses[shard]}: {e.details()}") from None
            raise

    def declare(self, shard: int, specs: list[TableSpec]) -> Declared:
        req = ps_pb2.DeclareTablesRequest(
            tables=[table_decl(s) for s in specs], model=identity_message(self.model), replace_model=self.replace_model
        )
        resp = self._refusing_other_models(shard, "DeclareTables", req)
        return Declared(list(resp.created), list(resp.retuned))

    def pull(
        self, shard: int, table: str, keys: npt.NDArray[np.uint64], open_session: bool, state: bool, codec: str = ""
    ) -> tuple[int, Rows]:
        req = ps_pb2.PullRequest(
            table=table,
            keys=encode_keys(keys, self.key_encoding),
            key_count=keys.shape[0],
            key_encoding=self.key_encoding,  # type: ignore[arg-type]
            open_session=open_session,  # type: ignore[arg-type]
            state=state,
            reply_codec=codec,
        )
        resp = self._rpc(shard, "Pull", req)
        self.saw(shard, resp.incarnation)
        self.count(table, "sparse_pull", req.ByteSize(), resp.ByteSize())
        if codec:
            return resp.session_id, decode_payload(resp.rows, keys.shape[0], resp.dim)[1]
        return resp.session_id, decode_rows(resp.rows, keys.shape[0], resp.dim, np.float64 if resp.state else np.float32)

    def pull_known(self, shard: int, table: str, keys: npt.NDArray[np.uint64], known: KnownRows, codec: str = "") -> CachedPull:
        ids = encode_known_ids(known.ids)
        req = ps_pb2.PullRequest(
            table=table,
            keys=encode_keys(keys, self.key_encoding),
            key_count=keys.shape[0],
            key_encoding=self.key_encoding,  # type: ignore[arg-type]
            open_session=True,
            state=True,
            reply_codec=codec,
            client=known.client,
            layout=known.layout,
            known_ids=b"" if ids.gaps else ids.data,
            known_gaps=ids.data if ids.gaps else b"",
            known_count=ids.count,
            known_bitmap=ids.bitmap,
            known_stale=encode_bits(known.stale) if known.stale is not None and known.stale.any() else b"",
        )
        resp = self._rpc(shard, "Pull", req)
        self.saw(shard, resp.incarnation)
        self.count(table, "sparse_pull", req.ByteSize(), resp.ByteSize())
        return cached_pull(resp, keys.shape[0], known.ids.shape[0], codec)

    def push(self, part: SparsePush) -> PushAck | None:
        req = ps_pb2.PushRequest(
            table=part.table,
            key_count=part.keys.shape[0],
            payload=part.payload,
            kind=_PUSH_KINDS[part.kind],
            samples=part.samples,
            generation=self.generation,
            client=part.client,
        )
        if len(part.sessions) == 1:
            req.session_id = part.sessions[0]
        elif part.sessions:
            req.sessions.ids.extend(part.sessions)
        elif part.ids is not None:
            ids = encode_known_ids(part.ids.ids)
            named = ps_pb2.RowIds(count=ids.count, bitmap=ids.bitmap, layout=part.ids.layout)
            if ids.gaps:
                named.gaps = ids.data
            else:
                named.ids = ids.data
            req.row_ids.CopyFrom(named)
        else:
            req.keys = encode_keys(part.keys, self.key_encoding)
            req.key_encoding = self.key_encoding  # type: ignore[assignment]
        try:
            resp = self._rpc(part.shard, "Push", req)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.FAILED_PRECONDITION and (part.sessions or part.ids is not None):
                raise SessionLost(str(e.details())) from None
            raise
        self.count(part.table, "sparse_push", req.ByteSize(), resp.ByteSize())
        self.saw(part.shard, resp.incarnation)
        if not part.client:
            return None
        new_ids = decode_varint_list(resp.new_ids, resp.new_id_count, "new_ids") - 1
        conflicts = decode_bits(resp.conflicts, part.keys.shape[0], "conflicts")
        return PushAck(conflicts, new_ids, resp.layout, resp.epoch, resp.lease_ms / 1000)

    def pull_dense(self, shard: int, table: str, state: bool) -> tuple[int, Rows]:
        req = ps_pb2.DensePullRequest(table=table, state=state)
        resp = self._rpc(shard, "PullDense", req)
        self.saw(shard, resp.incarnation)
        self.count(table, "dense_pull", req.ByteSize(), resp.ByteSize())
        if state:
            return resp.offset, np.frombuffer(resp.values, dtype="<f8").reshape(-1, max(1, resp.width)).copy()
        return resp.offset, np.frombuffer(resp.values, dtype="<f4").copy()

    def push_dense(self, part: DensePush) -> None:
        req = ps_pb2.DensePushRequest(
            table=part.table,
            payload=part.payload,
            kind=_PUSH_KINDS[part.kind],
            steps=part.steps if part.steps > 1 else 0,
            samples=part.samples,
            generation=self.generation,
            base_digest=part.base_digest,
        )
        try:
            resp = self._rpc(part.shard, "PushDense", req)
        except grpc.RpcError as e:
            if part.kind == STATE_DIFF and e.code() == grpc.StatusCode.FAILED_PRECONDITION:
                self.count(part.table, "dense_push", req.ByteSize(), 0)
                raise BaseChanged(f"{self.addresses[part.shard]}: {e.details()}") from None
            raise
        self.count(part.table, "dense_push", req.ByteSize(), resp.ByteSize())
        self.saw(part.shard, resp.incarnation)

    def export(self, shard: int, full: bool, name: str) -> tuple[list[ExportedFile], int]:
        kind = ps_pb2.EXPORT_FULL if full else ps_pb2.EXPORT_DELTA
        resp = self._control(shard, "Export", ps_pb2.ExportRequest(kind=kind, directory=name), timeout=600)
        files = [ExportedFile(f.name, f.table, f.role, f.size, f.sha256, f.rows, f.columns) for f in resp.files]
        return files, resp.export_seq

    def prepare(self, shard: int, cut: int, offsets: bytes) -> int:
        req = ps_pb2.PrepareRequest(cut=cut, stream_offsets=offsets, generation=self.generation)
        return int(self._control(shard, "Prepare", req).rows)

    def commit(self, shard: int, cut: int) -> int:
        return int(self._control(shard, "Commit", ps_pb2.CommitRequest(cut=cut), timeout=600).rows_written)

    def restore(self, shard: int, cut: int, generation: int) -> int:
        req = ps_pb2.RestoreRequest(
            cut=cut, generation=generation, model=identity_message(self.model), replace_model=self.replace_model
        )
        return int(self._refusing_other_models(shard, "Restore", req, timeout=600).incarnation)

    def status(self, shard: int) -> ShardStatus:
        r = self._control(shard, "Stats", ps_pb2.StatsRequest())
        tables = [
            TableStats(t.name, t.kind, t.rows, t.capacity, t.dim, t.memory_bytes, t.digest, t.samples, t.not_admitted, t.evicted)
            for t in r.tables
        ]
        return ShardStatus(
            r.shard_index,
            r.shard_count,
            r.update_seq,
            r.checkpoint_seq,
            r.checkpoint_offsets,
            tables,
            r.incarnation,
            r.generation,
            r.committed_cut,
            tuple(r.cuts),
            r.drops_rows,
            r.export_root,
            r.durable,
        )

    def close(self) -> None:
        for c in self.channels:
            c.close()
