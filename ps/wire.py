"""Packing of keys and rows into bytes fields, shared by the client and the service."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ctr.format.varint import decode_sorted_keys, encode_sorted_keys, read_varints

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


def encode_known_ids(ids: npt.NDArray[np.int64]) -> tuple[bytes, int, bool]:
    """Sorted unique row ids in the smaller of two forms: (bytes, count, as a bitmap). A
    worker's rows are often dense among a shard's, and then a bit each beats a varint gap."""
    if ids.shape[0] == 0:
        return b"", 0, False
    length = int(ids[-1]) + 1
    varints = encode_row_ids(ids)
    if (length + 7) // 8 < len(varints):
        mask = np.zeros(length, dtype=np.bool_)
        mask[ids] = True
        return encode_bits(mask), length, True
    return varints, int(ids.shape[0]), False


def decode_known_ids(data: bytes, count: int, bitmap: bool) -> npt.NDArray[np.int64]:
    if bitmap:
        return np.flatnonzero(decode_bits(data, count, "known_ids")).astype(np.int64)
    return decode_row_ids(data, count)


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
