"""The push path's stages (ps/client/push_path.py, push_compression.py): the split by shard,
a shard that forgot a pull session, evicted residuals, and drains, on in-process shards."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctr.model.optim import OptimizerSpec
from ctr.model.spec import TableSpec
from ctr.routing import shard_of
from ps.api import DELTA, PushAck, SparsePush
from ps.client import PSClient
from ps.client.push_path import split_by_shard
from ps.server.local_transport import LocalTransport
from ps.server.shard import Shard

FTRL = TableSpec("w", "sparse", 1, OptimizerSpec("ftrl", lr=0.05), "example")


def _rows(shards: list[Shard], keys: np.ndarray) -> np.ndarray:
    reader = PSClient(LocalTransport(shards), len(shards))
    return reader.pull("w", keys, session=False, state=True)[0]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=200, unique=True), st.integers(1, 5))
def test_each_shards_part_is_its_own_keys_still_sorted(raw: list[int], shards: int) -> None:
    keys = np.array(sorted(raw), dtype=np.uint64)
    order, bounds = split_by_shard(keys, shards)
    assert sorted(order.tolist()) == list(range(keys.shape[0]))
    for s in range(shards):
        part = keys[order[bounds[s] : bounds[s + 1]]]
        assert np.all(shard_of(part, shards) == s)
        assert np.all(part[1:] > part[:-1])


def test_a_push_whose_session_the_shard_forgot_sends_its_keys_and_lands_once() -> None:
    # two sessions per shard at most: the third pull makes the shard forget the first
    shards, plain = [Shard(i, 2, max_sessions=2) for i in range(2)], [Shard(i, 2) for i in range(2)]
    clients = [PSClient(LocalTransport(s), 2) for s in (shards, plain)]
    for c in clients:
        c.control.declare([FTRL])
        c.keep_rows()
    keys = np.arange(1, 60, dtype=np.uint64)
    delta = np.full((keys.shape[0], FTRL.width), 0.1)
    for c in clients:
        _, first = c.pull("w", keys, state=True)
        for _ in range(2):
            c.pull("w", keys, state=True)
        c.push("w", keys, delta, first, kind=DELTA, samples=1)
    np.testing.assert_array_equal(_rows(shards, keys), _rows(plain, keys))
    np.testing.assert_array_equal(clients[0].pull("w", keys, state=True)[0], _rows(plain, keys))


def test_residuals_evicted_from_a_full_memory_reach_the_shards_exactly() -> None:
    lossy_shards, exact_shards = [Shard(i, 2) for i in range(2)], [Shard(i, 2) for i in range(2)]
    lossy = PSClient(LocalTransport(lossy_shards), 2, push_codec="onebit", residual_rows=8)
    exact = PSClient(LocalTransport(exact_shards), 2)
    rng = np.random.default_rng(4)
    seen = np.zeros(0, dtype=np.uint64)
    for c in (lossy, exact):
        c.control.declare([FTRL])
    for _ in range(6):
        keys = np.unique(rng.integers(1, 200, 40).astype(np.uint64))
        delta = np.abs(rng.normal(size=(keys.shape[0], FTRL.width))) * 0.01
        for c in (lossy, exact):
            _, session = c.pull("w", keys, state=True)
            c.push("w", keys, delta, session, kind=DELTA)
        residuals = lossy.compression.compressors["w"].residuals
        assert residuals is not None and len(residuals) <= 8  # the rest went exactly
        seen = np.union1d(seen, keys)
    assert lossy.compression_stats()["residual_flushed_rows"] > 0
    assert not np.allclose(_rows(lossy_shards, seen), _rows(exact_shards, seen))  # 1-bit owes some
    lossy.flush_residuals("cut")  # what the memory still held, in fp64
    np.testing.assert_allclose(_rows(lossy_shards, seen), _rows(exact_shards, seen), rtol=0, atol=1e-12)


class _DecodingTransport(LocalTransport):
    """In-process shards that decode every push's bytes, as a remote shard does."""

    def push(self, part: SparsePush) -> PushAck | None:
        return super().push(dataclasses.replace(part, decoded=None))


@pytest.mark.parametrize("codec", ["none", "int8", "topk:0.3+onebit"])
def test_in_process_shards_take_the_encoders_values_as_decoding_the_bytes_would(codec: str) -> None:
    # a kept-rows client names its pull sessions (payloads with a subset); a plain one sends keys
    rng = np.random.default_rng(3)
    keys = np.arange(1, 300, dtype=np.uint64)
    for keep in (True, False):
        shards = [[Shard(i, 2) for i in range(2)] for _ in range(2)]
        clients = [
            PSClient(transport(s), 2, push_codec=codec, residual_rows=64)
            for transport, s in zip((LocalTransport, _DecodingTransport), shards, strict=True)
        ]
        for c in clients:
            c.control.declare([FTRL])
            if keep:
                c.keep_rows()
        for _ in range(4):
            delta = rng.normal(0, 0.1, (keys.shape[0], FTRL.width))
            delta[:, 1] = np.abs(delta[:, 1])  # FTRL's n only grows
            for c in clients:
                _, session = c.pull("w", keys, state=True)
                c.push("w", keys, delta, session, kind=DELTA, samples=1)
        for c in clients:
            c.compression.drain("end")
        np.testing.assert_array_equal(_rows(shards[0], keys), _rows(shards[1], keys))
