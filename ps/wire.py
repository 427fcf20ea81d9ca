"""Packing of keys and rows into bytes fields, shared by the client and the service."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ctr.format.rice import best_rice_of, holes_below_largest, rice_decode, rice_encode
from ctr.format.varint import decode_sorted_keys, encode_sorted_keys, encode_varints, read_varints

KEYS_RAW_U64 = 0
KEYS_DELTA_VARINT = 1


class WireError(ValueError):
    """Bytes that do not decode to what their header announces."""


def encode_keys(keys: npt.NDArray[np.uint64], encoding: int) -> bytes:
    if encoding == KEYS_DELTA_VARINT:
        return bytes(encode_sorted_keys(np.ascontiguousarray(keys, dtype=np.uint64)))
    return np.ascontiguousarray(keys, dtype="<u8").tobytes()


def decode_keys(data: bytes, count: int, encoding: int) -> npt.NDArray[np.uint64]:
    if encoding == KEYS_RAW_U64:
        if len(data) != 8 * count:
            raise WireError(f"keys: {len(data)} bytes for key_count {count} (expected {8 * count})")
        return np.frombuffer(data, dtype="<u8").astype(np.uint64, copy=False)
    if encoding == KEYS_DELTA_VARINT:
        try:
            return decode_sorted_keys(np.frombuffer(data, dtype=np.uint8), count)  # type: ignore[no-any-return]
        except ValueError as e:
            raise WireError(f"keys: {e}") from None
    raise WireError(f"key_encoding: unknown value {encoding}")


def encode_row_ids(ids: npt.NDArray[np.int64]) -> bytes:
    """Sorted unique row ids (>= 0) as delta varints: the keys' encoding of ids + 1."""
    return encode_keys(ids.astype(np.uint64) + np.uint64(1), KEYS_DELTA_VARINT)


def decode_row_ids(data: bytes, count: int) -> npt.NDArray[np.int64]:
    return (decode_keys(data, count, KEYS_DELTA_VARINT) - np.uint64(1)).astype(np.int64)


@dataclass(frozen=True)
class EncodedIds:
    """A sorted set of row ids in one of three forms (docs/design/pull-cache.md, "Row ids
    in Rice codes"): delta varints (`count` ids), a bitmap (`count` bits), or a Rice code of
    the ids or of the ids missing below the largest (`gaps`; `count` ids)."""

    data: bytes
    count: int
    bitmap: bool
    gaps: bool


def encode_known_ids(ids: npt.NDArray[np.int64]) -> EncodedIds:
    """Sorted unique row ids in the smallest form. A worker's rows are often dense among a
    shard's, and then a bit each beats a varint gap, and a Rice code of the few ids missing
    beats a bit each. Every form is priced first (best_rice_of: no array is built) and only
    the smallest is encoded: every pull and every push by row id pays for this."""
    if ids.shape[0] == 0:
        return EncodedIds(b"", 0, False, False)
    n = int(ids.shape[0])
    length = int(ids[-1]) + 1
    varints = encode_row_ids(ids)
    form, size = "varints", len(varints)
    if (length + 7) // 8 < size:
        form, size = "bitmap", (length + 7) // 8
    k, bits, _ = best_rice_of(ids, False)
    if 1 + (bits + 7) // 8 < size:
        form, size = "rice", 1 + (bits + 7) // 8
    head = b""
    if length - n < n:  # the ids missing below the largest are fewer than the ids
        hk, hbits, _ = best_rice_of(ids, True)
        head = bytes([hk | GAPS_COMPLEMENT]) + bytes(encode_varints(np.array([length], dtype=np.uint64)))
        if len(head) + (hbits + 7) // 8 < size:
            form = "holes"
    if form == "bitmap":
        mask = np.zeros(length, dtype=np.bool_)
        mask[ids] = True
        return EncodedIds(encode_bits(mask), length, True, False)
    if form == "rice":
        return EncodedIds(bytes([k]) + bytes(rice_encode(ids, k)), n, False, True)
    if form == "holes":
        return EncodedIds(head + bytes(rice_encode(holes_below_largest(ids), hk)), n, False, True)
    return EncodedIds(varints, n, False, False)


GAPS_COMPLEMENT = 0x40  # the Rice form's first byte: k in the low 6 bits, this bit for "the ids missing"


def decode_known_ids(data: bytes, count: int, bitmap: bool, gaps: bool = False, limit: int = 1 << 40) -> npt.NDArray[np.int64]:
    """The ids of encode_known_ids. `limit` bounds the ids (a table's rows), so a short
    request cannot make the decoder build a huge set."""
    if gaps:
        return _decode_gaps(data, count, limit)
    if bitmap:
        if count > limit:
            raise WireError(f"known_ids: a bitmap of {count} bits for {limit} rows")
        return np.flatnonzero(decode_bits(data, count, "known_ids")).astype(np.int64)
    if count > len(data):
        raise WireError(f"known_ids: {len(data)} bytes for {count} varints")
    return decode_row_ids(data, count)


def _decode_gaps(data: bytes, count: int, limit: int) -> npt.NDArray[np.int64]:
    buf = np.frombuffer(data, dtype=np.uint8)
    if buf.shape[0] == 0:
        raise WireError("known ids: an empty Rice code")
    head = int(buf[0])
    k = head & 0x3F
    try:
        if not head & GAPS_COMPLEMENT:
            if head & 0x80 or count > limit:
                raise ValueError(f"a code of {count} ids below {limit}")
            return rice_decode(buf, 1, count, k, np.int64(limit))  # type: ignore[no-any-return]
        length_word = np.zeros(1, dtype=np.uint64)
        start = read_varints(buf, 1, length_word, 0, 1)
        length = int(length_word[0])
        if head & 0x80 or not 0 < length <= limit or count > length:
            raise ValueError(f"{count} ids below {length} (at most {limit})")
        holes = rice_decode(buf, start, length - count, k, np.int64(length - 1))  # the largest id is no hole
    except (ValueError, IndexError) as e:
        raise WireError(f"known ids: {e}") from None
    present = np.ones(length, dtype=np.bool_)
    present[holes] = False
    return np.flatnonzero(present).astype(np.int64)


def decode_varint_list(data: bytes, count: int, what: str) -> npt.NDArray[np.int64]:
    """`count` unsorted varints (row ids in key order)."""
    out = np.zeros(count, dtype=np.uint64)
    try:
        end = read_varints(np.frombuffer(data, dtype=np.uint8), 0, out, 0, count)
    except (ValueError, IndexError) as e:
        raise WireError(f"{what}: {e}") from None
    if end != len(data):
        raise WireError(f"{what}: {len(data)} bytes for {count} varints ({end} read)")
    return out.astype(np.int64)


def encode_bits(mask: npt.NDArray[np.bool_]) -> bytes:
    """A bitmap, little bit order (bit i of byte i // 8 is mask[i])."""
    return np.packbits(mask, bitorder="little").tobytes()


def decode_bits(data: bytes, count: int, what: str) -> npt.NDArray[np.bool_]:
    """The bitmap of encode_bits; empty bytes read as all False."""
    if not data:
        return np.zeros(count, dtype=np.bool_)
    if len(data) != (count + 7) // 8:
        raise WireError(f"{what}: {len(data)} bytes for a bitmap of {count}")
    return np.unpackbits(np.frombuffer(data, dtype=np.uint8), count=count, bitorder="little").astype(np.bool_)


def decode_rows(
    data: bytes, count: int, dim: int, dtype: type[np.float32] | type[np.float64] = np.float32
) -> npt.NDArray[np.float32] | npt.NDArray[np.float64]:
    size = np.dtype(dtype).itemsize
    if len(data) != size * count * dim:
        raise WireError(f"rows: {len(data)} bytes for {count} rows of dim {dim}")
    return np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<")).reshape(count, dim)
