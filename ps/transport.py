"""The seam between the PS client and its shards: gRPC for shard processes, or in-process
calls to Shard objects when one machine trains alone (`--ps local`).

Both count the bytes a call puts on the wire (keys, values, headers): `pull_bytes` for
pulls (request and reply), `push_bytes` for push requests. The in-process transport counts
what the same call would send over gRPC, less protobuf framing."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
import numpy as np
import numpy.typing as npt

from ctr.daemon import MAX_MESSAGE_BYTES
from ctr.modelspec import TableSpec
from protos import ps_pb2, ps_pb2_grpc
from ps.codecs import FP64, Codec
from ps.shard import ExportedFile, Shard, TableStats
from ps.tables import DELTA
from ps.wire import KEYS_DELTA_VARINT, decode_rows, encode_keys, table_decl

Rows = npt.NDArray[Any]  # float32 weights or gradients, float64 optimizer state or deltas


class SessionLost(RuntimeError):
    """The shard forgot a pull session; the caller resends the keys."""


@dataclass(frozen=True)
class ShardStatus:
    index: int
    count: int
    update_seq: int
    checkpoint_seq: int
    checkpoint_offsets: bytes
    tables: list[TableStats]


class ShardTransport(Protocol):
    pull_bytes: int
    push_bytes: int

    def declare(self, shard: int, specs: list[TableSpec]) -> list[bool]: ...

    def pull(self, shard: int, table: str, keys: npt.NDArray[np.uint64], open_session: bool, state: bool) -> tuple[int, Rows]: ...

    def push(
        self, shard: int, table: str, keys: npt.NDArray[np.uint64], session_id: int, values: Rows, kind: str, codec: Codec
    ) -> None: ...

    def pull_dense(self, shard: int, table: str, state: bool) -> tuple[int, Rows]: ...

    def push_dense(self, shard: int, table: str, values: Rows, kind: str, codec: Codec) -> None: ...

    def export(self, shard: int, full: bool, directory: str) -> tuple[list[ExportedFile], int]: ...

    def checkpoint(self, shard: int, offsets: bytes) -> tuple[int, int]: ...

    def status(self, shard: int) -> ShardStatus: ...

    def close(self) -> None: ...


class _ByteCounter:
    def __init__(self) -> None:
        self.pull_bytes = 0
        self.push_bytes = 0
        self._lock = threading.Lock()

    def count(self, pull: int = 0, push: int = 0) -> None:
        with self._lock:
            self.pull_bytes += pull
            self.push_bytes += push


def _codec_for(kind: str, codec: Codec) -> Codec:
    """State deltas always travel as float64: accumulators need every digit."""
    return FP64 if kind == DELTA else codec


class LocalTransport(_ByteCounter):
    """Calls Shard objects in this process; the codec still round-trips the values."""

    def __init__(self, shards: list[Shard]) -> None:
        super().__init__()
        self.shards = shards

    def declare(self, shard: int, specs: list[TableSpec]) -> list[bool]:
        return self.shards[shard].declare(specs)

    def pull(self, shard: int, table: str, keys: npt.NDArray[np.uint64], open_session: bool, state: bool) -> tuple[int, Rows]:
        _, rows = self.shards[shard].pull(table, keys, open_session=False, state=state)
        self.count(pull=len(encode_keys(keys, KEYS_DELTA_VARINT)) + rows.nbytes)
        # no session is kept in-process; a nonzero id tells push that gRPC would name one
        return int(open_session), rows

    def push(
        self, shard: int, table: str, keys: npt.NDArray[np.uint64], session_id: int, values: Rows, kind: str, codec: Codec
    ) -> None:
        c = _codec_for(kind, codec)
        payload = c.encode(values.reshape(-1))
        keys_bytes = 0 if session_id else len(encode_keys(keys, KEYS_DELTA_VARINT))
        self.count(push=keys_bytes + len(payload))
        self.shards[shard].push(table, keys, c.decode(payload, values.size), kind)

    def pull_dense(self, shard: int, table: str, state: bool) -> tuple[int, Rows]:
        lo, values = self.shards[shard].pull_dense(table, state)
        self.count(pull=values.nbytes)
        return lo, values

    def push_dense(self, shard: int, table: str, values: Rows, kind: str, codec: Codec) -> None:
        c = _codec_for(kind, codec)
        payload = c.encode(values.reshape(-1))
        self.count(push=len(payload))
        self.shards[shard].push_dense(table, c.decode(payload, values.size), kind)

    def export(self, shard: int, full: bool, directory: str) -> tuple[list[ExportedFile], int]:
        return self.shards[shard].export(full, Path(directory))

    def checkpoint(self, shard: int, offsets: bytes) -> tuple[int, int]:
        return self.shards[shard].checkpoint(offsets)

    def status(self, shard: int) -> ShardStatus:
        s = self.shards[shard]
        return ShardStatus(s.index, s.count, s.update_seq, s.checkpoint_seq, s.checkpoint_offsets, s.stats())

    def close(self) -> None:
        pass


_PUSH_KINDS = {"gradient": ps_pb2.PUSH_GRADIENT, "delta": ps_pb2.PUSH_STATE_DELTA}


class GrpcTransport(_ByteCounter):
    """One channel per shard address; protobuf stays inside this class."""

    def __init__(self, addresses: list[str], key_encoding: int = KEYS_DELTA_VARINT, timeout: float = 60.0) -> None:
        super().__init__()
        opts = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ]
        self.channels = [grpc.insecure_channel(a, options=opts) for a in addresses]
        self.stubs = [ps_pb2_grpc.ParameterServerStub(c) for c in self.channels]
        self.key_encoding = key_encoding
        self.timeout = timeout

    def declare(self, shard: int, specs: list[TableSpec]) -> list[bool]:
        req = ps_pb2.DeclareTablesRequest(tables=[table_decl(s) for s in specs])
        return list(self.stubs[shard].DeclareTables(req, timeout=self.timeout).created)

    def pull(self, shard: int, table: str, keys: npt.NDArray[np.uint64], open_session: bool, state: bool) -> tuple[int, Rows]:
        req = ps_pb2.PullRequest(
            table=table,
            keys=encode_keys(keys, self.key_encoding),
            key_count=keys.shape[0],
            key_encoding=self.key_encoding,  # type: ignore[arg-type]
            open_session=open_session,  # type: ignore[arg-type]
            state=state,
        )
        resp = self.stubs[shard].Pull(req, timeout=self.timeout)
        self.count(pull=req.ByteSize() + resp.ByteSize())
        return resp.session_id, decode_rows(resp.rows, keys.shape[0], resp.dim, np.float64 if resp.state else np.float32)

    def push(
        self, shard: int, table: str, keys: npt.NDArray[np.uint64], session_id: int, values: Rows, kind: str, codec: Codec
    ) -> None:
        c = _codec_for(kind, codec)
        req = ps_pb2.PushRequest(
            table=table,
            key_count=keys.shape[0],
            codec=c.wire_id,  # type: ignore[arg-type]
            payload=c.encode(values.reshape(-1)),
            kind=_PUSH_KINDS[kind],
        )
        if session_id:
            req.session_id = session_id
        else:
            req.keys = encode_keys(keys, self.key_encoding)
            req.key_encoding = self.key_encoding  # type: ignore[assignment]
        self.count(push=req.ByteSize())
        try:
            self.stubs[shard].Push(req, timeout=self.timeout)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.FAILED_PRECONDITION and session_id:
                raise SessionLost(str(e.details())) from None
            raise

    def pull_dense(self, shard: int, table: str, state: bool) -> tuple[int, Rows]:
        req = ps_pb2.DensePullRequest(table=table, state=state)
        resp = self.stubs[shard].PullDense(req, timeout=self.timeout)
        self.count(pull=req.ByteSize() + resp.ByteSize())
        if state:
            return resp.offset, np.frombuffer(resp.values, dtype="<f8").reshape(-1, max(1, resp.width)).copy()
        return resp.offset, np.frombuffer(resp.values, dtype="<f4").copy()

    def push_dense(self, shard: int, table: str, values: Rows, kind: str, codec: Codec) -> None:
        c = _codec_for(kind, codec)
        req = ps_pb2.DensePushRequest(
            table=table,
            codec=c.wire_id,  # type: ignore[arg-type]
            payload=c.encode(values.reshape(-1)),
            kind=_PUSH_KINDS[kind],
        )
        self.count(push=req.ByteSize())
        self.stubs[shard].PushDense(req, timeout=self.timeout)

    def export(self, shard: int, full: bool, directory: str) -> tuple[list[ExportedFile], int]:
        kind = ps_pb2.EXPORT_FULL if full else ps_pb2.EXPORT_DELTA
        resp = self.stubs[shard].Export(ps_pb2.ExportRequest(kind=kind, directory=directory), timeout=600)
        files = [ExportedFile(f.name, f.table, f.role, f.size, f.sha256, f.rows, f.columns) for f in resp.files]
        return files, resp.export_seq

    def checkpoint(self, shard: int, offsets: bytes) -> tuple[int, int]:
        resp = self.stubs[shard].Checkpoint(ps_pb2.CheckpointRequest(stream_offsets=offsets), timeout=600)
        return resp.rows_written, resp.checkpoint_seq

    def status(self, shard: int) -> ShardStatus:
        r = self.stubs[shard].Stats(ps_pb2.StatsRequest(), timeout=self.timeout)
        tables = [TableStats(t.name, t.kind, t.rows, t.capacity, t.dim, t.memory_bytes) for t in r.tables]
        return ShardStatus(r.shard_index, r.shard_count, r.update_seq, r.checkpoint_seq, r.checkpoint_offsets, tables)

    def close(self) -> None:
        for c in self.channels:
            c.close()
