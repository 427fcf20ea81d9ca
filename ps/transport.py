"""The seam between the PS client and its shards: gRPC for shard processes, or in-process
calls to Shard objects when one machine trains alone (`--ps local`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc
import numpy as np
import numpy.typing as npt

from ctr.daemon import MAX_MESSAGE_BYTES
from protos import ps_pb2, ps_pb2_grpc
from ps.codecs import Codec
from ps.shard import ExportedFile, Shard, TableStats
from ps.wire import KEYS_DELTA_VARINT, decode_rows, encode_keys


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
    def pull(
        self, shard: int, table: str, keys: npt.NDArray[np.uint64], open_session: bool
    ) -> tuple[int, npt.NDArray[np.float32]]: ...

    def push(
        self, shard: int, table: str, keys: npt.NDArray[np.uint64], session_id: int, grads: npt.NDArray[np.float32], codec: Codec
    ) -> None: ...

    def pull_dense(self, shard: int, table: str) -> tuple[int, npt.NDArray[np.float32]]: ...

    def push_dense(self, shard: int, table: str, grads: npt.NDArray[np.float32], codec: Codec) -> None: ...

    def export(self, shard: int, full: bool, directory: str) -> tuple[list[ExportedFile], int]: ...

    def checkpoint(self, shard: int, offsets: bytes) -> tuple[int, int]: ...

    def status(self, shard: int) -> ShardStatus: ...

    def close(self) -> None: ...


class LocalTransport:
    """Calls Shard objects in this process; the codec still round-trips the gradients."""

    def __init__(self, shards: list[Shard]) -> None:
        self.shards = shards

    def pull(
        self, shard: int, table: str, keys: npt.NDArray[np.uint64], open_session: bool
    ) -> tuple[int, npt.NDArray[np.float32]]:
        return self.shards[shard].pull(table, keys, open_session=False)

    def push(
        self, shard: int, table: str, keys: npt.NDArray[np.uint64], session_id: int, grads: npt.NDArray[np.float32], codec: Codec
    ) -> None:
        decoded = codec.decode(codec.encode(grads.reshape(-1)), grads.size)
        self.shards[shard].push(table, keys, decoded)

    def pull_dense(self, shard: int, table: str) -> tuple[int, npt.NDArray[np.float32]]:
        return self.shards[shard].pull_dense(table)

    def push_dense(self, shard: int, table: str, grads: npt.NDArray[np.float32], codec: Codec) -> None:
        self.shards[shard].push_dense(table, codec.decode(codec.encode(grads), grads.size))

    def export(self, shard: int, full: bool, directory: str) -> tuple[list[ExportedFile], int]:
        return self.shards[shard].export(full, Path(directory))

    def checkpoint(self, shard: int, offsets: bytes) -> tuple[int, int]:
        return self.shards[shard].checkpoint(offsets)

    def status(self, shard: int) -> ShardStatus:
        s = self.shards[shard]
        return ShardStatus(s.index, s.count, s.update_seq, s.checkpoint_seq, s.checkpoint_offsets, s.stats())

    def close(self) -> None:
        pass


class GrpcTransport:
    """One channel per shard address; protobuf stays inside this class."""

    def __init__(self, addresses: list[str], key_encoding: int = KEYS_DELTA_VARINT, timeout: float = 60.0) -> None:
        opts = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ]
        self.channels = [grpc.insecure_channel(a, options=opts) for a in addresses]
        self.stubs = [ps_pb2_grpc.ParameterServerStub(c) for c in self.channels]
        self.key_encoding = key_encoding
        self.timeout = timeout

    def pull(
        self, shard: int, table: str, keys: npt.NDArray[np.uint64], open_session: bool
    ) -> tuple[int, npt.NDArray[np.float32]]:
        req = ps_pb2.PullRequest(
            table=table,
            keys=encode_keys(keys, self.key_encoding),
            key_count=keys.shape[0],
            key_encoding=self.key_encoding,  # type: ignore[arg-type]
            open_session=open_session,  # type: ignore[arg-type]
        )
        resp = self.stubs[shard].Pull(req, timeout=self.timeout)
        return resp.session_id, decode_rows(resp.rows, keys.shape[0], resp.dim)

    def push(
        self, shard: int, table: str, keys: npt.NDArray[np.uint64], session_id: int, grads: npt.NDArray[np.float32], codec: Codec
    ) -> None:
        req = ps_pb2.PushRequest(
            table=table,
            key_count=keys.shape[0],
            codec=codec.wire_id,  # type: ignore[arg-type]
            payload=codec.encode(grads.reshape(-1)),
        )
        if session_id:
            req.session_id = session_id
        else:
            req.keys = encode_keys(keys, self.key_encoding)
            req.key_encoding = self.key_encoding  # type: ignore[assignment]
        try:
            self.stubs[shard].Push(req, timeout=self.timeout)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.FAILED_PRECONDITION and session_id:
                raise SessionLost(str(e.details())) from None
            raise

    def pull_dense(self, shard: int, table: str) -> tuple[int, npt.NDArray[np.float32]]:
        resp = self.stubs[shard].PullDense(ps_pb2.DensePullRequest(table=table), timeout=self.timeout)
        return resp.offset, np.frombuffer(resp.values, dtype="<f4").copy()

    def push_dense(self, shard: int, table: str, grads: npt.NDArray[np.float32], codec: Codec) -> None:
        req = ps_pb2.DensePushRequest(table=table, codec=codec.wire_id, payload=codec.encode(grads))  # type: ignore[arg-type]
        self.stubs[shard].PushDense(req, timeout=self.timeout)

    def export(self, shard: int, full: bool, directory: str) -> tuple[list[ExportedFile], int]:
        kind = ps_pb2.EXPORT_FULL if full else ps_pb2.EXPORT_DELTA
        resp = self.stubs[shard].Export(ps_pb2.ExportRequest(kind=kind, directory=directory), timeout=600)
        files = [ExportedFile(f.name, f.table, f.role, f.size, f.sha256, f.rows) for f in resp.files]
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
