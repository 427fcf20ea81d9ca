"""`--push-codec auto` (docs/design/auto-codec.md): uncompressed in-process; over a network,
fp64 until a window between two cuts says 1-bit pushes with their drains would carry at
most 40% of fp64's bytes, 1-bit until a window measures more than half. Whatever it
chooses, the shards hold every update exactly after each cut."""

from __future__ import annotations

import numpy as np

from ctr.model.optim import OptimizerSpec
from ctr.model.spec import TableSpec
from ps.api import DELTA
from ps.client import PSClient
from ps.client.auto_codec import AUTO_MIN_ROWS, SAMPLE_BITS, AutoChoice, sampled
from ps.server.local_transport import LocalTransport
from ps.server.shard import Shard

FTRL = TableSpec("w", "sparse", 1, OptimizerSpec("ftrl", lr=0.05), "example")


class Remote(LocalTransport):
    remote = True  # as a gRPC transport says: calls cross a network


def _client(remote: bool = True, codec: str = "auto") -> tuple[PSClient, list[Shard]]:
    shards = [Shard(i, 2) for i in range(2)]
    client = PSClient((Remote if remote else LocalTransport)(shards), 2, push_codec=codec)
    client.control.declare([FTRL])
    return client, shards


def _held(shards: list[Shard], keys: np.ndarray) -> np.ndarray:
    reader = PSClient(LocalTransport(shards), 2)
    rows, _ = reader.pull("w", np.sort(keys), session=False, state=True)
    return rows


def _window(client: PSClient, keys: np.ndarray, times: int, truth: dict[int, np.ndarray], rng) -> None:
    """Pushes each key `times` times in batches of at most 1,000 keys, then cuts."""
    for _ in range(times):
        for start in range(0, keys.shape[0], 1000):
            part = np.sort(keys[start : start + 1000])
            delta = np.column_stack([rng.normal(size=part.shape[0]) * 0.1, np.abs(rng.normal(size=part.shape[0]))])
            client.push("w", part, delta, kind=DELTA, samples=1)
            for k, row in zip(part.tolist(), delta, strict=True):
                truth[k] = truth.get(k, 0.0) + row
    client.flush_residuals("cut")


def _exact(shards: list[Shard], truth: dict[int, np.ndarray]) -> None:
    keys = np.array(sorted(truth), dtype=np.uint64)
    np.testing.assert_allclose(_held(shards, keys), np.array([truth[k] for k in keys.tolist()]), rtol=1e-12, atol=1e-12)


def test_auto_is_uncompressed_in_process_and_with_none() -> None:
    for remote, codec in ((False, "auto"), (True, "none")):
        client, _ = _client(remote, codec)
        client.push("w", np.array([3], dtype=np.uint64), np.array([[0.1, 1.0]]), kind=DELTA)
        assert client.codecs()["push:w"] == "fp64" and "auto:w" not in client.codecs()


def test_rows_pushed_many_times_between_cuts_move_to_onebit_and_stay() -> None:
    rng = np.random.default_rng(0)
    client, shards = _client()
    truth: dict[int, np.ndarray] = {}
    hot = np.unique(rng.integers(1, 1 << 40, size=400, dtype=np.uint64))
    times = AUTO_MIN_ROWS // hot.shape[0] + 1
    _window(client, hot, times, truth, rng)  # fp64 first; its estimate says 1-bit pays
    assert client.codecs()["push:w"] == "onebit", client.codecs()
    for _ in range(2):
        _window(client, hot, times, truth, rng)
        _exact(shards, truth)  # every cut holds every update
    codecs = client.codecs()
    assert codecs["push:w"] == "onebit" and "fewer value bytes than fp64" in codecs["auto:w"], codecs
    assert client.compression.choices["w"].ratio > 8  # measured: signs and one exact drain a row per window
    assert client.compression_stats()["auto_switches"] == 1


def test_rows_pushed_once_between_cuts_stay_fp64_without_a_onebit_window() -> None:
    rng = np.random.default_rng(1)
    client, shards = _client()
    truth: dict[int, np.ndarray] = {}
    fresh = iter(range(1, 1 << 30))
    for _ in range(3):  # a long tail: each row once; 1-bit's exact cut drain would cost what fp64 does
        keys = np.array([next(fresh) for _ in range(AUTO_MIN_ROWS + 500)], dtype=np.uint64)
        _window(client, keys, 1, truth, rng)
        _exact(shards, truth)
        assert client.codecs()["push:w"] == "fp64z"
    choice = client.compression.choices["w"]
    assert 0.5 < choice.ratio < 2 and choice.switches == 0
    assert client.compression.compressors["w"].flushed_rows == 0  # no 1-bit window was ever paid for


def test_an_export_judges_fp64_as_if_a_cut_came_then() -> None:
    """Before the first cut, an export already judges fp64's window (counting the cut drain
    it would have cost): a stream moves to 1-bit within seconds. 1-bit waits for a cut, and
    the first after such a switch ends a part of an interval: it is judged at the next."""
    rng = np.random.default_rng(3)
    client, shards = _client()
    hot = np.unique(rng.integers(1, 1 << 40, size=400, dtype=np.uint64))
    for _ in range(AUTO_MIN_ROWS // hot.shape[0] + 1):
        client.push("w", hot, np.column_stack([rng.normal(size=hot.shape[0]), np.ones(hot.shape[0])]), kind=DELTA)
    client.flush_residuals("export")
    assert client.codecs()["push:w"] == "onebit"
    fresh = np.arange(1 << 33, (1 << 33) + AUTO_MIN_ROWS + 500, dtype=np.uint64)
    client.push("w", fresh, np.ones((fresh.shape[0], 2)), kind=DELTA)
    client.flush_residuals("export")  # a window that would not pay, but 1-bit is judged at cuts only
    assert client.codecs()["push:w"] == "onebit"
    client.flush_residuals("cut")  # and not on the part of a cut interval since the switch
    assert client.codecs()["push:w"] == "onebit"
    client.push("w", fresh + np.uint64(1 << 20), np.ones((fresh.shape[0], 2)), kind=DELTA)
    client.flush_residuals("cut")  # a whole interval that does not pay
    assert client.codecs()["push:w"] == "fp64z"
    long_tail = AutoChoice()
    long_tail.pushed(np.arange(1, 20_001, dtype=np.uint64), 2, 0, 0)
    long_tail.drained("export", 0)
    assert not long_tail.judge(at_cut=False) and 0.3 < long_tail.ratio < 1  # the export and would-be cut drains counted


def test_fp64_windows_run_on_across_exports_until_a_cut() -> None:
    """Exports far more often than cuts: each export's judgement charges the would-be cut
    drain once over a window that grows, so rows repeated across exports reach 1-bit even
    though no single export interval repeats them enough. The estimate never counts a
    cut's drain twice."""
    keys = np.arange(1, 20_001, dtype=np.uint64)
    choice = AutoChoice()
    judged = []
    for _ in range(8):  # each export interval pushes every row 3 times: one interval alone would not pay
        for _ in range(3):
            choice.pushed(keys, 2, 0, 0)
        choice.drained("export", 0)
        judged.append(choice.judge(at_cut=False))
    assert judged.index(True) == 3 and choice.compress  # at the fourth export, before any cut
    alone = AutoChoice()
    for _ in range(3):
        alone.pushed(keys, 2, 0, 0)
    alone.drained("export", 0)
    assert not alone.judge(at_cut=False)
    again = AutoChoice()
    again.pushed(keys, 2, 0, 0)
    again.pushed(keys, 2, 0, 0)
    again.drained("export", 0)
    again.judge(at_cut=False)
    again.drained("cut", 0)
    sample = sampled(keys).shape[0] << SAMPLE_BITS
    assert again.sent == 2 * 20_000 * 2 // 8 + sample * (2 * 2 + 8) + sample * (2 * 8 + 8)  # one cut drain


def test_a_stream_that_stops_repeating_goes_back_to_fp64_exactly() -> None:
    rng = np.random.default_rng(2)
    client, shards = _client()
    truth: dict[int, np.ndarray] = {}
    hot = np.unique(rng.integers(1, 1 << 40, size=400, dtype=np.uint64))
    _window(client, hot, AUTO_MIN_ROWS // hot.shape[0] + 1, truth, rng)
    assert client.codecs()["push:w"] == "onebit"
    keys = np.arange(1 << 32, (1 << 32) + AUTO_MIN_ROWS + 500, dtype=np.uint64)
    _window(client, keys, 1, truth, rng)  # measured under 1-bit: the drain costs more than half
    _exact(shards, truth)
    assert client.codecs()["push:w"] == "fp64z" and client.compression_stats()["auto_switches"] == 2


def test_the_estimate_counts_distinct_rows_on_a_sample_of_keys() -> None:
    keys = np.arange(1, 200_001, dtype=np.uint64)
    share = sampled(keys).shape[0] / keys.shape[0]
    assert abs(share - 2.0**-SAMPLE_BITS) < 0.005  # about 1 in 16, even for consecutive ids
    choice = AutoChoice()
    for _ in range(16):  # the same 200,000 rows, 16 times between two cuts, 2 values each
        choice.pushed(keys, 2, 0, 0)
    choice.drained("cut", 0)
    plain = 16 * 200_000 * 2 * 8
    exact_drain = 200_000 * (2 * 8 + 8)
    assert choice.plain == plain
    assert abs(choice.sent - (16 * 200_000 * 2 // 8 + exact_drain)) < 0.05 * exact_drain
    assert abs(choice.cut_sent - exact_drain) < 0.05 * exact_drain
    assert choice.judge(at_cut=True) and choice.compress  # 0.11 of fp64's bytes, its cut drain 0.094


def test_a_cut_drain_that_would_stall_keeps_fp64_though_bytes_would_pay() -> None:
    """Rows pushed 4 times between cuts: 1-bit would carry 0.39 of fp64's bytes, but its
    exact cut drain alone would be 0.375 of them, sent while training waits for the cut
    (3.6-3.9 s a cut on the demo's FFM): fp64 stays. Pushed 16 times (0.094), 1-bit pays."""
    keys = np.arange(1, 200_001, dtype=np.uint64)
    for times, moves in ((4, False), (16, True)):
        choice = AutoChoice()
        for _ in range(times):
            choice.pushed(keys, 2, 0, 0)
        choice.drained("cut", 0)
        assert choice.judge(at_cut=True) == moves, (times, choice.describe())
        assert ("cut drain" in choice.describe()) and choice.ratio >= 2.5
    measured = AutoChoice(compress=True)  # a 1-bit window leaves when its measured cut drain would stall
    for _ in range(4):
        measured.pushed(keys, 2, 50_000, 0)
    measured.drained("cut", 200_000)
    assert measured.judge(at_cut=True) and not measured.compress  # 0.39 of the bytes, but its drain 0.375


def test_a_bf16_cut_drain_is_priced_in_bf16_bytes_but_its_stall_in_rows() -> None:
    """Rows pushed 8 times between cuts, 2 values each, and exported between: with bf16
    cut drains 1-bit carries fewer bytes than with fp64 ones, but the cut waits for the
    shard to take each drained row whatever carries it, so the stall limit counts the rows
    at fp64's bytes, as it was tuned (a long tail in 1-bit ran 29% slower, cut-drains.md)."""
    keys = np.arange(1, 200_001, dtype=np.uint64)
    judged = {}
    for cut_value_bytes in (8, 2):
        choice = AutoChoice(cut_value_bytes=cut_value_bytes)
        for _ in range(8):
            choice.pushed(keys, 2, 0, 0)
        choice.drained("cut", 0)
        drain = 200_000 * (2 * cut_value_bytes + 8)
        assert abs(choice.cut_sent - drain) < 0.05 * drain
        moves = choice.judge(at_cut=True)
        judged[cut_value_bytes] = (moves, choice.ratio, choice.stall)
    assert judged[2][1] > 1.5 * judged[8][1]  # fewer bytes: (2 + 12) / 128 against (2 + 24) / 128
    assert judged[2][2] == judged[8][2]  # the same stall: 0.1875 of fp64's bytes
    assert judged[2][0] and judged[8][0]
    for times in (4, 6):  # a stall over 20% keeps fp64 whatever the drain's codec
        choice = AutoChoice(cut_value_bytes=2)
        for _ in range(times):
            choice.pushed(keys, 2, 0, 0)
        choice.drained("cut", 0)
        assert not choice.judge(at_cut=True), choice.describe()
