"""Rounded pushes (docs/design/rounded-pushes.md): `bf16z:rounded` sends each state delta as
bf16 rounds it and keeps nothing back, so the shard's row moves by exactly what the
worker's copy does: nothing is owed to a cut, an export or the end, and every update
reaches the shard to within half a bf16 unit of itself."""

from __future__ import annotations

import numpy as np
import pytest

from ctr.model.spec import ModelSpec
from ps.api import DELTA
from ps.client import PSClient
from ps.compression.compressor import CodecSpec, parse_codec
from ps.compression.payload import VALUE_CODECS

KEYS = np.arange(1, 3001, dtype=np.uint64)


def _pushed(client: PSClient, pushes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(exact sum of the deltas, the sum of what bf16 makes of each, the bound on the difference)."""
    rng = np.random.default_rng(seed)
    exact, rounded, bound = (np.zeros((KEYS.shape[0], 2)) for _ in range(3))
    for _ in range(pushes):
        delta = np.column_stack([rng.normal(size=KEYS.shape[0]) * 0.01, rng.exponential(size=KEYS.shape[0])])
        _, session = client.pull("w", KEYS, state=True)
        client.push("w", KEYS, delta, session, kind=DELTA)
        exact += delta
        rounded += VALUE_CODECS["bf16z"].encode(delta, np.random.default_rng())[1]
        bound += 2.0**-8 * np.abs(delta)
    return exact, rounded, bound


def _held(client: PSClient) -> np.ndarray:
    rows, _ = PSClient(client.transport, client.n).pull("w", KEYS, session=False, state=True)
    return np.asarray(rows, dtype=np.float64)[:, :2]


def test_the_spelling_and_what_may_go_rounded() -> None:
    spec = parse_codec("bf16z:rounded")
    assert spec == CodecSpec("bf16z", rounded=True) and spec.name == "bf16z:rounded" and not spec.feedback
    assert parse_codec("bf16z").feedback and parse_codec("fp16:rounded").name == "fp16:rounded"
    for text, says in (
        ("onebit:rounded", "only fp16, bf16, bf16z go rounded"),  # 1-bit without feedback would bias every value
        ("int8:rounded", "only fp16, bf16, bf16z"),
        ("topk:0.1+bf16:rounded", "not behind top-k"),  # the rows top-k leaves out need the feedback
        ("nope:rounded", "unknown value codec"),
    ):
        with pytest.raises(ValueError, match=says):
            parse_codec(text)


def test_the_shard_holds_each_push_as_bf16_rounded_it_and_nothing_is_owed() -> None:
    client = PSClient.local(2, push_codec="bf16z:rounded")
    client.control.declare(ModelSpec("lr").tables())
    init = _held(client)
    exact, rounded, bound = _pushed(client, 6)
    held = _held(client) - init
    np.testing.assert_allclose(held, rounded, rtol=0, atol=1e-12)  # the shard adds what bf16 made of each delta
    assert np.all(np.abs(held - exact) <= bound + 1e-12) and np.any(held != exact)
    assert client.unsent("w", KEYS, 2) is None  # the worker holds nothing back
    for cause in ("export", "cut", "end"):
        client.flush_residuals(cause)
    wire = client.wire.snapshot()["w"]
    assert not any(wire.get(f"drain_{cause}", (0,))[0] for cause in ("export", "cut", "end")), wire
    assert client.codecs()["push:w"] == "bf16z:rounded" and "cut_drain" not in client.codecs()
    client.close()


def test_a_kept_copy_follows_the_shard_bit_for_bit() -> None:
    """The pull cache applies each push's decoded delta as the shard does, so with rounded
    pushes the worker's copy is the shard's row, not the row it computed."""
    client = PSClient.local(2, push_codec="bf16z:rounded")
    client.control.declare(ModelSpec("lr").tables())
    client.cache.keep()
    _pushed(client, 4, seed=1)
    copy, _ = client.pull("w", KEYS, state=True)
    counts = client.cache.counts  # the rows came from the copy, not the shards (as ids, or leased)
    assert counts["kept_rows_sent_as_ids"] + counts["rows_leased"] > 0
    np.testing.assert_array_equal(np.asarray(copy, dtype=np.float64)[:, :2], _held(client))
    client.close()


def test_rounded_pushes_cost_a_quarter_of_fp64s_value_bytes_or_less() -> None:
    sent = {}
    for codec in ("none", "bf16z:rounded"):
        client = PSClient.local(2, push_codec=codec)
        client.control.declare(ModelSpec("lr").tables())
        _pushed(client, 3, seed=2)
        sent[codec] = client.wire.snapshot()["w"]["sparse_push"][0]
        client.close()
    assert sent["bf16z:rounded"] < 0.3 * sent["none"], sent  # the pulled keys go as the session, in either codec
