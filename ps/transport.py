"""The seam between the PS client and its shards: gRPC for shard processes
(ps.grpc_transport), or in-process calls to Shard objects when one machine trains alone
(`--ps local`, here; it imports no gRPC).

Both count the bytes a call puts on the wire (keys, values, headers): `pull_bytes` for
pulls (request and reply), `push_bytes` for push requests. The in-process transport counts
what the same call would send over gRPC, less protobuf framing."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ctr.modelspec import TableSpec
from ctr.varint import encode_varints
from ps.compression.payload import decode_payload, encode_rows
from ps.identity import ModelIdentity
from ps.shard import ExportedFile, Shard, TableStats
from ps.wire import KEYS_DELTA_VARINT, encode_keys

Rows = npt.NDArray[Any]  # float32 weights or gradients, float64 optimizer state or deltas


class SessionLost(RuntimeError):
    """The shard forgot a pull session; the caller resends the keys."""


class ShardRestarted(RuntimeError):
    """A shard answered with a new incarnation: it restarted from its committed cut, so every
    shard must go back to a common cut (trainer/recovery.py)."""

    def __init__(self, shard: int, why: str = "") -> None:
        super().__init__(
            why or f"PS shard {shard} restarted (a new incarnation): it lost what was pushed since its committed cut"
        )
        self.shard = shard


class StoppedWhileUnreachable(RuntimeError):
    """The caller was asked to stop (SIGTERM) while a shard could not be reached: its calls
    stop retrying, and the next start takes up from the last checkpoint cut."""


@dataclass(frozen=True)
class ShardStatus:
    index: int
    count: int
    update_seq: int
    checkpoint_seq: int
    checkpoint_offsets: bytes
    tables: list[TableStats]
    incarnation: int = 0
    generation: int = 0
    committed_cut: int = 0
    cuts: tuple[int, ...] = ()
    drops_rows: bool = False  # admission or eviction is on: a push may not land on every row it names
    export_root: str = ""  # where the shard writes exports ("": none)


class ShardTransport(Protocol):
    pull_bytes: int
    push_bytes: int
    generation: int  # the trainer generation pushes carry
    model: ModelIdentity | None  # the model restores and declarations name (ps.identity); None: no check
    replace_model: bool  # they drop another model the shards hold instead of being refused

    incarnations: dict[int, int]

    def forget_incarnations(self) -> None: ...

    def declare(self, shard: int, specs: list[TableSpec]) -> list[bool]: ...

    def pull(
        self, shard: int, table: str, keys: npt.NDArray[np.uint64], open_session: bool, state: bool, codec: str = ""
    ) -> tuple[int, Rows]:
        """codec: "" for raw rows, else the value codec the rows travel in."""

    def push(
        self,
        shard: int,
        table: str,
        keys: npt.NDArray[np.uint64],
        sessions: tuple[int, ...],
        payload: bytes,
        kind: str,
        samples: int = 0,
    ) -> None:
        """keys: those the named pull sessions hold (one session's, or the union of several
        workers' when a leader summed their pushes; the payload may carry a subset of them),
        or, with no session, the keys the payload's rows belong to, which then travel.
        samples: of the batches whose updates the push carries (counted per table)."""

    def pull_dense(self, shard: int, table: str, state: bool) -> tuple[int, Rows]: ...

    def push_dense(self, shard: int, table: str, payload: bytes, kind: str, steps: int = 1, samples: int = 0) -> None: ...

    def export(self, shard: int, full: bool, name: str) -> tuple[list[ExportedFile], int]:
        """Shard writes export `name`: a folder under its export root."""
        ...

    def prepare(self, shard: int, cut: int, offsets: bytes) -> int: ...

    def commit(self, shard: int, cut: int) -> int: ...

    def restore(self, shard: int, cut: int, generation: int) -> int:
        """Returns the incarnation of the shard process restored."""

    def status(self, shard: int) -> ShardStatus: ...

    def close(self) -> None: ...


class _ByteCounter:
    """Byte counts, the trainer generation pushes carry, and each shard's incarnation."""

    def __init__(self) -> None:
        self.pull_bytes = 0
        self.push_bytes = 0
        self._lock = threading.Lock()
        self.generation = 0
        self.model: ModelIdentity | None = None
        self.replace_model = False
        self.incarnations: dict[int, int] = {}

    def saw(self, shard: int, incarnation: int) -> None:
        """Remembers a shard's incarnation; a new one means the shard restarted."""
        known = self.incarnations.setdefault(shard, incarnation)
        if incarnation and known != incarnation:
            raise ShardRestarted(shard)

    def forget_incarnations(self) -> None:
        """Before a restore: whichever process answers is the one restored."""
        self.incarnations.clear()

    def count(self, pull: int = 0, push: int = 0) -> None:
        with self._lock:
            self.pull_bytes += pull
            self.push_bytes += push


class LocalTransport(_ByteCounter):
    """Calls Shard objects in this process; the codec still round-trips the values."""

    def __init__(self, shards: list[Shard]) -> None:
        super().__init__()
        self.shards = shards
        self.rng = np.random.default_rng(0)  # int8 pull replies round stochastically

    def declare(self, shard: int, specs: list[TableSpec]) -> list[bool]:
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
        self.count(pull=len(encode_keys(keys, KEYS_DELTA_VARINT)) + size)
        # no session is kept in-process; a nonzero id tells push that gRPC would name one
        return int(open_session), rows

    def push(
        self,
        shard: int,
        table: str,
        keys: npt.NDArray[np.uint64],
        sessions: tuple[int, ...],
        payload: bytes,
        kind: str,
        samples: int = 0,
    ) -> None:
        named = np.asarray(sessions, dtype=np.uint64)
        keys_bytes = len(encode_varints(named)) if sessions else len(encode_keys(keys, KEYS_DELTA_VARINT))
        self.count(push=keys_bytes + len(payload))
        s = self.shards[shard]
        subset, values = decode_payload(payload, keys.shape[0], s.push_width(table, kind))
        s.push(table, keys if subset is None else keys[subset], values, kind, samples, self.generation)

    def pull_dense(self, shard: int, table: str, state: bool) -> tuple[int, Rows]:
        lo, values = self.shards[shard].pull_dense(table, state)
        self.count(pull=values.nbytes)
        return lo, values

    def push_dense(self, shard: int, table: str, payload: bytes, kind: str, steps: int = 1, samples: int = 0) -> None:
        self.count(push=len(payload))
        s = self.shards[shard]
        _, values = decode_payload(payload, *s.dense_push_shape(table, kind))
        s.push_dense(table, values, kind, steps, samples, self.generation)

    def export(self, shard: int, full: bool, name: str) -> tuple[list[ExportedFile], int]:
        return self.shards[shard].export(full, name)

    def prepare(self, shard: int, cut: int, offsets: bytes) -> int:
        return self.shards[shard].prepare(cut, offsets)

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
        )

    def close(self) -> None:
        pass
