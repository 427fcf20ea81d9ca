"""The seam between the PS client and its shards: gRPC for shard processes
(ps.client.grpc_transport), or in-process calls to Shard objects when one machine trains alone
(`--ps local`, here; it imports no gRPC).

Both count every byte of every call, both ways, in a `WireLedger`: per table and kind
(sparse and dense pulls and pushes, residual drains by cause, control calls), the
serialized request sent and the serialized reply received. The in-process transport
counts what the same call would send over gRPC, less protobuf framing."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from ctr.model.spec import TableSpec
from ps.api import (
    CachedPull,
    Declared,
    DensePush,
    ExportedFile,
    KnownRows,
    ModelIdentity,
    PushAck,
    Rows,
    ShardRestarted,
    ShardStatus,
    SparsePush,
)

PULLS = ("sparse_pull", "dense_pull")
PUSHES = ("sparse_push", "dense_push")
DRAIN_CAUSES = ("cut", "export", "end")  # when error-feedback residuals are sent exactly
CONTROL = "control"  # declare, stats, prepare, commit, export, restore


class WireLedger:
    """Bytes sent and received per (table, kind); a kind is a direction of PULLS or PUSHES,
    `drain_<cause>` (a sparse push of residuals, DRAIN_CAUSES), or CONTROL (table "").
    A sparse push counts as a drain while the thread that sends it is inside
    `draining(cause)`. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bytes: dict[tuple[str, str], list[int]] = {}
        self._cause = threading.local()

    @contextmanager
    def draining(self, cause: str) -> Iterator[None]:
        assert cause in DRAIN_CAUSES, cause
        self._cause.value = cause
        try:
            yield
        finally:
            self._cause.value = None

    def count(self, table: str, kind: str, sent: int, received: int) -> None:
        cause = getattr(self._cause, "value", None)
        if kind == "sparse_push" and cause is not None:
            kind = f"drain_{cause}"
        with self._lock:
            slot = self._bytes.setdefault((table, kind), [0, 0])
            slot[0] += sent
            slot[1] += received

    def snapshot(self) -> dict[str, dict[str, tuple[int, int]]]:
        """{table: {kind: (sent, received)}}; control calls under table ""."""
        out: dict[str, dict[str, tuple[int, int]]] = {}
        with self._lock:
            for (table, kind), (sent, received) in sorted(self._bytes.items()):
                out.setdefault(table, {})[kind] = (sent, received)
        return out

    def total(self, kinds: tuple[str, ...] | None = None) -> int:
        """Bytes both ways of the given kinds (all kinds when None; drains are pushes)."""
        with self._lock:
            return sum(
                sent + received
                for (_, kind), (sent, received) in self._bytes.items()
                if kinds is None or kind in kinds or ("drain" in kinds and kind.startswith("drain_"))
            )


T = TypeVar("T")


class FanOut(Protocol):
    """Calls fn(shard) for each shard given (all when None), in parallel; results in that order."""

    def __call__(self, fn: Callable[[int], T], shards: list[int] | None = None, /) -> list[T]: ...


class ShardTransport(Protocol):
    wire: WireLedger
    generation: int  # the trainer generation pushes carry
    model: ModelIdentity | None  # the model restores and declarations name (ps.api); None: no check
    replace_model: bool  # they drop another model the shards hold instead of being refused
    remote: bool  # calls cross a network, so overlapping them with work pays

    incarnations: dict[int, int]

    @property
    def pull_bytes(self) -> int: ...

    @property
    def push_bytes(self) -> int: ...

    def forget_incarnations(self) -> None: ...

    def declare(self, shard: int, specs: list[TableSpec]) -> Declared: ...

    def pull(
        self, shard: int, table: str, keys: npt.NDArray[np.uint64], open_session: bool, state: bool, codec: str = ""
    ) -> tuple[int, Rows]:
        """codec: "" for raw rows, else the value codec the rows travel in."""

    def pull_known(self, shard: int, table: str, keys: npt.NDArray[np.uint64], known: KnownRows, codec: str = "") -> CachedPull:
        """A state pull of a client that keeps rows: `keys` it does not hold, `known` the
        row ids it does (docs/design/pull-cache.md); opens a session over both."""

    def push(self, part: SparsePush) -> PushAck | None:
        """Returns what a client that keeps rows learns (part.client != 0), else None."""

    def pull_dense(self, shard: int, table: str, state: bool) -> tuple[int, Rows]: ...

    def push_dense(self, part: DensePush) -> None: ...

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
    """The wire ledger, the trainer generation pushes carry, and each shard's incarnation."""

    def __init__(self) -> None:
        self.wire = WireLedger()
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

    def count(self, table: str, kind: str, sent: int, received: int = 0) -> None:
        self.wire.count(table, kind, sent, received)

    @property
    def pull_bytes(self) -> int:
        """Both ways, of sparse and dense pulls."""
        return self.wire.total(PULLS)

    @property
    def push_bytes(self) -> int:
        """Both ways, of sparse and dense pushes and residual drains."""
        return self.wire.total((*PUSHES, "drain"))
