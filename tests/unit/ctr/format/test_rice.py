"""ctr.format.rice's kernels against a bit-string Python reference: the same bytes for any
set and k, the same values (or a ValueError) for any bytes, and the size the encoder prices."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctr.format.rice import (
    MAX_K,
    best_rice_k,
    best_rice_of,
    holes_below_largest,
    rice_bits,
    rice_decode,
    rice_encode,
    rice_gaps,
)
from tests.unit.ctr.format.test_varint import outcome


def encode_reference(values: list[int], k: int) -> bytes:
    bits = []
    prev = -1
    for v in values:
        gap = v - prev - 1
        prev = v
        bits += [1] * (gap >> k) + [0] + [(gap >> b) & 1 for b in range(k)]
    bits += [0] * (-len(bits) % 8)
    return bytes(sum(bit << i for i, bit in enumerate(bits[j : j + 8])) for j in range(0, len(bits), 8))


def decode_reference(buf: bytes, start: int, count: int, k: int, limit: int) -> list[int]:
    if not 0 <= k <= MAX_K:
        raise ValueError("rice parameter out of range")
    bits = [(byte >> i) & 1 for byte in buf for i in range(8)]
    pos, prev, out = start * 8, -1, []
    for _ in range(count):
        q = 0
        while True:
            if pos >= len(bits):
                raise ValueError("truncated rice code")
            pos += 1
            if bits[pos - 1] == 0:
                break
            q += 1
            if q >= limit:  # a value is past the limit as soon as its unary part says so
                raise ValueError("rice value past the limit")
        if pos + k > len(bits):
            raise ValueError("truncated rice code")
        r = sum(bits[pos + b] << b for b in range(k))
        pos += k
        value = prev + 1 + ((q << k) | r)
        if value >= limit:
            raise ValueError("rice value past the limit")
        out.append(value)
        prev = value
    if (pos + 7) // 8 != len(buf):
        raise ValueError("bytes after the rice code")
    if any(bits[pos:]):
        raise ValueError("nonzero padding after the rice code")
    return out


SETS = st.one_of(
    st.sets(st.integers(0, 200), max_size=150),
    st.sets(st.integers(0, 2**40), max_size=40),
    st.sets(st.integers(0, 5000), max_size=600),
).map(sorted)


@settings(max_examples=300, deadline=None)
@given(SETS, st.integers(0, 12))
def test_encode_equals_the_reference_and_decodes_back(values, k):
    arr = np.array(values, dtype=np.int64)
    k = max(k, int(rice_gaps(arr).max(initial=0)).bit_length() - 10)  # unary parts of at most ~1k bits
    got = bytes(rice_encode(arr, k))
    assert got == encode_reference(values, k)
    assert len(got) == (rice_bits(rice_gaps(arr), k) + 7) // 8
    assert rice_decode(np.frombuffer(b"\x07" + got, dtype=np.uint8), 1, len(values), k, np.int64(2**41)).tolist() == values


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=24), st.integers(0, 2), st.integers(0, 40), st.integers(0, 6), st.integers(1, 3000))
def test_decode_equals_the_reference_on_any_bytes(buf, start, count, k, limit):
    start = min(start, len(buf))
    arr = np.frombuffer(buf, dtype=np.uint8)
    assert outcome(lambda: rice_decode(arr, start, count, k, np.int64(limit)).tolist()) == outcome(
        lambda: decode_reference(buf, start, count, k, limit)
    )


def test_best_k_is_the_cheapest():
    rng = np.random.default_rng(5)
    for mean in (0.2, 3, 40, 5000):
        values = np.cumsum(rng.geometric(1 / (mean + 1), size=2000)).astype(np.int64)
        gaps = rice_gaps(values)
        k, bits = best_rice_k(gaps)
        assert bits == rice_bits(gaps, k) == min(rice_bits(gaps, j) for j in range(MAX_K + 1))


def holes_reference(values: list[int]) -> list[int]:
    return sorted(set(range(values[-1] + 1)) - set(values)) if values else []


@settings(max_examples=300, deadline=None)
@given(SETS)
def test_pricing_without_building_equals_the_reference(values):
    """best_rice_of walks the values (or the values missing below the largest) without
    building them: the same k, bits and count as pricing the built gaps."""
    arr = np.array(values, dtype=np.int64)
    cases = [(False, values)]
    if not values or values[-1] < 100_000:  # the missing values of a set up to 2**40 would not fit
        cases.append((True, holes_reference(values)))
        assert holes_below_largest(arr).tolist() == cases[1][1]
    for complement, priced in cases:
        expected = (*best_rice_k(rice_gaps(np.array(priced, dtype=np.int64))), len(priced))
        assert best_rice_of(arr, complement) == expected


@pytest.mark.parametrize("k", [0, 3, MAX_K])
def test_a_unary_run_past_the_limit_stops_early(k):
    """A run of 1 bits cannot walk a decoder far past the limit's worth of values."""
    buf = np.full(1 << 16, 0xFF, dtype=np.uint8)
    with pytest.raises(ValueError, match="past the limit|truncated"):
        rice_decode(buf, 0, 1, k, np.int64(100))
