"""PS client library: dedups and splits a batch's keys by shard, and talks to all shards in
parallel through one transport."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from ctr.routing import dense_range, shard_of
from ps.codecs import Codec, codec_named
from ps.shard import ExportedFile, Shard, TableSpec
from ps.tables import FtrlParams
from ps.transport import GrpcTransport, LocalTransport, SessionLost, ShardStatus, ShardTransport

T = TypeVar("T")


@dataclass(frozen=True)
class PullSession:
    """What a pull leaves for the matching push: the split and each shard's session id."""

    keys: npt.NDArray[np.uint64]
    order: npt.NDArray[np.int64]
    bounds: npt.NDArray[np.int64]
    session_ids: tuple[int, ...]


class PSClient:
    def __init__(self, transport: ShardTransport, shard_count: int, codec: str = "fp32") -> None:
        self.transport = transport
        self.n = shard_count
        self.codec: Codec = codec_named(codec)
        self.pool = ThreadPoolExecutor(max_workers=max(1, shard_count))

    @classmethod
    def connect(cls, addresses: list[str], codec: str = "fp32") -> PSClient:
        return cls(GrpcTransport(addresses), len(addresses), codec)

    @classmethod
    def local(cls, shard_count: int, specs: list[TableSpec], ftrl: FtrlParams, codec: str = "fp32") -> PSClient:
        shards = [Shard(i, shard_count, specs, ftrl) for i in range(shard_count)]
        return cls(LocalTransport(shards), shard_count, codec)

    def close(self) -> None:
        self.pool.shutdown()
        self.transport.close()

    def _each(self, fn: Callable[[int], T]) -> list[T]:
        if self.n == 1:
            return [fn(0)]
        return list(self.pool.map(fn, range(self.n)))

    def _split(self, keys: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        owner = shard_of(keys, self.n)
        order = np.argsort(owner, kind="stable")  # stable keeps each shard's keys sorted
        bounds = np.searchsorted(owner[order], np.arange(self.n + 1))
        return order, bounds

    def pull(self, table: str, keys: npt.NDArray[np.uint64], session: bool = True) -> tuple[npt.NDArray[np.float32], PullSession]:
        """Rows for sorted unique keys, and the session a following push may name."""
        order, bounds = self._split(keys)

        def one(s: int) -> tuple[int, npt.NDArray[np.float32]]:
            part = keys[order[bounds[s] : bounds[s + 1]]]
            if part.shape[0] == 0:
                return 0, np.zeros((0, 0), dtype=np.float32)
            return self.transport.pull(s, table, part, session)

        results = self._each(one)
        dim = max((r.shape[1] for _, r in results if r.shape[0]), default=1)
        rows = np.zeros((keys.shape[0], dim), dtype=np.float32)
        for s, (_, r) in enumerate(results):
            if r.shape[0]:
                rows[order[bounds[s] : bounds[s + 1]]] = r
        return rows, PullSession(keys, order, bounds, tuple(sid for sid, _ in results))

    def push(
        self, table: str, keys: npt.NDArray[np.uint64], grads: npt.NDArray[np.float32], session: PullSession | None = None
    ) -> None:
        """Pushes per-key gradients; names the pull session when keys are the pulled ones."""
        if session is not None and session.keys is keys:
            order, bounds, sids = session.order, session.bounds, session.session_ids
        else:
            order, bounds = self._split(keys)
            sids = (0,) * self.n
        g = grads.reshape(keys.shape[0], -1)

        def one(s: int) -> None:
            idx = order[bounds[s] : bounds[s + 1]]
            if idx.shape[0] == 0:
                return
            part_g = np.ascontiguousarray(g[idx])
            try:
                self.transport.push(s, table, keys[idx], sids[s], part_g, self.codec)
            except SessionLost:
                self.transport.push(s, table, keys[idx], 0, part_g, self.codec)

        self._each(one)

    def pull_dense(self, table: str) -> npt.NDArray[np.float32]:
        parts = self._each(lambda s: self.transport.pull_dense(s, table))
        return np.concatenate([v for _, v in sorted(parts, key=lambda p: p[0])])

    def push_dense(self, table: str, grads: npt.NDArray[np.float32]) -> None:
        g = np.ascontiguousarray(grads, dtype=np.float32)

        def one(s: int) -> None:
            lo, hi = dense_range(g.shape[0], s, self.n)
            if hi > lo:
                self.transport.push_dense(s, table, g[lo:hi], self.codec)

        self._each(one)

    def export(self, full: bool, directory: Path) -> tuple[list[ExportedFile], list[int]]:
        results = self._each(lambda s: self.transport.export(s, full, str(directory)))
        return [f for files, _ in results for f in files], [seq for _, seq in results]

    def checkpoint(self, offsets: bytes) -> list[tuple[int, int]]:
        return self._each(lambda s: self.transport.checkpoint(s, offsets))

    def status(self) -> list[ShardStatus]:
        return self._each(self.transport.status)
