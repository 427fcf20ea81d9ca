"""ctr.format.varint's word-at-a-time reader against a byte-at-a-time Python reference, on varints
of every length (1 to 10 bytes and malformed longer ones) and buffers long enough for the
64-byte windows, truncated or not."""

from __future__ import annotations

import numba as nb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctr.format.varint import decode_index_lists, encode_index_lists, read_increasing, read_varints
from ctr.format.word_load import load_u64_le, trailing_zeros


def varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def read_varints_reference(buf: bytes, pos: int, count: int) -> tuple[list[int], int]:
    """Byte at a time, raising what ctr.format.varint raises."""
    values = []
    for _ in range(count):
        v, shift = 0, 0
        while True:
            if pos >= len(buf):
                raise ValueError("truncated varint")
            b = buf[pos]
            pos += 1
            if shift == 63 and b > 1:
                raise ValueError("varint overflows 64 bits")
            v |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 63:
                raise ValueError("varint longer than 10 bytes")
        values.append(v)
    return values, pos


def outcome(fn):  # type: ignore[no-untyped-def]
    try:
        return fn()
    except ValueError as e:
        return str(e)


# values of every varint length, and the byte runs a malformed request could hold
VALUES = st.one_of(
    st.integers(0, 127), st.integers(128, 2**21), st.integers(0, 2**64 - 1), st.sampled_from([2**56 - 1, 2**56, 2**63, 2**64 - 1])
)
JUNK = st.one_of(
    st.binary(max_size=3),
    st.integers(1, 12).map(lambda k: b"\xff" * k),
    st.sampled_from([b"\xff" * 9 + b"\x02", b"\x80" * 9 + b"\x01", b"\x80" * 10 + b"\x00"]),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(VALUES.map(varint), JUNK), max_size=80), st.integers(0, 5), st.integers(0, 90))
def test_read_varints_equals_the_reference(parts, start, count):
    buf = bytes(start) + b"".join(parts)
    count = min(count, len(buf))
    arr = np.frombuffer(buf, dtype=np.uint8)
    out = np.zeros(count + 1, dtype=np.uint64)

    def got():  # type: ignore[no-untyped-def]
        pos = read_varints(arr, start, out, 1, count)
        return out[1 : count + 1].tolist(), pos

    assert outcome(got) == outcome(lambda: read_varints_reference(buf, start, count))


@pytest.mark.parametrize("seed", range(4))
def test_read_varints_of_every_length_through_the_windows(seed):
    """Hundreds of varints, each of 1 to 10 bytes, so most are read from the 64-byte
    windows rather than byte by byte at the end."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 65, 600)
    values = [
        int(rng.integers(0, 2**63, dtype=np.uint64)) >> max(0, 63 - int(b)) if b < 64 else 2**64 - 1 - int(rng.integers(0, 2**40))
        for b in bits
    ]
    buf = b"".join(varint(v) for v in values)
    out = np.zeros(len(values), dtype=np.uint64)
    pos = read_varints(np.frombuffer(buf, dtype=np.uint8), 0, out, 0, len(values))
    assert (out.tolist(), pos) == read_varints_reference(buf, 0, len(values)) == (values, len(buf))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2**40), max_size=60), max_size=12), st.booleans())
def test_index_lists_round_trip(lists, truncate):
    offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(x) for x in lists])
    flat = np.array([v for x in lists for v in sorted(x)], dtype=np.int64)
    buf = encode_index_lists(offsets, flat)
    if truncate and buf.shape[0]:
        with pytest.raises(ValueError):
            decode_index_lists(buf[:-1], len(lists), 2**62)
        return
    got_offsets, got = decode_index_lists(buf, len(lists), 2**62)
    assert got_offsets.tolist() == offsets.tolist()
    assert got.tolist() == flat.tolist()


def test_read_increasing_checks_order_and_overflow():
    strict = np.frombuffer(varint(5) + varint(3) + varint(0) + bytes(80), dtype=np.uint8)
    out = np.zeros(3, dtype=np.uint64)
    with pytest.raises(ValueError, match="not strictly increasing"):
        read_increasing(strict, 0, out, 0, 3)
    assert read_increasing(strict, 0, out, 0, 3, False) == 3 and out.tolist() == [5, 8, 8]
    overflow = np.frombuffer(varint(2**64 - 1) + varint(1) + bytes(80), dtype=np.uint8)
    with pytest.raises(ValueError, match="overflows 64 bits"):
        read_increasing(overflow, 0, np.zeros(2, dtype=np.uint64), 0, 2)


@nb.njit
def _load(buf, pos):  # type: ignore[no-untyped-def]
    return load_u64_le(buf, pos)  # type: ignore[call-arg]


@nb.njit
def _trailing_zeros(x):  # type: ignore[no-untyped-def]
    return trailing_zeros(x)  # type: ignore[call-arg]


def test_word_kernels_equal_their_references():
    rng = np.random.default_rng(3)
    buf = rng.integers(0, 256, 64, dtype=np.uint8)
    for pos in range(0, 57):
        assert _load(buf, pos) == int.from_bytes(buf[pos : pos + 8].tobytes(), "little")
    for x in [0, 1, 2**63, *rng.integers(1, 2**63, 50).tolist()]:
        want = 64 if x == 0 else (x & -x).bit_length() - 1
        assert _trailing_zeros(np.uint64(x)) == want
