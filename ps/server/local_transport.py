"""In-process shards behind the client's transport (`--ps local`): calls Shard objects in this
process, counting what the same call would send over gRPC, less protobuf framing. It imports
no gRPC."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ctr.format.varint import encode_varints
from ctr.model.spec import TableSpec
from ps.api import (
    STATE_DIFF,
    BaseChanged,
    CachedPull,
    Declared,
    DensePush,
    ExportedFile,
    KnownRows,
    PushAck,
    Rows,
    SessionLost,
    ShardStatus,
    SparsePush,
)
from ps.compression.payload import decode_payload, encode_rows
from ps.server.errors import BaseMismatch, RowsMoved, SessionExpired, ShardError
from ps.server.shard import Shard
from ps.transport import ByteCounter
from ps.wire import KEYS_DELTA_VARINT, encode_keys, encode_known_ids

FIXED_FIELDS = 16  # about what a kept pull's request and reply spend on table, counts, ids and layout


class LocalTransport(ByteCounter):
    """Calls Shard objects in this process; the codec still round-trips the values."""

    remote = False

    def __init__(self, shards: list[Shard]) -> None:
        super().__init__()
        self.shards = shards
        self.rng = np.random.default_rng(0)  # int8 pull replies round stochastically

    def declare(self, shard: int, specs: list[TableSpec]) -> Declared:
        return self.shards[shard].declare(specs, self.model, self.replace_model)

    def pull(
        self, shard: int, table: str, keys: npt.NDArray[np.uint64], open_session: bool, state: bool, codec: str = ""
    ) -> tuple[int, Rows]:
        _, rows = self.shards[shard].pull(table, keys, open_session=False, state=state)
        size = rows.nbytes
        if codec:  # the same round trip as over gRPC
            payload = encode_rows(rows, codec, self.rng)
            size = len(payload)
            rows = decode_payload(payload, *rows.shape)[1]
        self.count(table, "sparse_pull", len(encode_keys(keys, KEYS_DELTA_VARINT)), size)
        # no session is kept in-process; a nonzero id tells push that gRPC would name one
        return int(open_session), rows

    def pull_known(self, shard: int, table: str, keys: npt.NDArray[np.uint64], known: KnownRows, codec: str = "") -> CachedPull:
        got = self.shards[shard].pull_known(table, keys, known)  # a real session: its push checks conflicts
        rows = np.concatenate([got.stored_rows, got.changed_rows])
        size = rows.nbytes
        if codec and not got.stale:
            payload = encode_rows(rows, codec, self.rng)
            size = len(payload)
            rows = decode_payload(payload, *rows.shape)[1]
            n = got.stored_rows.shape[0]
            got = CachedPull(got.session_id, False, got.layout, got.stored, got.stored_ids, rows[:n], got.changed, rows[n:])
        sent = len(encode_keys(keys, KEYS_DELTA_VARINT)) + len(encode_known_ids(known.ids).data) + FIXED_FIELDS
        if known.stale is not None and known.stale.any():
            sent += (known.ids.shape[0] + 7) // 8
        bitmaps = (keys.shape[0] + 7) // 8 + ((known.ids.shape[0] + 7) // 8 if got.changed.any() else 0)
        ids = len(encode_varints(got.stored_ids.astype(np.uint64)))
        self.count(table, "sparse_pull", sent, size + bitmaps + ids + FIXED_FIELDS)
        return got

    def push(self, part: SparsePush) -> PushAck | None:
        table, keys, sessions, kind = part.table, part.keys, part.sessions, part.kind
        named = np.asarray(sessions, dtype=np.uint64)
        keys_bytes = len(encode_varints(named)) if sessions else len(encode_keys(keys, KEYS_DELTA_VARINT))
        s = self.shards[part.shard]
        if part.ids is not None and not sessions:  # what a remote shard would do with them
            keys_bytes = len(encode_known_ids(part.ids.ids).data)
            try:
                named_keys = s.keys_of(table, part.ids.layout, part.ids.ids)
            except RowsMoved as e:  # as gRPC says FAILED_PRECONDITION: the client sends the keys
                raise SessionLost(str(e)) from None
            if not np.array_equal(named_keys, keys):
                raise ShardError(f"row ids name {named_keys.shape[0]} other keys than the push's {keys.shape[0]}")
        # the encoder's decoded values when it kept them: the same numbers, without a copy
        subset, values = part.decoded or decode_payload(part.payload, keys.shape[0], s.push_width(table, kind))
        sent = keys if subset is None else keys[subset]
        if not part.client:
            self.count(table, "sparse_push", keys_bytes + len(part.payload))
            s.push(table, sent, values, kind, part.samples, self.generation)
            return None
        recorded, as_key = None, None
        if len(sessions) == 1:  # a session of pull_known: the shard kept it
            try:
                session = s.session(table, sessions)
            except SessionExpired as e:  # as gRPC says FAILED_PRECONDITION: the client resends the keys
                raise SessionLost(str(e)) from None
            recorded, as_key = session.reads_of(part.client, subset)
        out = s.push_as(part.client, recorded, table, sent, values, kind, part.samples, self.generation, as_key)
        conflicts = out.conflicts_of_named(keys.shape[0], subset)
        reply = len(encode_varints(out.new_ids.astype(np.uint64) + np.uint64(1)))
        reply += (len(conflicts) + 7) // 8 if out.conflicts.any() else 0
        self.count(table, "sparse_push", keys_bytes + len(part.payload), reply)
        return PushAck(conflicts, out.new_ids, out.layout, out.epoch, out.lease_s)

    def pull_dense(self, shard: int, table: str, state: bool) -> tuple[int, Rows]:
        lo, values = self.shards[shard].pull_dense(table, state)
        self.count(table, "dense_pull", 0, values.nbytes)
        return lo, values

    def push_dense(self, part: DensePush) -> None:
        self.count(part.table, "dense_push", len(part.payload))
        s = self.shards[part.shard]
        if part.kind == STATE_DIFF:
            try:
                s.push_dense_diff(part.table, part.payload, part.base_digest, part.samples, self.generation)
            except BaseMismatch as e:
                raise BaseChanged(str(e)) from None
            return
        _, values = decode_payload(part.payload, *s.dense_push_shape(part.table, part.kind))
        s.push_dense(part.table, values, part.kind, part.steps, part.samples, self.generation)

    def export(self, shard: int, full: bool, name: str) -> tuple[list[ExportedFile], int]:
        return self.shards[shard].export(full, name)

    def prepare(self, shard: int, cut: int, offsets: bytes) -> int:
        return self.shards[shard].prepare(cut, offsets, self.generation)

    def commit(self, shard: int, cut: int) -> int:
        return self.shards[shard].commit(cut)

    def restore(self, shard: int, cut: int, generation: int) -> int:
        self.shards[shard].restore(cut, generation, self.model, self.replace_model)
        return self.shards[shard].incarnation

    def status(self, shard: int) -> ShardStatus:
        s = self.shards[shard]
        return ShardStatus(
            s.index,
            s.count,
            s.update_seq,
            s.checkpoint_seq,
            s.checkpoint_offsets,
            s.stats(),
            s.incarnation,
            s.generation,
            s.committed.cut,
            tuple(s.cuts()),
            s.drops_rows,
            str(s.export_root or ""),
            s.store is not None,
        )

    def close(self) -> None:
        pass
