"""`--push-codec auto` (docs/design/auto-codec.md): uncompressed in-process; over a network,
bf16z rounded (docs/design/rounded-pushes.md) until a window between two cuts says 1-bit
pushes with their drains would carry at most 60% of bf16z's bytes, 1-bit until a window
measures more than 80%. Whatever it chooses, after each cut the shards hold every update,
to within the rounding of each rounded push (bf16's; an accumulator's to BASE_ACCUMULATOR_BITS)."""

from __future__ import annotations

import numpy as np
import pytest

from ctr.model.optim import OptimizerSpec
from ctr.model.spec import TableSpec
from ps.api import DELTA
from ps.client import PSClient, auto_codec
from ps.client.auto_codec import AUTO_MIN_ROWS, BASE_ACCUMULATOR_BITS, SAMPLE_BITS, AutoChoice, sampled
from ps.server.local_transport import LocalTransport
from ps.server.shard import Shard

BASE = "bf16z:rounded"
BF16_ULP = 2.0**-7  # bf16 keeps 8 significant bits: a rounding is at most half a unit, 2**-8 relative
# a rounded push's relative rounding per column of FTRL's state: z in bf16, n (an accumulator) coarser
ROUNDING = np.array([BF16_ULP / 2, 2.0 ** -(BASE_ACCUMULATOR_BITS + 1)])


@pytest.fixture(autouse=True)
def _one_cut_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests judge a window at every cut; a run whose exports are rarer than its cuts
    holds a window open until it has an export's drain (the last test)."""
    monkeypatch.setattr(auto_codec, "AUTO_WINDOW_CUTS", 1)


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


Truth = dict[int, tuple[np.ndarray, np.ndarray]]  # per key: the sum of its deltas, and the rounding they may lose


def _window(client: PSClient, keys: np.ndarray, times: int, truth: Truth, rng) -> None:
    """Pushes each key `times` times in batches of at most 1,000 keys, then cuts."""
    for _ in range(times):
        for start in range(0, keys.shape[0], 1000):
            part = np.sort(keys[start : start + 1000])
            delta = np.column_stack([rng.normal(size=part.shape[0]) * 0.1, np.abs(rng.normal(size=part.shape[0]))])
            rounded = client.codecs().get("push:w", BASE) == BASE  # the codec this push goes in
            client.push("w", part, delta, kind=DELTA, samples=1)
            for k, row in zip(part.tolist(), delta, strict=True):
                total, slack = truth.get(k, (np.zeros(2), np.zeros(2)))
                truth[k] = (total + row, slack + (ROUNDING * np.abs(row) if rounded else 0.0))
    client.flush_residuals("cut")


def _exact(shards: list[Shard], truth: Truth) -> None:
    """The shards hold every update: 1-bit's exactly after the cut's drain, each rounded
    push's to within half a bf16 unit of it (and nothing else is lost)."""
    keys = np.array(sorted(truth), dtype=np.uint64)
    total = np.array([truth[k][0] for k in keys.tolist()])
    slack = np.array([truth[k][1] for k in keys.tolist()])
    assert np.all(np.abs(_held(shards, keys) - total) <= slack + 1e-12)


def test_auto_is_uncompressed_in_process_and_with_none() -> None:
    for remote, codec in ((False, "auto"), (True, "none")):
        client, _ = _client(remote, codec)
        client.push("w", np.array([3], dtype=np.uint64), np.array([[0.1, 1.0]]), kind=DELTA)
        assert client.codecs()["push:w"] == "fp64" and "auto:w" not in client.codecs()


def test_rows_pushed_many_times_between_cuts_move_to_onebit_and_stay() -> None:
    rng = np.random.default_rng(0)
    client, shards = _client()
    truth: Truth = {}
    hot = np.unique(rng.integers(1, 1 << 40, size=400, dtype=np.uint64))
    times = AUTO_MIN_ROWS // hot.shape[0] + 1
    _window(client, hot, times, truth, rng)  # bf16z first; its estimate says 1-bit pays
    assert client.codecs()["push:w"] == "onebit", client.codecs()
    _exact(shards, truth)
    for _ in range(2):
        _window(client, hot, times, truth, rng)
        _exact(shards, truth)  # every cut holds every update
    codecs = client.codecs()
    assert codecs["push:w"] == "onebit" and "fewer value bytes than bf16z" in codecs["auto:w"], codecs
    assert client.compression.choices["w"].ratio > 2  # measured: signs and one exact drain a row per window
    assert client.compression_stats()["auto_switches"] == 1


def test_the_end_of_the_stream_judges_nothing_and_a_recovery_judges_again() -> None:
    """The end's exact drain settles every residual; the run's last cut and export come
    after it. A window that holds that drain measures what no codec would pay mid-stream,
    so it judges nothing: the summary names the codec the stream trained in. A recovery
    trains on, and its windows judge again."""
    rng = np.random.default_rng(4)
    client, shards = _client()
    truth: Truth = {}
    hot = np.unique(rng.integers(1, 1 << 40, size=400, dtype=np.uint64))
    times = AUTO_MIN_ROWS // hot.shape[0] + 1
    _window(client, hot, times, truth, rng)
    assert client.codecs()["push:w"] == "onebit"
    # the stream's short last stretch: few pushes a row since the last cut, and every row
    # drained at the end (mid-stream, a window like it would send the table back to bf16z)
    tail = np.sort(rng.integers(1, 1 << 40, size=AUTO_MIN_ROWS // 2, dtype=np.uint64))
    for _ in range(3):
        client.push("w", tail, np.abs(rng.normal(size=(tail.shape[0], 2))), kind=DELTA, samples=1)
    client.flush_residuals("end")
    client.flush_residuals("export")
    client.flush_residuals("cut")
    assert client.codecs()["push:w"] == "onebit" and client.compression_stats()["auto_switches"] == 1
    client.compression.reset()  # a recovery: the stream trains on from the last cut
    keys = np.arange(1 << 32, (1 << 32) + AUTO_MIN_ROWS + 500, dtype=np.uint64)
    _window(client, keys, 1, truth, rng)  # rows pushed once: 1-bit's drain costs more than bf16z
    assert client.codecs()["push:w"] == BASE and client.compression_stats()["auto_switches"] == 2


@pytest.mark.parametrize(("kind", "export_sends_it"), [("ftrl", True), ("adagrad", False)])
def test_onebit_holds_the_accumulators_for_the_drains(kind: str, export_sends_it: bool) -> None:
    """A 1-bit push carries no accumulator (docs/design/sign-planes.md). An export's drain
    sends it where the weights read it (FTRL's n) and leaves it to the cut where they do not
    (Adagrad's sum of squares); the cut settles everything."""
    rng = np.random.default_rng(6)
    shards = [Shard(i, 2) for i in range(2)]
    client = PSClient(Remote(shards), 2, push_codec="auto")
    client.control.declare([TableSpec("w", "sparse", 1, OptimizerSpec(kind, lr=0.05), "example")])
    truth: Truth = {}
    hot = np.unique(rng.integers(1, 1 << 40, size=400, dtype=np.uint64))
    _window(client, hot, AUTO_MIN_ROWS // hot.shape[0] + 1, truth, rng)
    codecs = client.codecs()
    assert codecs["push:w"] == "onebit" and "accumulators held for the drains" in codecs["auto:w"], codecs
    before = _held(shards, hot)
    delta = np.column_stack([rng.normal(size=hot.shape[0]) * 0.1, np.abs(rng.normal(size=hot.shape[0]))])
    client.push("w", hot, delta, kind=DELTA, samples=1)
    pushed = _held(shards, hot)
    assert np.all(pushed[:, 1] == before[:, 1]) and np.any(pushed[:, 0] != before[:, 0])
    client.flush_residuals("export")
    exported = _held(shards, hot)[:, 1] - before[:, 1]
    if export_sends_it:  # to bf16's rounding of what was owed
        assert np.all(np.abs(exported - delta[:, 1]) <= 2.0**-8 * delta[:, 1] + 1e-12)
    else:
        assert np.all(exported == 0.0)
    client.flush_residuals("cut")
    for k, row in zip(hot.tolist(), delta, strict=True):
        truth[k] = (truth[k][0] + row, truth[k][1])
    _exact(shards, truth)


def test_rows_pushed_once_between_cuts_stay_rounded_without_a_onebit_window() -> None:
    rng = np.random.default_rng(1)
    client, shards = _client()
    truth: Truth = {}
    fresh = iter(range(1, 1 << 30))
    for _ in range(3):  # a long tail: each row once; 1-bit's exact cut drain would cost far more than bf16z
        keys = np.array([next(fresh) for _ in range(AUTO_MIN_ROWS + 500)], dtype=np.uint64)
        _window(client, keys, 1, truth, rng)
        _exact(shards, truth)
        assert client.codecs()["push:w"] == BASE
    choice = client.compression.choices["w"]
    assert choice.ratio < 0.5 and choice.switches == 0
    assert 0.5 < choice.base_per_value <= 2.01  # bf16 words, in zstd'd planes where they compress
    assert client.compression.compressors["w"].residuals is None  # nothing is held back, nothing drained
    assert client.unsent("w", np.sort(keys), 2) is None


def _bodies(choice: AutoChoice, keys: np.ndarray, cols: int, times: int, onebit_body: int = 0) -> None:
    """`times` pushes of these keys' rows: under bf16z each body is bf16's raw words (2 bytes
    a value); under 1-bit `onebit_body` bytes."""
    for _ in range(times):
        choice.pushed(keys, cols, onebit_body if choice.compress else 2 * keys.shape[0] * cols, 0)


def test_an_export_judges_the_rounded_window_as_if_a_cut_came_then() -> None:
    """Before the first cut, an export already judges bf16z's window (counting the cut drain
    it would have cost): a stream moves to 1-bit within seconds. 1-bit waits for a cut, and
    the first after such a switch ends a part of an interval: it is judged at the next."""
    rng = np.random.default_rng(3)
    client, shards = _client()
    hot = np.unique(rng.integers(1, 1 << 40, size=400, dtype=np.uint64))
    for _ in range(3 * (AUTO_MIN_ROWS // hot.shape[0] + 1)):
        client.push("w", hot, np.column_stack([rng.normal(size=hot.shape[0]), np.ones(hot.shape[0])]), kind=DELTA)
    client.flush_residuals("export")
    assert client.codecs()["push:w"] == "onebit", client.codecs()
    fresh = np.arange(1 << 33, (1 << 33) + AUTO_MIN_ROWS + 500, dtype=np.uint64)
    client.push("w", fresh, np.ones((fresh.shape[0], 2)), kind=DELTA)
    client.flush_residuals("export")  # a window that would not pay, but 1-bit is judged at cuts only
    assert client.codecs()["push:w"] == "onebit"
    client.flush_residuals("cut")  # and not on the part of a cut interval since the switch
    assert client.codecs()["push:w"] == "onebit"
    client.push("w", fresh + np.uint64(1 << 20), np.ones((fresh.shape[0], 2)), kind=DELTA)
    client.flush_residuals("cut")  # a whole interval that does not pay
    assert client.codecs()["push:w"] == BASE
    long_tail = AutoChoice()
    _bodies(long_tail, np.arange(1, 20_001, dtype=np.uint64), 2, 1)
    long_tail.drained("export", 0)
    assert not long_tail.judge(at_cut=False) and 0.05 < long_tail.ratio < 0.3  # the export and would-be cut drains counted


def test_rounded_windows_run_on_across_exports_until_a_cut() -> None:
    """Exports far more often than cuts: each export's judgement charges the would-be cut
    drain once over a window that grows, so rows repeated across exports reach 1-bit even
    though no single export interval repeats them enough. The estimate never counts a
    cut's drain twice."""
    keys = np.arange(1, 20_001, dtype=np.uint64)
    choice = AutoChoice()
    judged = []
    for _ in range(8):  # each export interval pushes every row 8 times: one interval alone would not pay
        _bodies(choice, keys, 2, 8)
        choice.drained("export", 0)
        judged.append(choice.judge(at_cut=False))
    # per row: bf16z 8 x 4 bytes an interval; 1-bit 8 x 2 bits and an export drain (12 bytes) an
    # interval, and one would-be cut drain (24 bytes): (14m + 24) <= 0.6 x 32m from the 5th
    assert judged.index(True) == 4 and choice.compress, judged
    alone = AutoChoice()
    _bodies(alone, keys, 2, 8)
    alone.drained("export", 0)
    assert not alone.judge(at_cut=False)
    again = AutoChoice()
    _bodies(again, keys, 2, 2)
    again.drained("export", 0)
    again.judge(at_cut=False)
    again.drained("cut", 0)
    sample = sampled(keys).shape[0] << SAMPLE_BITS
    assert again.sent == 2 * 20_000 * 2 // 8 + sample * (2 * 2 + 8) + sample * (2 * 8 + 8)  # one cut drain


def test_a_stream_that_stops_repeating_goes_back_to_rounded_pushes() -> None:
    rng = np.random.default_rng(2)
    client, shards = _client()
    truth: Truth = {}
    hot = np.unique(rng.integers(1, 1 << 40, size=400, dtype=np.uint64))
    _window(client, hot, AUTO_MIN_ROWS // hot.shape[0] + 1, truth, rng)
    assert client.codecs()["push:w"] == "onebit"
    keys = np.arange(1 << 32, (1 << 32) + AUTO_MIN_ROWS + 500, dtype=np.uint64)
    _window(client, keys, 1, truth, rng)  # measured under 1-bit: the drain costs more than bf16z would
    _exact(shards, truth)
    assert client.codecs()["push:w"] == BASE and client.compression_stats()["auto_switches"] == 2


def test_the_estimate_prices_a_sign_for_each_column_1bit_pushes() -> None:
    """1-bit holds a state delta's accumulators for the drains (docs/design/sign-planes.md):
    its pushes carry a sign a row of FTRL's [z | n], not two."""
    keys = np.arange(1, 20_001, dtype=np.uint64)
    both, held = AutoChoice(), AutoChoice(held_cols=1)
    for choice in (both, held):
        _bodies(choice, keys, 2, 4)
    assert both.sent == 4 * (20_000 * 2 // 8) and held.sent == 4 * (20_000 // 8)
    client, _ = _client()
    assert client.compression.choices == {}
    client.push("w", keys[:10], np.ones((10, 2)), kind=DELTA)
    assert client.compression.choices["w"].held_cols == 1  # FTRL at dim 1: n


def test_the_estimate_counts_distinct_rows_on_a_sample_of_keys() -> None:
    keys = np.arange(1, 200_001, dtype=np.uint64)
    share = sampled(keys).shape[0] / keys.shape[0]
    assert abs(share - 2.0**-SAMPLE_BITS) < 0.005  # about 1 in 16, even for consecutive ids
    choice = AutoChoice()
    _bodies(choice, keys, 2, 16)  # the same 200,000 rows, 16 times between two cuts, 2 values each
    choice.drained("cut", 0)
    exact_drain = 200_000 * (2 * 8 + 8)
    assert choice.plain == 16 * 200_000 * 2 * 8 and choice.base == 16 * 200_000 * 2 * 2
    assert abs(choice.sent - (16 * 200_000 * 2 // 8 + exact_drain)) < 0.05 * exact_drain
    assert abs(choice.cut_sent - exact_drain) < 0.05 * exact_drain
    assert choice.judge(at_cut=True) and choice.compress  # 0.44 of bf16z's bytes, its cut drain 0.094 of fp64's
    assert choice.base_per_value == 2.0  # what the window measured, for pricing bf16z under 1-bit


def test_a_cut_drain_that_would_stall_keeps_rounded_pushes_though_bytes_would_pay() -> None:
    """Rows of 8 values pushed 3 times between cuts, cut drains in bf16: 1-bit would carry
    0.56 of bf16z's bytes, but its cut drain would be 0.375 of fp64's, sent while training
    waits for the cut (3.6-3.9 s a cut on the demo's FFM): bf16z stays. Pushed 8 times
    (0.25, its drain 0.14), 1-bit pays."""
    keys = np.arange(1, 200_001, dtype=np.uint64)
    for times, moves in ((3, False), (8, True)):
        choice = AutoChoice(cut_value_bytes=2)
        _bodies(choice, keys, 8, times)
        choice.drained("cut", 0)
        assert choice.judge(at_cut=True) == moves, (times, choice.describe())
        assert ("cut drain" in choice.describe()) and choice.ratio >= 1 / 0.6
    measured = AutoChoice(compress=True, cut_value_bytes=2)  # a 1-bit window leaves when its cut drain would stall
    _bodies(measured, keys, 8, 3, onebit_body=200_000)
    measured.drained("cut", 200_000)
    assert measured.judge(at_cut=True) and not measured.compress  # 0.56 of the bytes, but its drain 0.375


def test_a_bf16_cut_drain_is_priced_in_bf16_bytes_but_its_stall_in_rows() -> None:
    """Rows pushed 8 times between cuts, 2 values each: with bf16 cut drains 1-bit carries
    fewer bytes than with fp64 ones (and here it pays only with them), but the cut waits for
    the shard to take each drained row whatever carries it, so the stall limit counts the
    rows at fp64's bytes, as it was tuned (a long tail in 1-bit ran 29% slower, cut-drains.md)."""
    keys = np.arange(1, 200_001, dtype=np.uint64)
    judged = {}
    for cut_value_bytes in (8, 2):
        choice = AutoChoice(cut_value_bytes=cut_value_bytes)
        _bodies(choice, keys, 2, 8)
        choice.drained("cut", 0)
        drain = 200_000 * (2 * cut_value_bytes + 8)
        assert abs(choice.cut_sent - drain) < 0.05 * drain
        moves = choice.judge(at_cut=True)
        judged[cut_value_bytes] = (moves, choice.ratio, choice.stall)
    assert judged[2][1] > 1.5 * judged[8][1]  # fewer bytes: (2 + 12) / 32 against (2 + 24) / 32
    assert judged[2][2] == judged[8][2]  # the same stall: 0.1875 of fp64's bytes
    assert judged[2][0] and not judged[8][0]
    for times in (4, 6):  # a stall over 20% keeps bf16z whatever the drain's codec
        choice = AutoChoice(cut_value_bytes=2)
        _bodies(choice, keys, 2, times)
        choice.drained("cut", 0)
        assert not choice.judge(at_cut=True), choice.describe()


def test_a_window_runs_on_across_cuts_until_it_holds_an_export(monkeypatch: pytest.MonkeyPatch) -> None:
    """1-bit pays an export drain for each export; where exports come every few cuts, a
    window that holds one and a window that does not differ by that drain, and judging
    each cut's window alone switched codecs back and forth. So a window is judged at the
    first cut after it holds an export's drain (or at its AUTO_WINDOW_CUTS-th cut where no
    export comes), and its cuts' drains all count."""
    monkeypatch.setattr(auto_codec, "AUTO_WINDOW_CUTS", 4)
    keys = np.arange(1, 20_001, dtype=np.uint64)
    choice = AutoChoice(cut_value_bytes=2)
    for cut in range(2):  # pays on a cut's window alone: 16 x 4 bytes against 16 x 2 bits + 12 bytes a row
        _bodies(choice, keys, 2, 16)
        choice.drained("cut", 0)
        assert not choice.judge(at_cut=True) and choice.rows == (cut + 1) * 16 * 20_000  # runs on
    _bodies(choice, keys, 2, 1)
    choice.drained("export", 0)  # the window now holds an export's drain: judged, with its two cuts
    assert choice.judge(at_cut=False) and choice.compress
    sample = sampled(keys).shape[0] << SAMPLE_BITS
    assert choice.ratio == pytest.approx(33 * 20_000 * 2 * 2 / (33 * 20_000 * 2 / 8 + 4 * sample * 12), rel=1e-9)
    quiet = AutoChoice(cut_value_bytes=2)  # no exports: judged at the fourth cut
    judged = []
    for _ in range(4):
        _bodies(quiet, keys, 2, 16)
        quiet.drained("cut", 0)
        judged.append(quiet.judge(at_cut=True))
    assert judged == [False, False, False, True]


def test_a_table_whose_onebit_window_measured_more_than_its_estimate_does_not_flap_back() -> None:
    """A window whose estimate said 1-bit pays went 1-bit, measured that it did not (here:
    rows the residual bound sends exactly, which the estimate of a sign a value and the
    drains cannot see), and went back; the same estimate then sent it to 1-bit again (16
    switches on two ranks' Frappe DeepFM). How far the estimate missed now scales it: the
    table stays, unless its stream comes to pay by that much more."""
    keys = np.arange(1, 20_001, dtype=np.uint64)
    choice = AutoChoice(cut_value_bytes=2)
    _bodies(choice, keys, 2, 16)  # every row 16 times between cuts: the estimate says 1-bit pays
    choice.drained("cut", 0)
    assert choice.judge(at_cut=True) and choice.compress
    for _ in range(16):  # under 1-bit, signs and means, and a fifth of the rows sent exactly each push
        choice.pushed(keys, 2, 1 + 16 + 20_000 * 2 // 8, 4_000)
    choice.drained("cut", 20_000)
    assert choice.judge(at_cut=True) and not choice.compress  # measured: more than 0.8 of bf16z's bytes
    assert choice.miss > 3.0, choice.miss
    _bodies(choice, keys, 2, 16)  # the same stream again
    choice.drained("cut", 0)
    assert not choice.judge(at_cut=True) and not choice.compress, choice.describe()
    assert "as onebit last measured" in choice.describe()
    _bodies(choice, keys, 2, 128)  # rows repeated eight times as often: 1-bit pays even at that miss
    choice.drained("cut", 0)
    assert choice.judge(at_cut=True) and choice.compress


def test_rounded_windows_keep_an_accumulator_at_fewer_bits_and_the_kept_copy_follows() -> None:
    """auto's bf16z pushes round a state delta's accumulator columns (FTRL's n here) to
    BASE_ACCUMULATOR_BITS mantissa bits and the rest as bf16 does; the shard adds exactly
    that, and the worker's kept copy is the shard's row bit for bit."""
    from ps.compression.payload import VALUE_CODECS
    from ps.compression.reference import round_mantissa_reference

    client, shards = _client()
    client.cache.keep()
    rng = np.random.default_rng(4)
    keys = np.unique(rng.integers(1, 1 << 40, size=3000, dtype=np.uint64))
    delta = np.column_stack([rng.normal(size=keys.shape[0]) * 0.1, rng.exponential(size=keys.shape[0])])
    _, session = client.pull("w", keys, state=True)
    client.push("w", keys, delta, session, kind=DELTA, samples=1)
    codecs = client.codecs()
    assert codecs["push:w"] == BASE and f"accumulators at {BASE_ACCUMULATOR_BITS} mantissa bits" in codecs["auto:w"], codecs
    held = _held(shards, keys)
    np.testing.assert_array_equal(held[:, 0], VALUE_CODECS["bf16z"].encode(delta[:, :1], rng)[1][:, 0])
    np.testing.assert_array_equal(held[:, 1], round_mantissa_reference(delta[:, 1], BASE_ACCUMULATOR_BITS))
    copy, _ = client.pull("w", keys, state=True)
    np.testing.assert_array_equal(np.asarray(copy, dtype=np.float64), held)


def test_the_sample_kernel_takes_the_keys_its_reference_takes() -> None:
    rng = np.random.default_rng(7)
    for n in (0, 1, 37, 5_000):
        keys = rng.integers(0, 2**64 - 1, n, dtype=np.uint64)
        np.testing.assert_array_equal(sampled(keys), auto_codec.sampled_reference(keys))
    assert 0.04 < sampled(rng.integers(0, 2**64 - 1, 100_000, dtype=np.uint64)).shape[0] / 100_000 < 0.085  # 1 in 16


def test_a_key_sample_counts_the_distinct_keys_added_across_its_compactions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auto_codec, "COMPACT_KEYS", 50)  # compacts many times over
    rng = np.random.default_rng(3)
    sample, seen = auto_codec.KeySample(), set()
    for i in range(200):
        keys = rng.integers(1, 400, rng.integers(0, 30), dtype=np.uint64)
        sample.add(keys)
        seen.update(keys.tolist())
        assert sample._held <= max(50, 2 * len(seen)) + 30  # memory bounded by the distinct keys
        if i % 17 == 0:
            assert len(sample) == len(seen)
    assert len(sample) == len(seen)
    sample.clear()
    assert len(sample) == 0
