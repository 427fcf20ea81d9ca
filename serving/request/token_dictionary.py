"""The token dictionary of a request (PredictRequest.tokens): the dictionary as raw tokens
grouped in field blocks, which the server hashes exactly as the trainer does. Integer ids
cost a varint gap each instead of an 8-byte hashed key.

    varint block count, then per block:
      varint field index, varint kind, varint prefix, varint count, then
      kind 1 (integer tokens): zigzag values ascending, the first as a varint, then the
          gaps (each >= 1) as varints; the token is the value's decimal text after the
          prefix byte when prefix > 0 (numeric buckets: 'b' or 'v')
      kind 0 (hashed keys, e.g. strings): count uint64 little-endian keys

An entry's dictionary index is its position over the blocks in order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.format.varint import _get, _put, read_increasing, unzigzag_one
from serving.request.columns import SMALL, int_token_key, small_int_key, token_start

KIND_KEYS = 0
KIND_INTS = 1
U8 = npt.NDArray[np.uint8]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
SMALL_ZIGZAG = np.uint64(2 * SMALL - 1)  # the first zigzag code of magnitude 2**32 (-2**32)

# runs two callables, perhaps at once on two threads (serving.scoring.parallel.Splitter.both)
Both = Callable[[Callable[[], Any], Callable[[], Any]], tuple[Any, Any]]


@nb.njit(cache=True, nogil=True)
def encode_blocks(field: I64, kind: I64, prefix: I64, bounds: I64, values: U64) -> U8:
    """Block b holds values[bounds[b]:bounds[b+1]] (ascending zigzag tokens, or keys)."""
    n_blocks = field.shape[0]
    out = np.empty(10 * (1 + 4 * n_blocks) + 10 * values.shape[0], dtype=np.uint8)
    pos = _put(out, 0, np.uint64(n_blocks))
    for b in range(n_blocks):
        lo, hi = bounds[b], bounds[b + 1]
        pos = _put(out, pos, np.uint64(field[b]))
        pos = _put(out, pos, np.uint64(kind[b]))
        pos = _put(out, pos, np.uint64(prefix[b]))
        pos = _put(out, pos, np.uint64(hi - lo))
        if kind[b] == KIND_INTS:
            prev = np.uint64(0)
            for i in range(lo, hi):
                pos = _put(out, pos, values[i] - prev)
                prev = values[i]
        else:
            for i in range(lo, hi):
                v = values[i]
                for s in range(8):
                    out[pos + s] = np.uint8((v >> np.uint64(8 * s)) & np.uint64(0xFF))
                pos += 8
    return out[:pos].copy()


@nb.njit(cache=True, nogil=True)
def decode_blocks(buf: U8, max_entries: int) -> tuple[I64, I64, I64, I64, U64]:
    """(field, kind, prefix, bounds) per block and the values; raises ValueError on
    truncation, an unknown kind, a prefix above 255, tokens not strictly increasing, too
    many entries or trailing bytes."""
    n_blocks_u, pos = _get(buf, 0)
    if n_blocks_u > np.uint64(1 << 20):
        raise ValueError("too many blocks")
    n_blocks = int(n_blocks_u)
    field = np.empty(n_blocks, dtype=np.int64)
    kind = np.empty(n_blocks, dtype=np.int64)
    prefix = np.empty(n_blocks, dtype=np.int64)
    bounds = np.zeros(n_blocks + 1, dtype=np.int64)
    values = np.empty(max(0, min(max_entries, buf.shape[0])), dtype=np.uint64)  # an entry takes >= 1 byte
    total = 0
    for b in range(n_blocks):
        f, pos = _get(buf, pos)
        k, pos = _get(buf, pos)
        p, pos = _get(buf, pos)
        c, pos = _get(buf, pos)
        if f > np.uint64(1 << 31):
            raise ValueError("field index out of range")
        if k > np.uint64(1):
            raise ValueError("unknown block kind")
        if p > np.uint64(255):
            raise ValueError("prefix above 255")
        if c > np.uint64(values.shape[0] - total):
            raise ValueError("more entries than the request can hold")
        field[b], kind[b], prefix[b] = int(f), int(k), int(p)
        count = int(c)
        if kind[b] == KIND_INTS:
            pos = read_increasing(buf, pos, values, total, count)
        else:
            if pos + 8 * count > buf.shape[0]:
                raise ValueError("truncated keys")
            for i in range(count):
                v = np.uint64(0)
                for s in range(8):
                    v |= np.uint64(buf[pos + s]) << np.uint64(8 * s)
                values[total + i] = v
                pos += 8
        total += count
        bounds[b + 1] = total
    if pos != buf.shape[0]:
        raise ValueError("trailing bytes")
    return field, kind, prefix, bounds, values[:total]  # a view: a copy costs more than the spare bytes


def keys_of_blocks(
    field: I64,
    kind: I64,
    prefix: I64,
    bounds: I64,
    values: U64,
    field_hash_ids: npt.NDArray[np.uint32],
    both: Both | None = None,
) -> tuple[U64, npt.NDArray[np.int32]]:
    """Each entry's key (integer tokens hashed as the trainer hashes their text) and field.
    With `both` (run two calls at once), the blocks are hashed in two halves of about as
    many entries each."""
    for b in range(field.shape[0]):
        if field[b] >= field_hash_ids.shape[0]:
            raise ValueError(f"block {b}: field index {field[b]} is not below the model's {field_hash_ids.shape[0]} fields")
    keys = np.empty(values.shape[0], dtype=np.uint64)
    fields = np.empty(values.shape[0], dtype=np.int32)
    n_blocks = field.shape[0]
    if both is None or n_blocks < 2:
        hash_blocks(field, kind, prefix, bounds, values, field_hash_ids, 0, n_blocks, keys, fields)
        return keys, fields
    mid = int(np.searchsorted(bounds, bounds[-1] // 2))  # the block where half the entries are
    mid = min(max(mid, 1), n_blocks - 1)
    both(
        lambda: hash_blocks(field, kind, prefix, bounds, values, field_hash_ids, 0, mid, keys, fields),
        lambda: hash_blocks(field, kind, prefix, bounds, values, field_hash_ids, mid, n_blocks, keys, fields),
    )
    return keys, fields


@nb.njit(cache=True, nogil=True)
def hash_blocks(
    field: I64,
    kind: I64,
    prefix: I64,
    bounds: I64,
    values: U64,
    field_hash_ids: npt.NDArray[np.uint32],
    first: int,
    last: int,
    keys: U64,
    fields: npt.NDArray[np.int32],
) -> None:
    """keys and fields of the entries of blocks first..last-1 (field indices checked)."""
    for b in range(first, last):
        lo, hi = bounds[b], bounds[b + 1]
        fields[lo:hi] = field[b]
        if kind[b] == KIND_INTS:
            start, fid = token_start(int(prefix[b])), field_hash_ids[field[b]]
            # the codes ascend, so those of magnitude < 2**32 (code < 2**33 - 1) come first
            split = lo + np.searchsorted(values[lo:hi], SMALL_ZIGZAG)
            for i in range(lo, split):  # no array per block
                z = values[i]
                keys[i] = small_int_key((z >> np.uint64(1)) + (z & np.uint64(1)), z & np.uint64(1), start, fid)
            for i in range(split, hi):
                keys[i] = int_token_key(unzigzag_one(values[i]), start, fid)
        else:
            keys[lo:hi] = values[lo:hi]


def encode_blocks_reference(blocks: list[tuple[int, int, int, list[int]]]) -> bytes:
    """Plain-Python encoder of (field, kind, prefix, sorted values) blocks, for the tests."""

    def varint(v: int) -> bytes:
        out = bytearray()
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
        return bytes(out)

    out = bytearray(varint(len(blocks)))
    for f, k, p, vals in blocks:
        out += varint(f) + varint(k) + varint(p) + varint(len(vals))
        prev = 0
        for v in vals:
            if k == KIND_INTS:
                out += varint(v - prev)
                prev = v
            else:
                out += v.to_bytes(8, "little")
    return bytes(out)
