"""Push compression: every kernel against its reference, every codec's round trip, the
error-feedback invariant, the residual memory bound, and payloads that must be refused."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ctr.format.varint import encode_varints
from ps.compression.bits import (
    bit_planes,
    bit_planes_reference,
    byte_planes,
    byte_planes_reference,
    pack_bits,
    packed_bytes,
    unpack_bits,
    words_of_planes,
)
from ps.compression.compressor import CodecSpec, Compressor, parse_codec
from ps.compression.minifloat import column_shifts, decode_minifloat, encode_minifloat
from ps.compression.payload import SIGN_PLANES, VALUE_CODECS, CodecError, coarse_bf16z, decode_payload, encode_rows
from ps.compression.quantize import (
    decode_int8,
    decode_onebit,
    decode_onebit_planes,
    encode_int8,
    encode_onebit,
    round_bf16,
    round_bf16_reference,
    rows_past_bound,
    uniforms,
)
from ps.compression.reference import (
    int8_reference,
    minifloat_reference,
    onebit_parts_reference,
    onebit_reference,
    pack_bits_reference,
    round_mantissa_reference,
    row_scores_reference,
    rows_past_bound_reference,
)
from ps.compression.residuals import ResidualStore
from ps.compression.topk import mstopk_threshold, row_scores, rows_at_least

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, allow_subnormal=False)
matrices = st.integers(1, 4).flatmap(lambda d: arrays(np.float64, st.tuples(st.integers(0, 40), st.just(d)), elements=finite))
# relative error bound of each lossy codec, for values within the column's top 2**-20
BOUNDS = {"fp16": 2.0**-10, "bf16": 2.0**-8, "bf16z": 2.0**-8, "epgc8": 2.0**-2, "epgc9": 0.5, "epgc11": 2.0**-5}


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 24).flatmap(lambda b: st.tuples(st.just(b), st.lists(st.integers(0, 2**b - 1), max_size=60))))
def test_bit_packing_equals_the_reference_and_round_trips(case):
    bits, values = case
    codes = np.asarray(values, dtype=np.uint32)
    packed = pack_bits(codes, bits)
    assert packed.shape[0] == packed_bytes(codes.shape[0], bits)
    np.testing.assert_array_equal(packed, pack_bits_reference(codes, bits))
    np.testing.assert_array_equal(unpack_bits(packed, codes.shape[0], bits), codes)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.integers(1, 20), st.integers(0, 2**32))
def test_bit_planes_equal_the_reference_and_decode_as_the_packed_signs_do(n, d, seed):
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(n, d))
    values[rng.random((n, d)) < 0.1] = -0.0
    values[:, rng.random(d) < 0.3] = 0.0  # columns auto's 1-bit holds back
    pos, neg, packed = encode_onebit(values)
    planes = bit_planes(packed, n, d)
    np.testing.assert_array_equal(planes, bit_planes_reference(packed, n, d))
    want = decode_onebit(pos, neg, packed, n)
    np.testing.assert_array_equal(decode_onebit_planes(pos, neg, planes, n).view(np.uint64), want.view(np.uint64))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 30), st.integers(1, 12), st.sampled_from([2, 4, 8]), st.integers(0, 2**32))
def test_byte_planes_equal_the_reference(n, d, size, seed):
    words = np.random.default_rng(seed).integers(0, 256, (n, d * size), dtype=np.uint8).view(f"<u{size}")
    got = byte_planes(np.ascontiguousarray(words).view(np.uint8).reshape(-1), n, d, size)
    np.testing.assert_array_equal(got, byte_planes_reference(words))
    back = words_of_planes(got, n, d, f"<u{size}")
    assert back.flags.c_contiguous and back.shape == (n, d)
    np.testing.assert_array_equal(back, words)  # the decoder's inverse


SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3e-39, 3.4e38, -3.4e38, 1e300, 6e-8]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 20), st.integers(1, 12))
def test_bf16_rounding_equals_the_reference(seed, n, d):
    """Nearest even at 7 or fewer mantissa bits per column, subnormals as bf16 rounds them,
    infinities, NaN and float32 overflow included."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(scale=10.0 ** float(rng.integers(-45, 40)), size=(n, d))
    rows[rng.random((n, d)) < 0.15] = rng.choice(SPECIALS)
    drop = rng.choice([16, 19, 21, 23], d).astype(np.uint32)
    top, values = round_bf16(rows, drop)
    with np.errstate(over="ignore"):
        ref_top, ref_values = round_bf16_reference(rows, drop)
    np.testing.assert_array_equal(top, ref_top)
    np.testing.assert_array_equal(values, ref_values)


@settings(max_examples=200, deadline=None)
@given(matrices, st.sampled_from([(5, 2), (8, 0), (5, 5), (8, 7)]))
def test_minifloat_equals_the_reference(values, fmt):
    exp_bits, man_bits = fmt
    shifts = column_shifts(values, exp_bits)
    codes, decoded = encode_minifloat(values, shifts, exp_bits, man_bits)
    got = decode_minifloat(codes, values.shape[1], shifts, exp_bits, man_bits)
    np.testing.assert_array_equal(got, minifloat_reference(values, shifts, exp_bits, man_bits))
    np.testing.assert_array_equal(decoded, got)


@settings(max_examples=200, deadline=None)
@given(
    arrays(
        np.float64,
        st.tuples(st.integers(0, 40), st.integers(1, 6)),
        elements=st.floats(-1e30, 1e30, allow_nan=False, allow_subnormal=False),
    ),
    st.integers(1, 7),
    st.integers(0, 6),
)
def test_coarse_bf16z_rounds_its_columns_as_the_reference_and_the_rest_as_bf16z(values, bits, start):
    n, d = values.shape
    body, decoded = coarse_bf16z(slice(start, None), bits).encode(values, np.random.default_rng())
    np.testing.assert_array_equal(VALUE_CODECS["bf16z"].decode(body, n, d), decoded)  # bf16z on the wire
    plain = VALUE_CODECS["bf16z"].encode(values, np.random.default_rng())[1]
    np.testing.assert_array_equal(decoded[:, :start], plain[:, :start])
    f = values[:, start:].astype(np.float32).astype(np.float64)
    normal = np.abs(f) >= np.finfo(np.float32).tiny  # float32's subnormals round as bf16 has them
    np.testing.assert_array_equal(decoded[:, start:][normal], round_mantissa_reference(values[:, start:], bits)[normal])
    np.testing.assert_array_equal(decoded[:, start:][~normal], plain[:, start:][~normal])
    assert np.all(np.sign(decoded) == np.sign(plain))  # nothing changes sign; zeros stay zero


def test_coarse_bf16z_ties_to_even_and_refuses_more_bits_than_bf16_has():
    rng = np.random.default_rng()
    _, got = coarse_bf16z(slice(0, 3), 4).encode(np.array([[1.0 + 2**-5, 1.0 + 3 * 2**-5, -(1.0 + 3 * 2**-6)]]), rng)
    np.testing.assert_array_equal(got[0], [1.0, 1.125, -1.0625])  # each tie goes to the even neighbour
    tiny = np.array([[2.35530664e-39, -3e-39]])  # float32 subnormals: rounded as bf16 rounds them, not to 0
    _, got = coarse_bf16z(slice(0, 2), 1).encode(tiny, rng)
    np.testing.assert_array_equal(got, VALUE_CODECS["bf16z"].encode(tiny, rng)[1])
    assert np.all(got != 0)
    for bits in (0, 8):
        with pytest.raises(ValueError, match="1 to 7 mantissa bits"):
            coarse_bf16z(slice(0, 1), bits)


def test_a_rounded_codec_may_keep_fewer_bits_in_some_columns_and_sends_them_as_decoded():
    rng = np.random.default_rng(3)
    rows = np.column_stack([rng.normal(size=500) * 0.01, rng.exponential(size=500)])
    keys = np.arange(500, dtype=np.uint64)
    coarse = Compressor(CodecSpec("bf16z", rounded=True), 1000, coarse=(slice(1, 2), 4))
    plain = Compressor(CodecSpec("bf16z", rounded=True), 1000)
    got, gone, _ = coarse.compress(keys, rows)
    whole, _, _ = plain.compress(keys, rows)
    mine, theirs = got.decoded(False), whole.decoded(False)
    assert mine is not None and theirs is not None and not gone.shape[0]
    _, decoded = decode_payload(got.payload(False), 500, 2)
    np.testing.assert_array_equal(decoded[:, 0], theirs[1][:, 0])  # the other columns: bf16's
    np.testing.assert_array_equal(decoded[:, 1], round_mantissa_reference(rows[:, 1], 4))  # 4 bits
    np.testing.assert_array_equal(decoded, mine[1])  # what the worker adds is what the shard decodes
    assert len(got.body) < len(whole.body)
    for spec in (CodecSpec("onebit"), CodecSpec("bf16", rounded=True)):
        with pytest.raises(ValueError, match="only bf16z:rounded"):
            Compressor(spec, 1000, coarse=(slice(1, 2), 4))


@settings(max_examples=200, deadline=None)
@given(matrices)
def test_onebit_and_int8_equal_their_references(values):
    pos, neg, packed = encode_onebit(values)
    np.testing.assert_array_equal(decode_onebit(pos, neg, packed, values.shape[0]), onebit_reference(values))
    u = uniforms(7, values.size)
    assert np.all((u >= 0) & (u < 1))
    lo, step, q, decoded = encode_int8(values, 7)
    np.testing.assert_allclose(decode_int8(lo, step, q, values.shape[1]), int8_reference(values, u), rtol=1e-12)
    np.testing.assert_array_equal(decoded, decode_int8(lo, step, q, values.shape[1]))
    if values.shape[0]:
        np.testing.assert_allclose(row_scores(values), row_scores_reference(values), rtol=1e-12)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(matrices, arrays(np.float64, st.tuples(st.integers(0, 5), st.integers(8, 12)), elements=finite)),
    st.sampled_from(sorted(VALUE_CODECS)),
)
@pytest.mark.slow
def test_every_codec_round_trips_within_its_bound(values, name):
    codec = VALUE_CODECS[name]
    body, decoded = codec.encode(values, np.random.default_rng(1))
    back = codec.decode(body, values.shape[0], values.shape[1])
    np.testing.assert_array_equal(back, decoded)  # the worker knows exactly what the shard gets
    if name in ("fp64", "fp64z"):  # bit for bit, -0.0 and subnormals too
        np.testing.assert_array_equal(back.view(np.uint64), values.view(np.uint64))
    elif name in ("fp32", "fp32z"):
        np.testing.assert_array_equal(back, values.astype(np.float32))
    elif name in BOUNDS and values.size:
        top = np.abs(values).max(axis=0)
        big = (np.abs(values) >= top * 2.0**-20) & (np.abs(values) >= 2.0**-126)  # bf16's range ends at float32's
        if name == "fp16":  # fp16 has no column scale: its range is fixed, and it saturates
            np.testing.assert_array_equal(back[np.abs(values) > 65504], np.sign(values[np.abs(values) > 65504]) * 65504)
            big &= (np.abs(values) <= 65504) & (np.abs(values) >= 2.0**-14)
        assert np.all(np.abs(back - values)[big] <= BOUNDS[name] * np.abs(values)[big] + 1e-300)
    elif name == "int8" and values.size:
        axis = 0 if values.shape[1] < 8 else 1  # narrow rows share a scale per column
        span = np.expand_dims(values.max(axis=axis) - values.min(axis=axis), axis)
        assert np.all(np.abs(back - values) <= span / 255.0 * (1 + 1e-6) + 1e-9 * np.abs(values) + 2.0**-126)
    elif name == "onebit" and values.size:
        axis = 1 if values.shape[0] < values.shape[1] else 0  # means per row when rows are fewer
        # sums kept, to float32 rounding of the terms (a sum of +-1e6 values cancels to a few units)
        slack = 1e-3 + 4 * 2.0**-23 * np.abs(values).sum(axis=axis)
        assert np.all(np.abs(back.sum(axis=axis) - values.sum(axis=axis)) <= slack)
        assert np.all((back >= 0) == (values >= 0) | (back == 0))


@pytest.mark.parametrize("name", ["fp32z", "fp64z", "bf16z"])
def test_plane_codecs_send_small_pushes_raw_and_large_ones_in_planes_bit_for_bit(name):
    rng = np.random.default_rng(5)
    codec = VALUE_CODECS[name]
    for rows, layout in ((10, 0), (5000, 1)):
        x = rng.normal(size=(rows, 3)) * 1e-3
        x[0] = [-0.0, 5e-324, 1e-310]  # signed zero and subnormals: fp64z keeps their bits
        x[:, 2] = 4.0  # a constant column: its planes cost next to nothing
        body, decoded = codec.encode(x, rng)
        assert body[0] == layout
        back = codec.decode(body, rows, 3)
        np.testing.assert_array_equal(back.view(np.uint64), decoded.view(np.uint64))
        plain = VALUE_CODECS[name[:-1]]
        np.testing.assert_array_equal(decoded.view(np.uint64), plain.encode(x, rng)[1].view(np.uint64))
        if layout:
            assert len(body) < 0.9 * len(plain.encode(x, rng)[0])


def test_onebit_sends_an_accumulator_columns_signs_in_a_plane_that_costs_little():
    rng = np.random.default_rng(3)
    n = 20_000
    x = np.stack([rng.normal(size=n), rng.exponential(size=n)], axis=1)  # FTRL's z and n deltas
    x[::97, 1] *= -1  # error feedback leaves a few of n's below 0
    codec = VALUE_CODECS["onebit"]
    body, decoded = codec.encode(x, rng)
    raw = 1 + 16 + n * 2 // 8
    assert body[0] == SIGN_PLANES and len(body) < 0.65 * raw  # z's plane a bit a row, n's far less
    np.testing.assert_array_equal(decoded, onebit_reference(x))
    np.testing.assert_array_equal(codec.decode(body, n, 2), decoded)
    wide = np.abs(rng.normal(size=(40, 300)))  # fewer rows than columns: means per row, signs per column of rows.T
    body, decoded = codec.encode(wide, rng)
    assert body[0] == SIGN_PLANES | 1
    np.testing.assert_array_equal(codec.decode(body, 40, 300), decoded)
    np.testing.assert_array_equal(decoded, onebit_reference(wide.T).T)
    # signs that zstd cannot shrink go row-major as before
    body, _ = codec.encode(rng.normal(size=(n, 2)), rng)
    assert body[0] == 0 and len(body) == raw


def _sign_planes_body(n: int, *chunks: bytes, lengths: list[int] | None = None) -> bytes:
    """A 2-column onebit body with its signs in planes: the layout byte, 16 bytes of means,
    the planes' lengths (default: each chunk's), the chunks."""
    sizes = [len(c) for c in chunks] if lengths is None else lengths
    return bytes([SIGN_PLANES]) + bytes(16) + bytes(encode_varints(np.array(sizes, dtype=np.uint64))) + b"".join(chunks)


HUGE_FRAME = zstandard.ZstdCompressor().compress(bytes(1 << 20))  # a few bytes that inflate to 1 MiB


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"\x04" + bytes(16 + 250), "the layout byte"),
        (bytes([SIGN_PLANES]) + bytes(10), "need at least 17"),
        (_sign_planes_body(2000, bytes(250), lengths=[0, 0]), "their lengths say"),
        (_sign_planes_body(2000, bytes(250), bytes(250), bytes(1)), "their lengths say"),
        (_sign_planes_body(2000, bytes(250), b"junk", lengths=[0, 4]), "sign plane 1: not a zstd frame"),
        (_sign_planes_body(2000, bytes(250), HUGE_FRAME, lengths=[0, len(HUGE_FRAME)]), "declares 1048576"),
        (bytes([SIGN_PLANES]) + bytes(16) + b"\x80", "frame lengths"),
    ],
)
def test_onebit_sign_planes_that_do_not_match_the_counts_are_refused(body, error):
    with pytest.raises(CodecError, match=error):
        VALUE_CODECS["onebit"].decode(body, 2000, 2)


def test_rounding_uniforms_are_uniform():
    u = uniforms(3, 200_000)
    counts = np.histogram(u, bins=20, range=(0, 1))[0]
    assert abs(u.mean() - 0.5) < 0.005 and counts.min() > 9_000 and not np.array_equal(u[:100], uniforms(4, 100))


def test_int8_stochastic_rounding_is_unbiased():
    values = np.full((1, 3), 0.3) + np.array([[0.0, 1.0, 0.71]])
    codec = VALUE_CODECS["int8"]
    rng = np.random.default_rng(5)
    mean = np.mean([codec.encode(values, rng)[1] for _ in range(4000)], axis=0)
    np.testing.assert_allclose(mean, values, atol=2e-4)


@settings(max_examples=200, deadline=None)
@given(arrays(np.float64, st.integers(1, 400), elements=st.floats(0, 1e3)), st.floats(0.001, 1.0))
def test_mstopk_threshold_selects_about_k_rows(scores, ratio):
    k = max(1, int(np.ceil(ratio * scores.shape[0])))
    t = mstopk_threshold(scores, k, 25)
    chosen = rows_at_least(scores, t)
    np.testing.assert_array_equal(chosen, np.flatnonzero((scores >= t) & (scores > 0)))
    if k < scores.shape[0] and np.count_nonzero(scores) >= k:
        assert chosen.shape[0] <= 2 * k + np.count_nonzero(scores == np.sort(scores)[-k])  # ties pass together
        assert chosen.shape[0] >= 1


@pytest.mark.parametrize("spec", ["onebit", "topk:0.1+onebit", "topk:0.2+int8", "epgc8", "topk:0.05"])
def test_error_feedback_sends_the_true_sum_less_the_residual(spec):
    """Over many pushes of the same keys, what the shard received plus what is still held
    back equals the sum of everything pushed."""
    comp = Compressor(parse_codec(spec), residual_rows=1000, seed=3)
    rng = np.random.default_rng(4)
    keys = np.arange(1, 51, dtype=np.uint64)
    true_sum = np.zeros((50, 2))
    sent_sum = np.zeros((50, 2))
    for _ in range(30):
        g = rng.normal(size=(50, 2)) * np.array([1.0, 0.01])
        true_sum += g
        packed, gone, _ = comp.compress(keys, g)
        assert gone.shape[0] == 0
        sent, values = decode_payload(packed.payload(with_subset=True), 50, 2)
        sent_sum[np.arange(50) if sent is None else sent] += values
    np.testing.assert_allclose(sent_sum + comp.unsent(keys, 2), true_sum, atol=1e-9)


@pytest.mark.parametrize("bound", [None, 2.0])
def test_residual_memory_stays_within_its_cap_and_evicted_rows_are_returned(bound):
    """Rows evicted from a full memory and rows over the residual bound both leave it
    exactly, once: what was sent, what left and what is held add up to what was pushed."""
    comp = Compressor(parse_codec("onebit"), residual_rows=64, seed=0, residual_bound=bound)
    rng = np.random.default_rng(0)
    true_sum: dict[int, np.ndarray] = {}
    accounted: dict[int, np.ndarray] = {}
    for _ in range(40):
        keys = np.unique(rng.integers(1, 500, 30)).astype(np.uint64)
        g = rng.normal(size=(keys.shape[0], 3)) * np.where(keys % 7 == 0, 20.0, 1.0)[:, None]  # some outliers
        for k, row in zip(keys.tolist(), g, strict=True):
            true_sum[k] = true_sum.get(k, 0) + row
        packed, gone_keys, gone_rows = comp.compress(keys, g)
        _, values = decode_payload(packed.payload(with_subset=False), keys.shape[0], 3)
        for k, row in zip(keys.tolist(), values, strict=True):
            accounted[k] = accounted.get(k, 0) + row
        for k, row in zip(gone_keys.tolist(), gone_rows, strict=True):  # flushed exactly by the client
            accounted[k] = accounted.get(k, 0) + row
        assert comp.residuals is not None and len(comp.residuals) <= 64
        assert comp.stats()["residual_rows_peak"] <= 64
    left_keys, left_rows = comp.drain()
    for k, row in zip(left_keys.tolist(), left_rows, strict=True):
        accounted[k] = accounted.get(k, 0) + row
    for k, row in true_sum.items():
        np.testing.assert_allclose(accounted[k], row, atol=1e-9)
    assert (comp.bound_rows > 0) == (bound is not None)


def test_residual_bound_keeps_a_hot_rows_residual_from_growing():
    """1-bit sends each value as its column's mean, so a row pushed ten times larger than
    the rest every time falls further behind at each push; other ranks would train that row
    without what it holds back. With the bound its residual stays within B times the
    column's mean sent value, and what passes the bound leaves exactly."""
    keys = np.arange(1, 101, dtype=np.uint64)
    rng = np.random.default_rng(1)
    pushes = [np.abs(rng.normal(size=(100, 2))) * np.where(keys == 1, 10.0, 1.0)[:, None] for _ in range(50)]
    unbounded = Compressor(parse_codec("onebit"), residual_rows=1000)
    bounded = Compressor(parse_codec("onebit"), residual_rows=1000, residual_bound=8.0)
    for g in pushes:
        unbounded.compress(keys, g)
        packed, gone, gone_rows = bounded.compress(keys, g)
        _, values = decode_payload(packed.payload(with_subset=False), 100, 2)
        limit = 8.0 * np.abs(values).mean(axis=0)
        assert np.all(np.abs(bounded.unsent(keys, 2)) <= limit)
        assert set(gone.tolist()) <= {1}  # only the hot row passes the bound
    hot = np.array([1], dtype=np.uint64)
    assert np.abs(unbounded.unsent(hot, 2)).max() > 100  # several a push, never caught up
    assert np.abs(bounded.unsent(hot, 2)).max() < 20
    assert bounded.stats()["residual_bound_rows"] >= 10  # sent exactly every few pushes


def test_rows_over_the_bound_travel_exactly_in_the_push_itself():
    """A row whose residual passes the bound goes exactly (update and residual, float64, bit
    for bit) inside the push that carries it, by its position, so no call of its own follows.
    Nothing is lost."""
    keys = np.arange(1, 201, dtype=np.uint64)
    rng = np.random.default_rng(4)
    comp = Compressor(parse_codec("onebit"), residual_rows=1000, residual_bound=4.0)
    total, received, folded = np.zeros((200, 3)), np.zeros((200, 3)), 0
    for _ in range(20):
        g = rng.normal(size=(200, 3)) * np.where(keys % 17 == 0, 30.0, 1.0)[:, None]
        x = g + comp.unsent(keys, 3)
        total += g
        packed, gone, _ = comp.compress(keys, g)
        payload = packed.payload(with_subset=False)
        _, values = decode_payload(payload, 200, 3)
        np.testing.assert_array_equal(values, packed.values)  # what the client's copies take
        assert gone.shape[0] == 0  # no row needs a call of its own
        if packed.exact_values:
            assert payload[3] & 4 and packed.value_bytes > len(packed.body)
            folded += int((values == x).all(axis=1).sum())
        received += values
    assert folded >= 10 and comp.bound_rows == folded
    np.testing.assert_allclose(received + comp.unsent(keys, 3), total, atol=1e-9)


def test_a_row_over_the_bound_that_top_k_leaves_out_leaves_with_its_key():
    """top-k carries 2 of 200 rows (column 0's giants); a row large only in column 1 passes
    the bound there but is not carried: it leaves the memory for the client to send exactly."""
    keys = np.arange(1, 201, dtype=np.uint64)
    g = np.ones((200, 2))
    g[[10, 20], 0] = 1000.0
    g[30] = [0.0, 50.0]
    comp = Compressor(parse_codec("topk:0.01+onebit"), residual_rows=1000, residual_bound=4.0)
    packed, gone, gone_rows = comp.compress(keys, g)
    sent, values = decode_payload(packed.payload(with_subset=True), 200, 2)
    assert sent is not None and sent.tolist() == [10, 20] and not packed.exact_values
    np.testing.assert_array_equal(gone, keys[[30]])
    np.testing.assert_array_equal(gone_rows, [[0.0, 50.0]])
    received = np.zeros((200, 2))
    received[sent] += values
    received[30] += gone_rows[0]
    np.testing.assert_allclose(received + comp.unsent(keys, 2), g)


def test_exact_rows_that_do_not_match_the_push_are_refused():
    """The exact rows' lengths, positions and values are checked like the rest of a payload."""
    keys = np.arange(1, 101, dtype=np.uint64)
    base = Compressor(parse_codec("onebit"), 1000).compress(keys, np.random.default_rng(0).normal(size=(100, 2)))[0]
    at = np.array([3, 50], dtype=np.int64)
    good = base.with_exact(at, np.array([[1.0, -2.0], [0.5, 7.0]])).payload(with_subset=False)
    _, values = decode_payload(good, 100, 2)
    np.testing.assert_array_equal(values[at], [[1.0, -2.0], [0.5, 7.0]])
    bad = {
        "positions repeat": base.with_exact(np.array([3, 3]), np.ones((2, 2))),
        "out of the dictionary's range": base.with_exact(np.array([3, 100]) % 100, np.ones((2, 2))),
        "not all finite": base.with_exact(at, np.full((2, 2), np.inf)),
    }
    bad["out of the dictionary's range"] = replace(
        bad["out of the dictionary's range"], exact_index=bytes(encode_varints(np.array([2, 3, 97], dtype=np.uint64)))
    )
    for error, packed in bad.items():
        with pytest.raises(CodecError, match=error):
            decode_payload(packed.payload(with_subset=False), 100, 2)
    with pytest.raises(CodecError, match="exact rows longer than the payload"):
        decode_payload(good[:12], 100, 2)
    with pytest.raises(CodecError, match="exact rows"):
        decode_payload(replace(base.with_exact(at, np.ones((2, 2))), exact_values=b"\x00" + bytes(31)).payload(False), 100, 2)


def test_held_columns_wait_in_the_residuals_for_the_drain_and_cost_a_few_bytes_a_push():
    """auto's 1-bit holds a state delta's accumulators back: the shard gets zeros there, the
    residual keeps all of them (the bound ignores them), a drain sends them, and nothing is
    lost; the zeros' sign plane costs a few bytes, so a push carries one bit a row, not two."""
    keys = np.arange(1, 2001, dtype=np.uint64)
    rng = np.random.default_rng(8)
    held = Compressor(parse_codec("onebit"), residual_rows=5000, residual_bound=50.0, held=slice(1, 2))
    plain = Compressor(parse_codec("onebit"), residual_rows=5000, residual_bound=50.0)
    total, received = np.zeros((2000, 2)), np.zeros((2000, 2))
    for i in range(6):
        g = np.stack([rng.normal(size=2000), rng.exponential(size=2000)], axis=1)  # FTRL's z and n deltas
        total += g
        packed, gone, _ = held.compress(keys, g)
        assert gone.shape[0] == 0  # all of n is owed, by design: not a row over the bound
        _, values = decode_payload(packed.payload(with_subset=False), 2000, 2)
        assert np.all(values[:, 1] == 0.0)
        received += values
        plain_bytes = len(plain.compress(keys, g)[0].body)
        # n's signs are all 1 in the first push only; then error feedback makes them noise
        assert len(packed.body) < (1.05 if i == 0 else 0.6) * plain_bytes
    np.testing.assert_allclose(held.unsent(keys, 2)[:, 1], total[:, 1])
    left_keys, left_rows = held.drain()
    np.testing.assert_array_equal(left_keys, keys)
    np.testing.assert_allclose(received + left_rows, total, atol=1e-9)
    with pytest.raises(ValueError, match="error feedback"):
        Compressor(parse_codec("fp32"), 10, held=slice(1, 2))


def test_a_put_at_the_slots_take_found_is_the_same_put():
    """Compression takes a push's residuals and puts the new ones for the same keys: the
    put reuses the take's lookup, and the store ends as a put that looks again leaves it."""
    rng = np.random.default_rng(9)
    looked, reused = ResidualStore(40), ResidualStore(40)
    for _ in range(12):
        keys = np.unique(rng.integers(1, 80, 30)).astype(np.uint64)
        rows = rng.normal(size=(keys.shape[0], 2))
        owed, slots = reused.take_slots(keys, 2)
        np.testing.assert_array_equal(owed, looked.take(keys, 2))
        gone_looked = looked.put(keys, owed + rows)
        gone_reused = reused.put(keys, owed + rows, slots=slots)
        for a, b in zip(gone_looked, gone_reused, strict=True):  # the same rows evicted (capacity 40)
            np.testing.assert_array_equal(a, b)
    for a, b in zip(looked.items(), reused.items(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_residual_store_evicts_the_least_recently_pushed():
    store = ResidualStore(3)
    store.put(np.array([1, 2, 3], dtype=np.uint64), np.ones((3, 1)))
    store.put(np.array([1, 3], dtype=np.uint64), np.ones((2, 1)))
    gone, _ = store.put(np.array([4], dtype=np.uint64), np.ones((1, 1)))
    assert gone.tolist() == [2] and store.items()[0].tolist() == [1, 3, 4]


def test_topk_subset_travels_as_gaps_or_bitmap_whichever_is_smaller():
    rng = np.random.default_rng(0)
    g = rng.normal(size=(1000, 2))
    for spec, flags in (("topk:0.01+onebit", 1), ("topk:0.5+onebit", 3)):
        packed, _, _ = Compressor(parse_codec(spec), 10_000).compress(np.arange(1, 1001, dtype=np.uint64), g)
        payload = packed.payload(with_subset=True)
        assert payload[3] == flags
        sent, values = decode_payload(payload, 1000, 2)
        assert sent is not None and values.shape == (sent.shape[0], 2)


def _payload(spec: str = "topk:0.1+onebit", n: int = 100) -> bytes:
    g = np.random.default_rng(0).normal(size=(n, 2))
    return Compressor(parse_codec(spec), 1000).compress(np.arange(1, n + 1, dtype=np.uint64), g)[0].payload(True)


def _frames(*planes: bytes) -> bytes:
    """An fp32z/fp64z body: one zstd frame a plane, their lengths first."""
    frames = [zstandard.ZstdCompressor().compress(p) for p in planes]
    return b"\x01" + bytes(encode_varints(np.array([len(f) for f in frames], dtype=np.uint64))) + b"".join(frames)


@pytest.mark.parametrize(
    ("payload", "rows", "cols", "error"),
    [
        (b"", 100, 2, "magic"),
        (b"\xc7\x01\x63\x00" + _payload()[4:], 100, 2, "unknown codec"),
        (_payload()[:3] + b"\x80" + _payload()[4:], 100, 2, "unknown flags"),
        (_payload(), 99, 2, "the push names 99"),
        (_payload(), 100, 3, "the push names 100 of 3"),
        (_payload()[:-1], 100, 2, "body is"),
        (_payload() + b"\0", 100, 2, "body is"),
        (_payload("epgc11")[:-3], 100, 2, "body is"),
        (_payload("fp32")[:4] + bytes([100, 99, 2]) + _payload("fp32")[7:], 100, 2, "no subset"),
        (_payload("fp32")[:7] + np.full(200, np.nan, "<f4").tobytes(), 100, 2, "not all finite"),
        (_payload("fp64z")[:-2], 100, 2, "fp64z"),
        (_payload("fp64z")[:7] + b"\x01junk", 100, 2, "fp64z: frame lengths"),
        (_payload("fp64z")[:7] + b"\x01" + bytes(8) + b"junk", 100, 2, "fp64z: body is 13 bytes"),
        (_payload("fp64z")[:7] + bytes([1, 4] + [0] * 7) + b"junk", 100, 2, "fp64z: plane 0: not a zstd frame"),
        (_payload("fp64z")[:7] + b"\x07" + bytes(1600), 100, 2, "fp64z: the layout byte"),
        (_payload("fp32z")[:7] + b"\x00" + bytes(799), 100, 2, "body is 800 bytes"),
        # a small frame declaring more than the header's counts is refused before it is inflated
        (_payload("fp32z")[:7] + _frames(bytes(1 << 20), *[bytes(200)] * 3), 100, 2, "plane 0 declares 1048576"),
        # 200 float32 infinities: byte planes 00, 00, 80, 7f
        (_payload("fp32z")[:7] + _frames(bytes(200), bytes(200), b"\x80" * 200, b"\x7f" * 200), 100, 2, "not all finite"),
    ],
)
def test_mismatched_payloads_are_refused_naming_what(payload, rows, cols, error):
    with pytest.raises(CodecError, match=error):
        decode_payload(payload, rows, cols)


def test_codec_specs_parse_and_refuse_nonsense():
    assert parse_codec("topk:0.01+onebit") == CodecSpec("onebit", 0.01) and parse_codec("int8") == CodecSpec("int8")
    assert parse_codec("topk:0.05").value == "fp32"
    for bad, msg in (("onebit+int8", "only topk"), ("topk:2+onebit", "ratio"), ("topk:x", "ratio"), ("fp8", "unknown")):
        with pytest.raises(ValueError, match=msg):
            parse_codec(bad)


@settings(max_examples=100, deadline=None)
@given(
    arrays(np.float64, st.tuples(st.integers(1, 30), st.just(1)), elements=st.floats(-1, 1)),
    st.integers(0, 50),
    st.integers(1, 9),
)
def test_frozen_adam_step_equals_the_reference(momentum, t, steps):
    from ctr.model.optim import OptimizerSpec, frozen_adam_reference, frozen_adam_rows

    spec = OptimizerSpec("adam", lr=0.01)
    rng = np.random.default_rng(t)
    state = np.column_stack(
        [rng.normal(size=momentum.shape[0]), rng.normal(size=momentum.shape[0]), rng.random(momentum.shape[0])]
    )
    state = np.column_stack([state, np.full(momentum.shape[0], float(t))])
    want = frozen_adam_reference(state, momentum, spec, steps)
    frozen_adam_rows(state, momentum, spec.params(), steps)
    np.testing.assert_allclose(state, want, rtol=1e-12)
    assert np.all(state[:, 2:] == want[:, 2:])  # variance and step count stay frozen


def test_dense_codec_specs_parse_and_refuse_nonsense():
    from trainer.step.dense_sync import DEFAULT_WARMUP, parse_dense_codec

    assert parse_dense_codec("fp32") == ("fp32", 0)
    assert parse_dense_codec("onebit-adam") == ("onebit-adam", DEFAULT_WARMUP)
    assert parse_dense_codec("zeroone-adam:7") == ("zeroone-adam", 7)
    for bad in ("onebit-adam:0", "onebit-adam:x", "int8", "fp32:3"):
        with pytest.raises(ValueError, match="dense-codec"):
            parse_dense_codec(bad)


def test_zeroone_adam_syncs_ever_more_rarely_and_refreshes_the_variance_at_powers_of_two():
    from ctr.model.optim import OptimizerSpec
    from ctr.model.spec import TableSpec
    from ps.client import PSClient
    from trainer.step.dense_sync import ZeroOneAdam

    client = PSClient.local(2)
    client.control.declare([TableSpec("mlp", "dense", 50, OptimizerSpec("adam", lr=0.01), "batch")])
    sent: list[tuple[str, int]] = []
    push = client.push_dense

    def recording(table, values, kind="gradient", onebit=False, steps=1, samples=0, base=None):  # type: ignore[no-untyped-def]
        sent.append((kind, steps))
        push(table, values, kind, onebit, steps, samples, base)

    client.push_dense = recording  # type: ignore[method-assign]
    sync = ZeroOneAdam("mlp", warmup=3, lr=0.01, beta1=0.9, beta2=0.999, eps=1e-8)
    rng = np.random.default_rng(0)
    for _ in range(3 + 200):
        sync.weights(client)
        sync.push(client, rng.normal(size=50))
    sync.flush(client)  # the run ends: the kept-back local steps go out
    assert sent[:3] == [("gradient", 1)] * 3  # warm-up: plain Adam
    after = sent[3:]
    refreshes = [i for i, (kind, _) in enumerate(after) if kind == "gradient"]
    assert len(refreshes) == 8  # steps 1, 2, 4, ..., 128 after warm-up
    momentum_steps = [steps for kind, steps in after if kind == "momentum"]
    assert sum(momentum_steps) == 200  # every local step reaches the shards once
    assert max(momentum_steps) > 1 and len(momentum_steps) < 100  # rounds were skipped
    assert np.isfinite(client.pull_dense("mlp")).all()


def test_a_delta_may_take_an_accumulator_below_zero_and_the_weights_stay_finite():
    """Error feedback may send more of n than has accrued for a while: the shard keeps the
    exact sum (the worker's view relies on it) and reads n as max(n, 0)."""
    from ctr.model.spec import ModelSpec
    from ps.server.shard import Shard

    shard = Shard(0, 1)
    shard.declare(ModelSpec("lr").tables())
    keys = np.array([5, 9], dtype=np.uint64)
    shard.push("w", keys, np.array([0.5, -0.25, -2.0, 0.75]), kind="delta")  # rows [z, n]
    _, state = shard.pull("w", keys, open_session=False, state=True)
    np.testing.assert_array_equal(state, [[0.5, -0.25], [-2.0, 0.75]])
    _, weights = shard.pull("w", keys, open_session=False)
    assert np.isfinite(weights).all()
    shard.push("w", keys, np.array([0.0, 0.5, 0.0, 0.0]), kind="delta")
    np.testing.assert_array_equal(shard.pull("w", keys, open_session=False, state=True)[1][:, 1], [0.25, 0.75])


def test_a_momentum_push_to_a_sparse_table_is_refused():
    from ctr.model.spec import ModelSpec
    from ps.server.errors import ShardError
    from ps.server.shard import Shard

    shard = Shard(0, 1)
    shard.declare(ModelSpec("lr").tables())
    with pytest.raises(ShardError, match="momentum pushes are for dense adam tables"):
        shard.push_width("w", "momentum")


@pytest.mark.parametrize("codec", ["onebit-adam:3", "zeroone-adam:3"])
def test_a_dense_sync_that_takes_up_a_cut_goes_on_as_one_that_never_stopped(tmp_path, codec):
    """A checkpoint cut records the worker's sync state (momentum, frozen denominator,
    local steps, 1-bit residual): a worker restarted at the cut, against shards restored
    to it, leaves the weights an uninterrupted worker leaves, bit for bit."""
    from ctr.model.optim import OptimizerSpec
    from ctr.model.spec import TableSpec
    from ps.client import PSClient
    from trainer.step.dense_sync import dense_sync

    tables = [TableSpec("mlp", "dense", 50, OptimizerSpec("adam", lr=0.01), "batch")]
    grads = np.random.default_rng(0).normal(size=(60, 50))

    def steps(sync, client, rows) -> None:  # type: ignore[no-untyped-def]
        for g in rows:
            sync.weights(client)
            sync.push(client, g)

    def fresh(path):  # type: ignore[no-untyped-def]
        client = PSClient.local(2, data_dir=path)
        client.control.declare(tables)
        return client, dense_sync(codec, "mlp", 0.01, 0.9, 0.999, 1e-8)

    client, sync = fresh(tmp_path / "a")
    steps(sync, client, grads[:37])
    sync.flush(client)  # a cut: what the worker kept back goes out, the rest is recorded
    state = json.loads(json.dumps(sync.state(client)))
    client.control.prepare(1, b"")
    client.control.commit(1)
    steps(sync, client, grads[37:])
    sync.flush(client)
    expected = client.pull_dense("mlp", state=True)

    client.control.restore(1, generation=1)  # the worker died: the shards go back to the cut
    _, restarted = fresh(tmp_path / "unused")
    restarted.take_up(client, state)
    steps(restarted, client, grads[37:])
    restarted.flush(client)
    np.testing.assert_array_equal(client.pull_dense("mlp", state=True), expected)


@pytest.mark.parametrize("codec", sorted(VALUE_CODECS))
@pytest.mark.parametrize("shape", [(0,), (0, 4)])
def test_an_empty_pull_reply_encodes_in_every_value_codec(codec, shape):
    """A pull of no keys (a fuzzed request found it) replies with an empty payload, not an error."""
    cols = shape[1] if len(shape) == 2 else 1
    subset, values = decode_payload(encode_rows(np.zeros(shape), codec, np.random.default_rng(0)), 0, cols)
    assert subset is None and values.shape == (0, cols)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 3000), st.integers(1, 17))
def test_onebit_means_and_signs_equal_their_reference_bit_for_bit(seed, n, d):
    rng = np.random.default_rng(seed)
    values = rng.normal(scale=10.0 ** float(rng.integers(-8, 3)), size=(n, d))
    values[rng.random((n, d)) < 0.1] = -0.0
    values[:, rng.random(d) < 0.3] = 0.0  # columns auto's 1-bit holds back
    got: tuple[np.ndarray, ...] = encode_onebit(values)
    for mine, want in zip(got, onebit_parts_reference(values), strict=True):
        np.testing.assert_array_equal(mine.view(np.uint8), np.asarray(want).view(np.uint8))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 500), st.integers(1, 17), st.sampled_from([0.5, 2.0, 8.0]))
def test_the_rows_past_the_residual_bound_equal_the_reference(seed, n, d, bound):
    rng = np.random.default_rng(seed)
    decoded = rng.normal(size=(n, d)) * rng.choice([0.0, 1e-3, 1.0], d)
    residual = rng.normal(size=(n + int(rng.integers(0, 50)), d)) * 4.0  # top-k sends some of the rows
    skip = rng.random(d) < 0.3
    np.testing.assert_array_equal(
        rows_past_bound(residual, decoded, bound, skip), rows_past_bound_reference(residual, decoded, bound, skip)
    )
