"""The seam between the PS client and its shards: gRPC for shard processes
(ps.client.grpc_transport), or in-process calls to Shard objects when one machine trains alone
(`--ps local`, here; it imports no gRPC).

Both count the bytes a call puts on the wire (keys, values, headers): `pull_bytes` for
pulls (request and reply), `push_bytes` for push requests. The in-process transport counts
what the same call would send over gRPC, less protobuf framing."""

from __future__ import annotations

import threading
from typing import Protocol

import numpy as np
import numpy.typing as npt

from ctr.model.spec import TableSpec
from ps.api import ExportedFile, ModelIdentity, Rows, ShardRestarted, ShardStatus


class ShardTransport(Protocol):
    pull_bytes: int
    push_bytes: int
    generation: int  # the trainer generation pushes carry
    model: ModelIdentity | None  # the model restores and declarations name (ps.api); None: no check
    replace_model: bool  # they drop another model the shards hold instead of being refused
    remote: bool  # calls cross a network, so overlapping them with work pays

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


class ByteCounter:
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
