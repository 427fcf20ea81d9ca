"""Row-id sets on the wire (ps.wire.encode_known_ids): every form decodes to the ids sent,
the smallest form is chosen, and bytes a client could send never decode to a set the
shard would have to build beyond its bound."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ps.wire import WireError, decode_known_ids, encode_bits, encode_known_ids, encode_row_ids


def roundtrip(ids: np.ndarray) -> np.ndarray:
    e = encode_known_ids(ids)
    return decode_known_ids(e.data, e.count, e.bitmap, gaps=e.gaps)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.sets(st.integers(0, 300), max_size=300), st.sets(st.integers(0, 10**9), max_size=50)).map(sorted))
def test_every_set_decodes_to_itself_in_its_smallest_form(values):
    ids = np.array(values, dtype=np.int64)
    e = encode_known_ids(ids)
    assert roundtrip(ids).tolist() == values
    if values:
        mask = np.zeros(values[-1] + 1, dtype=np.bool_)
        mask[ids] = True
        assert len(e.data) <= min(len(encode_row_ids(ids)), len(encode_bits(mask)))


def test_a_dense_set_travels_as_its_few_holes():
    """A worker that knows nearly every row of a shard (one rank, a 92% dense batch) pays a
    few bits a missing id, not a bit an id; every row below the largest costs a few bytes."""
    rng = np.random.default_rng(1)
    ids = np.flatnonzero(rng.random(3000) < 0.92).astype(np.int64)
    e = encode_known_ids(ids)
    assert e.gaps and len(e.data) < 0.5 * (3000 // 8)
    every = np.arange(100_000, dtype=np.int64)
    e = encode_known_ids(every)
    assert e.gaps and len(e.data) <= 5
    assert roundtrip(every).tolist() == every.tolist()


def test_a_sparse_set_travels_in_fewer_bytes_than_varints():
    ids = np.sort(np.random.default_rng(2).choice(1_000_000, 5000, replace=False)).astype(np.int64)
    e = encode_known_ids(ids)
    assert e.gaps and len(e.data) < 0.75 * len(encode_row_ids(ids))


@pytest.mark.parametrize(
    ("data", "count", "what"),
    [
        (b"", 3, "empty"),
        (b"\x40\xff\xff\xff\xff\x0f", 5, "at most"),  # every id below 2**32: a huge set from 6 bytes
        (b"\x40\x05\x00", 9, "ids below"),  # more ids than the range holds
        (b"\x80", 0, "ids below"),  # a reserved bit
        (b"\x00\xff\xff", 1, "past the limit|truncated"),
        (b"\x00\x00\x00", 1, "bytes after"),
    ],
)
def test_malformed_gaps_are_wire_errors(data, count, what):
    with pytest.raises(WireError, match=what):
        decode_known_ids(data, count, False, gaps=True, limit=1 << 20)


def test_bitmaps_and_varints_are_bounded_too():
    with pytest.raises(WireError, match="bitmap"):
        decode_known_ids(b"\xff" * 4, 2**31, True, limit=1 << 20)
    with pytest.raises(WireError, match="varints"):
        decode_known_ids(b"\x01", 2**31, False)
