"""Thin gRPC servicer of a shard: protobuf in, numpy to the Shard, protobuf out."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
import numpy as np

from ctr.format.varint import encode_varints
from ctr.model.spec import ModelSpecError, TableSpec
from protos import ps_pb2, ps_pb2_grpc
from ps.api import KnownRows, ModelIdentity, ModelMismatch
from ps.compression.payload import BY_ID, CodecError, decode_payload, encode_rows, value_codec
from ps.server import metrics
from ps.server.errors import BaseMismatch, RowsMoved, SessionExpired, ShardError, StaleGeneration
from ps.server.shard import Shard
from ps.server.store import StoreCorrupted
from ps.server.tables import DELTA, GRADIENT, MOMENTUM, STATE
from ps.wire import WireError, decode_bits, decode_keys, decode_known_ids, encode_bits

R = TypeVar("R")


def _call(method: str, context: grpc.ServicerContext, fn: Callable[[], R], incarnation: int = 0) -> R:
    """Runs fn, mapping domain errors to gRPC status codes; the shard keeps serving. An error
    carries the shard's incarnation (trailing metadata), so a client that reached a shard
    that restarted learns it even from a refusal (an unknown table)."""
    start = time.perf_counter()
    try:
        return fn()
    except (SessionExpired, RowsMoved, BaseMismatch) as e:
        _abort(context, method, grpc.StatusCode.FAILED_PRECONDITION, str(e), incarnation)
    except StaleGeneration as e:
        _abort(context, method, grpc.StatusCode.ABORTED, f"{method}: {e}", incarnation)
    except ModelMismatch as e:
        _abort(context, method, grpc.StatusCode.FAILED_PRECONDITION, f"{method}: {e}", incarnation)
    except StoreCorrupted as e:  # the shard keeps what it held; an operator restores the store
        _abort(context, method, grpc.StatusCode.DATA_LOSS, f"{method}: {e}", incarnation)
    except (ShardError, WireError, CodecError, ModelSpecError) as e:
        _abort(context, method, grpc.StatusCode.INVALID_ARGUMENT, f"{method}: {e}", incarnation)
    finally:
        metrics.RPC_SECONDS.labels(method).observe(time.perf_counter() - start)
    raise AssertionError("unreachable")  # context.abort raises


def _abort(context: grpc.ServicerContext, method: str, code: grpc.StatusCode, message: str, incarnation: int) -> None:
    metrics.RPC_ERRORS.labels(method, code.name).inc()
    context.set_trailing_metadata((("incarnation", str(incarnation)),))
    context.abort(code, message)


def identity_of(m: ps_pb2.ModelIdentity) -> ModelIdentity:
    return ModelIdentity(m.name, m.type, m.fields_sha256, m.fields, m.layout)


def table_spec(decl: ps_pb2.TableDecl) -> TableSpec:
    params: dict[str, object] = {"kind": decl.optimizer, **dict(decl.params)}
    return TableSpec.from_dict(
        {"name": decl.name, "kind": decl.kind, "dim": decl.dim, "update": decl.update, "optimizer": params}
    )


def _push_kind(value: int) -> str:
    if value == ps_pb2.PUSH_GRADIENT:
        return GRADIENT
    if value == ps_pb2.PUSH_STATE_DELTA:
        return DELTA
    if value == ps_pb2.PUSH_MOMENTUM:
        return MOMENTUM
    if value == ps_pb2.PUSH_STATE:
        return STATE
    raise ShardError(f"kind: unknown push kind {value}")


class PSServicer(ps_pb2_grpc.ParameterServerServicer):
    def __init__(self, shard: Shard) -> None:
        self.shard = shard
        self.rng = np.random.default_rng(shard.index)  # int8 pull replies round stochastically

    def _call(self, method: str, context: grpc.ServicerContext, fn: Callable[[], R], request: Any) -> R:
        """Runs the call; counts the serialized request and reply (what the trainer's wire
        ledger counts from its side)."""
        metrics.WIRE_BYTES.labels(method, "received").inc(request.ByteSize())
        reply = _call(method, context, fn, self.shard.incarnation)
        metrics.WIRE_BYTES.labels(method, "sent").inc(reply.ByteSize())  # type: ignore[attr-defined]
        return reply

    def DeclareTables(self, request: ps_pb2.DeclareTablesRequest, context: grpc.ServicerContext) -> ps_pb2.DeclareTablesResponse:
        def run() -> ps_pb2.DeclareTablesResponse:
            model = identity_of(request.model) if request.HasField("model") else None
            specs = [table_spec(t) for t in request.tables]
            declared = self.shard.declare(specs, model, request.replace_model)
            return ps_pb2.DeclareTablesResponse(created=declared.created, retuned=declared.retuned)

        return self._call("DeclareTables", context, run, request)

    def Pull(self, request: ps_pb2.PullRequest, context: grpc.ServicerContext) -> ps_pb2.PullResponse:
        def run() -> ps_pb2.PullResponse:
            keys = decode_keys(request.keys, request.key_count, request.key_encoding)
            if request.reply_codec:
                value_codec(request.reply_codec)  # an unknown codec fails before the session opens
            metrics.KEYS.labels("pull", request.table).inc(keys.shape[0])
            if request.client:
                return self._pull_known(request, keys)
            sid, rows = self.shard.pull(request.table, keys, request.open_session, request.state)
            data = encode_rows(rows, request.reply_codec, self.rng) if request.reply_codec else rows.tobytes()
            return ps_pb2.PullResponse(
                session_id=sid, dim=rows.shape[1], rows=data, state=request.state, incarnation=self.shard.incarnation
            )

        return self._call("Pull", context, run, request)

    def _pull_known(self, request: ps_pb2.PullRequest, keys: np.ndarray) -> ps_pb2.PullResponse:
        """The pull of a client that keeps rows (docs/design/pull-cache.md)."""
        if not request.state or not request.open_session:
            raise ShardError("a pull with a client id reads state and opens a session")
        ids = self._named_ids(request.table, request.known_ids, request.known_gaps, request.known_count, request.known_bitmap)
        stale = decode_bits(request.known_stale, ids.shape[0], "known_stale") if request.known_stale else None
        got = self.shard.pull_known(request.table, keys, KnownRows(request.client, request.layout, ids, stale))
        if got.stale:
            return ps_pb2.PullResponse(stale=True, layout=got.layout, state=True, incarnation=self.shard.incarnation)
        rows = np.concatenate([got.stored_rows, got.changed_rows])
        data = encode_rows(rows, request.reply_codec, self.rng) if request.reply_codec else rows.tobytes()
        return ps_pb2.PullResponse(
            session_id=got.session_id,
            dim=rows.shape[1],
            rows=data,
            state=True,
            incarnation=self.shard.incarnation,
            layout=got.layout,
            stored=encode_bits(got.stored),
            stored_ids=bytes(encode_varints(got.stored_ids.astype(np.uint64))),
            changed=encode_bits(got.changed) if got.changed.any() else b"",
        )

    def _named_ids(self, table: str, ids: bytes, gaps: bytes, count: int, bitmap: bool) -> np.ndarray:
        """The row ids a pull or a push names, in whichever form they came (ps.wire
        encode_known_ids), bounded by what the table could hold."""
        return decode_known_ids(gaps or ids, count, bitmap, gaps=bool(gaps), limit=self.shard.id_limit(table))

    def Push(self, request: ps_pb2.PushRequest, context: grpc.ServicerContext) -> ps_pb2.PushResponse:
        def run() -> ps_pb2.PushResponse:
            target = request.WhichOneof("target")
            recorded, as_key, session = None, None, None
            if target in ("session_id", "sessions"):
                ids = [request.session_id] if target == "session_id" else list(request.sessions.ids)
                session = self.shard.session(request.table, ids)
                keys = session.keys
                if request.key_count != keys.shape[0]:
                    raise ShardError(f"key_count {request.key_count} but the sessions hold {keys.shape[0]} keys")
            elif target == "row_ids":
                named = request.row_ids
                row_ids = self._named_ids(request.table, named.ids, named.gaps, named.count, named.bitmap)
                if request.key_count != row_ids.shape[0]:
                    raise ShardError(f"key_count {request.key_count} but row_ids names {row_ids.shape[0]} rows")
                keys = self.shard.keys_of(request.table, named.layout, row_ids)
            else:
                keys = decode_keys(request.keys, request.key_count, request.key_encoding)
            kind = _push_kind(request.kind)
            subset, values = decode_payload(request.payload, keys.shape[0], self.shard.push_width(request.table, kind))
            sent = keys if subset is None else keys[subset]
            if session is not None:
                recorded, as_key = session.reads_of(request.client, subset)
            out = self.shard.push_as(
                request.client, recorded, request.table, sent, values, kind, request.samples, request.generation, as_key
            )
            applied, new_ids = out.applied, out.new_ids
            metrics.KEYS.labels("push", request.table).inc(applied)
            metrics.PUSH_BYTES.labels(BY_ID[request.payload[2]].name).inc(len(request.payload))
            metrics.UPDATE_SEQ.set(self.shard.update_seq)
            if out.lease_s:
                metrics.LEASES_GRANTED.labels(request.table).inc()
            if out.waited_s:
                metrics.LEASE_WAIT_SECONDS.labels(request.table).inc(out.waited_s)
            flagged = encode_bits(out.conflicts_of_named(keys.shape[0], subset)) if out.conflicts.any() else b""
            return ps_pb2.PushResponse(
                applied_rows=applied,
                incarnation=self.shard.incarnation,
                conflicts=flagged,
                new_ids=bytes(encode_varints(new_ids.astype(np.uint64) + np.uint64(1))) if new_ids.shape[0] else b"",
                new_id_count=new_ids.shape[0],
                layout=out.layout if new_ids.shape[0] else 0,
                epoch=out.epoch if request.client else 0,
                lease_ms=round(1000 * out.lease_s) if request.client else 0,
            )

        return self._call("Push", context, run, request)

    def PullDense(self, request: ps_pb2.DensePullRequest, context: grpc.ServicerContext) -> ps_pb2.DensePullResponse:
        def run() -> ps_pb2.DensePullResponse:
            offset, values = self.shard.pull_dense(request.table, request.state)
            width = values.shape[1] if values.ndim == 2 else 1
            return ps_pb2.DensePullResponse(
                offset=offset, values=values.tobytes(), width=width, incarnation=self.shard.incarnation
            )

        return self._call("PullDense", context, run, request)

    def PushDense(self, request: ps_pb2.DensePushRequest, context: grpc.ServicerContext) -> ps_pb2.DensePushResponse:
        def run() -> ps_pb2.DensePushResponse:
            if request.kind == ps_pb2.PUSH_STATE_DIFF:
                self.shard.push_dense_diff(
                    request.table, request.payload, request.base_digest, request.samples, request.generation
                )
                return ps_pb2.DensePushResponse(incarnation=self.shard.incarnation)
            kind = _push_kind(request.kind)
            _, values = decode_payload(request.payload, *self.shard.dense_push_shape(request.table, kind))
            self.shard.push_dense(request.table, values, kind, max(1, request.steps), request.samples, request.generation)
            return ps_pb2.DensePushResponse(incarnation=self.shard.incarnation)

        return self._call("PushDense", context, run, request)

    def Export(self, request: ps_pb2.ExportRequest, context: grpc.ServicerContext) -> ps_pb2.ExportResponse:
        def run() -> ps_pb2.ExportResponse:
            files, seq = self.shard.export(request.kind == ps_pb2.EXPORT_FULL, request.directory)
            wire = [
                ps_pb2.ExportedFile(**{k: v for k, v in vars(f).items() if k != "shard"}) for f in files
            ]  # the caller knows the shard
            return ps_pb2.ExportResponse(files=wire, export_seq=seq)

        return self._call("Export", context, run, request)

    def Prepare(self, request: ps_pb2.PrepareRequest, context: grpc.ServicerContext) -> ps_pb2.PrepareResponse:
        return self._call(
            "Prepare",
            context,
            lambda: ps_pb2.PrepareResponse(rows=self.shard.prepare(request.cut, request.stream_offsets, request.generation)),
            request,
        )

    def Commit(self, request: ps_pb2.CommitRequest, context: grpc.ServicerContext) -> ps_pb2.CommitResponse:
        return self._call("Commit", context, lambda: ps_pb2.CommitResponse(rows_written=self.shard.commit(request.cut)), request)

    def Restore(self, request: ps_pb2.RestoreRequest, context: grpc.ServicerContext) -> ps_pb2.RestoreResponse:
        def run() -> ps_pb2.RestoreResponse:
            model = identity_of(request.model) if request.HasField("model") else None
            self.shard.restore(request.cut, request.generation, model, request.replace_model)
            return ps_pb2.RestoreResponse(incarnation=self.shard.incarnation)

        return self._call("Restore", context, run, request)

    def Stats(self, request: ps_pb2.StatsRequest, context: grpc.ServicerContext) -> ps_pb2.StatsResponse:
        def run() -> ps_pb2.StatsResponse:
            tables: list[Any] = [ps_pb2.TableStats(**vars(t)) for t in self.shard.stats()]
            for t in tables:
                metrics.ROWS.labels(t.name).set(t.rows)
            return ps_pb2.StatsResponse(
                shard_index=self.shard.index,
                shard_count=self.shard.count,
                tables=tables,
                update_seq=self.shard.update_seq,
                checkpoint_offsets=self.shard.checkpoint_offsets,
                checkpoint_seq=self.shard.checkpoint_seq,
                incarnation=self.shard.incarnation,
                generation=self.shard.generation,
                committed_cut=self.shard.committed.cut,
                cuts=self.shard.cuts(),
                drops_rows=self.shard.drops_rows,
                export_root=str(self.shard.export_root.resolve()) if self.shard.export_root else "",
                durable=self.shard.store is not None,
            )

        return self._call("Stats", context, run, request)
