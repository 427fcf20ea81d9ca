"""The stages a sparse push passes on its way to the shards, and what travels between them.

    PSClient.push(table, keys, rows, session)          one worker's push, as a PushBatch
      -> LocalAggregator  (--local-aggregate)            a host's workers sum their batches in
                                                         shared memory; the leader forwards the sum
      -> PushCompression                                 per shard, the table's compressor and its
                                                         error feedback; evicted residuals go exactly
      -> ShardSender                                     SparsePush parts to every shard in parallel;
                                                         a lost session resends the keys; the pull
                                                         cache's copies follow what landed
      -> ShardTransport   (gRPC, or in-process shards)   ps.api.SparsePush

A PushBatch is the one place a client-side push's fields are written; ps.api.SparsePush is
the one place a shard's part of it is."""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ctr.data.grouping import group_order
from ctr.routing import shard_of
from ps.api import NamedIds, PushAck, SessionLost, SparsePush
from ps.client.pull_cache import PullCache
from ps.compression.payload import Compressed, drain_codec
from ps.transport import FanOut, ShardTransport

Keys = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


def split_by_shard(keys: Keys, shards: int) -> tuple[I64, I64]:
    """(order, bounds): shard s's keys are keys[order[bounds[s]:bounds[s + 1]]], still sorted."""
    # a stable counting sort keeps each shard's keys sorted (np.argsort's stable sort took
    # 1.2 ms of a 75k-key push; this 0.1-0.2)
    return group_order(shard_of(keys, shards), shards)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class PushBatch:
    """A sparse push between stages. keys: sorted unique; rows: float64 [n, cols];
    targets[s]: the pull sessions whose keys' union is shard s's part of keys, or () when
    that part's keys travel; samples: of the batches whose updates it carries; split: the
    keys' (order, bounds) by shard when a pull session already made it."""

    table: str
    keys: Keys
    rows: F64
    targets: tuple[tuple[int, ...], ...]
    kind: str
    samples: int = 0
    split: tuple[I64, I64] | None = None

    def by_shard(self, shards: int) -> tuple[I64, I64]:
        return self.split if self.split is not None else split_by_shard(self.keys, shards)


class ShardSender:
    """The last stage: each shard's encoded part to the transport, all in parallel."""

    def __init__(
        self,
        transport: ShardTransport,
        shard_count: int,
        cache: PullCache,
        on_shards: FanOut,
    ) -> None:
        self.transport = transport
        self.n = shard_count
        self.cache = cache
        self.on_shards = on_shards

    def send(self, batch: PushBatch, parts: list[tuple[int, Keys, Compressed]]) -> None:
        """Sends each shard's encoded part (shard, its keys, its rows in a codec), naming
        the batch's pull sessions for that shard; a part with none, or whose shard lost
        them, names its rows (by id where this client knows them all)."""
        table, kind, samples = batch.table, batch.kind, batch.samples
        client = self.cache.writer(table, kind)

        def one(i: int) -> None:
            s, keys, packed = parts[i]
            sessions = batch.targets[s]
            sent_at = time.monotonic()  # a write lease in the reply runs from no later than this
            if sessions:
                try:
                    payload, decoded = packed.payload(with_subset=True), packed.decoded(True)
                    ack = self.transport.push(SparsePush(s, table, keys, sessions, payload, kind, samples, client, decoded))
                    self.cache.landed(table, s, keys, packed, ack, sessions[0] if len(sessions) == 1 else 0, sent_at)
                    return
                except SessionLost:
                    pass
            sent = keys if packed.sent is None else keys[packed.sent]
            ids, layout = self.cache.row_ids(table, s, sent)
            named = NamedIds(np.sort(ids), layout) if sent.shape[0] and bool(np.all(ids >= 0)) else None
            ack = self._push_rows(s, table, sent, packed, kind, samples, client, named)
            self.cache.landed(table, s, sent, packed, ack, sent_at=sent_at)

        with self.cache.flying(table, batch.keys) if client else nullcontext():
            self.on_shards(one, list(range(len(parts))))

    def _push_rows(
        self, s: int, table: str, keys: Keys, packed: Compressed, kind: str, samples: int, client: int, ids: NamedIds | None
    ) -> PushAck | None:
        """A push naming no session: its rows go by their ids on the shard when given (a
        bit or a byte each where a hashed key costs 6-8), else by key; a shard whose rows
        moved since those ids gets the keys (docs/design/pull-cache.md)."""
        payload, decoded = packed.payload(with_subset=False), packed.decoded(False)
        if ids is not None:
            try:
                ack = self.transport.push(SparsePush(s, table, keys, (), payload, kind, samples, client, decoded, ids))
                self.cache.count("rows_pushed_as_ids", keys.shape[0])
                return ack
            except SessionLost:
                self.cache.forget_ids(table, s)
        return self.transport.push(SparsePush(s, table, keys, (), payload, kind, samples, client, decoded))

    def send_coded(self, table: str, keys: Keys, rows: F64, kind: str, codec_name: str, rng: np.random.Generator) -> F64:
        """Sends rows of these sorted unique keys (keys included) in a value codec, one
        shard after another; returns what the shards received, decoded."""
        codec = drain_codec(codec_name)
        received = np.empty_like(rows)
        order, bounds = split_by_shard(keys, self.n)
        client = self.cache.writer(table, kind)
        with self.cache.flying(table, keys) if client else nullcontext():
            for s in range(self.n):
                idx = order[bounds[s] : bounds[s + 1]]
                if not idx.shape[0]:
                    continue
                # the rows whose ids this client knows go by id, the rest by key
                ids, layout = self.cache.row_ids(table, s, keys[idx])
                known = ids >= 0
                parts = [(idx[known], NamedIds(np.sort(ids[known]), layout)), (idx[~known], None)]
                if not known.any():
                    parts = [(idx, None)]
                for part, named in parts:
                    if part.shape[0]:
                        body, received[part] = codec.encode(rows[part], rng)
                        packed = Compressed(codec, part.shape[0], rows.shape[1], None, body, received[part])
                        sent_at = time.monotonic()
                        ack = self._push_rows(s, table, keys[part], packed, kind, 0, client, named)
                        self.cache.landed(table, s, keys[part], packed, ack, sent_at=sent_at)
        return received
