"""Residual drains (docs/design/wire-bytes.md): before an export the residuals go out in
bf16 and what bf16 rounds off stays owed; at a cut or the end they go out exactly. Either
way the shard plus what the worker still holds is every update pushed, and the wire ledger
files the bytes under the drain's cause. A cut may drain in bf16 instead
(docs/design/cut-drains.md): then nothing stays owed and the shard lacks only the rounding."""

from __future__ import annotations

import numpy as np

from ctr.model.spec import ModelSpec
from ps.api import DELTA
from ps.client import PSClient


def _client(cut_drain_codec: str = "fp64z") -> tuple[PSClient, np.ndarray, np.ndarray]:
    client = PSClient.local(2, push_codec="onebit", cut_drain_codec=cut_drain_codec)
    client.control.declare(ModelSpec("lr").tables())
    keys = np.arange(1, 2001, dtype=np.uint64)
    rng = np.random.default_rng(0)
    total = np.zeros((keys.shape[0], 2))
    for _ in range(5):
        delta = rng.normal(size=(keys.shape[0], 2))
        total += delta
        _, session = client.pull("w", keys, state=True)
        client.push("w", keys, delta, session, kind=DELTA)
    return client, keys, total


def _shard_rows(client: PSClient, keys: np.ndarray) -> np.ndarray:
    rows, _ = client.pull("w", keys, session=False, state=True)
    return np.asarray(rows, dtype=np.float64)[:, :2]


def test_an_export_drain_leaves_only_bf16_rounding_owed_and_a_cut_drain_nothing():
    client, keys, total = _client()
    before = client.unsent("w", keys, 2)
    assert before is not None and np.abs(before).max() > 0.1  # 1-bit pushes owe a lot
    client.flush_residuals("export")
    owed = client.unsent("w", keys, 2)
    assert owed is not None and 0 < np.abs(owed).max() <= np.abs(before).max() * 2**-7  # bf16's rounding
    np.testing.assert_allclose(_shard_rows(client, keys) + owed, total, rtol=0, atol=1e-9)
    client.flush_residuals("cut")
    assert not np.any(client.unsent("w", keys, 2))
    np.testing.assert_allclose(_shard_rows(client, keys), total, rtol=0, atol=1e-9)
    wire = client.wire.snapshot()["w"]
    assert wire["drain_export"][0] > 0 and wire["drain_cut"][0] > 0
    # the export's drain sent 2-byte values, the cut's 8-byte ones, for the same keys
    assert wire["drain_export"][0] < wire["drain_cut"][0]
    client.close()


def test_an_export_drain_sends_only_the_rows_pushed_since_the_last_one():
    """What an export's bf16 rounded off stays owed, but is not sent again at the next
    export unless its row was pushed since: exports cost what changed, and the cut still
    settles everything exactly."""
    client, keys, total = _client()
    client.flush_residuals("export")
    first = client.wire.snapshot()["w"]["drain_export"][0]
    client.flush_residuals("export")  # nothing pushed since: nothing to send
    assert client.wire.snapshot()["w"]["drain_export"][0] == first
    some = keys[:100]
    delta = np.random.default_rng(1).normal(size=(some.shape[0], 2))
    total[:100] += delta
    _, session = client.pull("w", some, state=True)
    client.push("w", some, delta, session, kind=DELTA)
    client.flush_residuals("export")
    sent = client.wire.snapshot()["w"]["drain_export"][0] - first
    assert 0 < sent < first / 10  # 100 of the 2,000 rows
    owed = client.unsent("w", keys, 2)
    assert owed is not None and np.abs(owed).max() > 0
    np.testing.assert_allclose(_shard_rows(client, keys) + owed, total, rtol=0, atol=1e-9)
    client.flush_residuals("cut")
    assert not np.any(client.unsent("w", keys, 2))
    np.testing.assert_allclose(_shard_rows(client, keys), total, rtol=0, atol=1e-9)
    client.close()


def test_a_bf16_cut_drain_forgets_its_rounding_so_the_cut_is_what_training_goes_on_from():
    exact, keys, total = _client("fp64z")
    rounded, _, same_total = _client("bf16z")
    np.testing.assert_array_equal(total, same_total)
    before = rounded.unsent("w", keys, 2)
    assert before is not None and np.abs(before).max() > 0.1
    shard_before = _shard_rows(rounded, keys)
    exact.flush_residuals("cut")
    rounded.flush_residuals("cut")
    assert not np.any(rounded.unsent("w", keys, 2))  # nothing owed: the worker's view is the shard's rows
    # the shard took the residuals to bf16's rounding, to nearest: each within half a unit in the last place
    sent = _shard_rows(rounded, keys) - shard_before
    assert np.all(np.abs(sent - before) <= np.abs(before) * 2**-8 + 1e-300)
    assert np.any(sent != before)  # something was rounded off ...
    np.testing.assert_allclose(_shard_rows(exact, keys), total, rtol=0, atol=1e-9)  # ... which fp64z keeps
    assert 0 < rounded.wire.snapshot()["w"]["drain_cut"][0] < 0.5 * exact.wire.snapshot()["w"]["drain_cut"][0]
    assert rounded.codecs()["cut_drain"] == "bf16z" and exact.codecs()["cut_drain"] == "fp64z"
    rounded.flush_residuals("end")  # nothing left for the end to send
    assert rounded.wire.snapshot()["w"].get("drain_end", (0, 0))[0] == 0
    exact.close()
    rounded.close()


def test_an_e8m4_cut_drain_forgets_a_coarser_rounding_in_fewer_bytes():
    """e8m4z: bf16z on the wire with 4 mantissa bits a value; the shard takes each residual
    to within 2^-5 of it, nothing stays owed, and the drain is smaller than bf16z's."""
    bf16, keys, total = _client("bf16z")
    coarse, _, same_total = _client("e8m4z")
    np.testing.assert_array_equal(total, same_total)
    before = coarse.unsent("w", keys, 2)
    assert before is not None
    shard_before = _shard_rows(coarse, keys)
    bf16.flush_residuals("cut")
    coarse.flush_residuals("cut")
    assert not np.any(coarse.unsent("w", keys, 2))
    sent = _shard_rows(coarse, keys) - shard_before
    assert np.all(np.abs(sent - before) <= np.abs(before) * 2**-5 + 1e-300)
    assert np.any(np.abs(sent - before) > np.abs(before) * 2**-8)  # coarser than bf16's rounding
    words = (sent[sent != 0].astype(np.float32).view(np.uint32) >> 16) & 0x7
    assert not words.any()  # the three low mantissa bits of every bf16 word are zero
    assert 0 < coarse.wire.snapshot()["w"]["drain_cut"][0] < 0.9 * bf16.wire.snapshot()["w"]["drain_cut"][0]
    assert coarse.codecs()["cut_drain"] == "e8m4z"
    bf16.close()
    coarse.close()
