"""Packing of keys and rows into bytes fields, shared by the client and the service."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ctr.varint import decode_sorted_keys, encode_sorted_keys

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


def decode_rows(data: bytes, count: int, dim: int) -> npt.NDArray[np.float32]:
    if len(data) != 4 * count * dim:
        raise WireError(f"rows: {len(data)} bytes for {count} rows of dim {dim}")
    return np.frombuffer(data, dtype="<f4").reshape(count, dim)
