"""A dense table's state written as its difference from what the shard holds
(docs/design/lossless-planes.md#state-against-the-shards-base).

Rank 0 writes the whole MLP with its Adam state at every checkpoint cut. Between two cuts
the weights and the second moments move by little, so their float32 bit patterns differ
from the last write's in the low bits only. The body carries, column by column, either
the bits themselves or the zigzagged int32 difference of the bits from the base's
(whichever is smaller in zstd'd byte planes: the first moments are new every few hundred
steps, where a difference only adds noise; a long column is judged on an even sample of
its rows, then encoded once, which halves a cut write's CPU):

    varint rows, varint cols, then per column: u8 mode (0 bits, 1 difference),
    varint body bytes, the column's words in byte planes (payload._to_planes).

Lossless: the shard adds the difference back to its own fp32 bits, so the write is exact
only against the base the writer held. The writer names that base by its digest, and a
shard holding anything else refuses the write (the writer then sends the state whole)."""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

from ctr.format.varint import _get, encode_varints
from ps.compression.payload import CodecError, _from_planes, _to_planes

F64 = npt.NDArray[np.float64]
U32 = npt.NDArray[np.uint32]
BITS, DIFFERENCE = 0, 1
JUDGE_ROWS = 16_384  # a column longer than twice this picks its form on every (n // this)-th row


def as_fp32_bits(rows: F64) -> U32 | None:
    """The rows' float32 bit patterns, or None where a value is not exactly a float32 (a
    difference of bits would then not give back the float64 the shard must hold)."""
    cast = np.ascontiguousarray(rows, dtype=np.float32)
    if not np.array_equal(cast.astype(np.float64), rows):
        return None
    return cast.view(np.uint32)


def base_digest(bits: U32) -> int:
    """The 64-bit digest a write names its base by (blake2b of the fp32 bits, row-major)."""
    return int.from_bytes(hashlib.blake2b(np.ascontiguousarray(bits).data, digest_size=8).digest(), "little")


def _zigzag(diff: U32) -> U32:
    d = diff.view(np.int32)
    return ((d << np.int32(1)) ^ (d >> np.int32(31))).view(np.uint32)


def _unzigzag(z: U32) -> U32:
    return (z >> np.uint32(1)) ^ (np.uint32(0) - (z & np.uint32(1)))  # type: ignore[no-any-return]


def encode_state_diff(new: U32, base: U32) -> bytes:
    """The body that turns `base` [n, d] (fp32 bits) into `new` on the shard."""
    if new.shape != base.shape or new.ndim != 2:
        raise ValueError(f"a state difference of {new.shape} against a base of {base.shape}")
    n, d = new.shape
    out = [bytes(encode_varints(np.array([n, d], dtype=np.uint64)))]
    every = n // JUDGE_ROWS if n > 2 * JUDGE_ROWS else 1
    with np.errstate(over="ignore"):
        for c in range(d):
            if every == 1:
                mode, body = _smaller(new[:, c], base[:, c])
            elif _smaller(new[::every, c], base[::every, c])[0] == DIFFERENCE:
                mode, body = DIFFERENCE, _to_planes(_difference(new[:, c], base[:, c]))
            else:
                mode, body = BITS, _to_planes(np.ascontiguousarray(new[:, c]).reshape(-1, 1))
            out.append(bytes([mode]) + bytes(encode_varints(np.array([len(body)], dtype=np.uint64))) + body)
    return b"".join(out)


def _difference(new: U32, base: U32) -> U32:
    return _zigzag(np.ascontiguousarray(new - base)).reshape(-1, 1)


def _smaller(new: U32, base: U32) -> tuple[int, bytes]:
    """(mode, body) of a column's words: the difference or the bits, whichever is smaller."""
    plain = _to_planes(np.ascontiguousarray(new).reshape(-1, 1))
    diff = _to_planes(_difference(new, base))
    return (DIFFERENCE, diff) if len(diff) < len(plain) else (BITS, plain)


def decode_state_diff(body: bytes, base: U32) -> F64:
    """The state [n, d] a body of encode_state_diff gives against `base` (fp32 bits [n, d]);
    every count and length is checked against the base before anything is inflated."""
    buf = np.frombuffer(body, dtype=np.uint8)
    try:
        n, pos = _get(buf, 0)
        d, pos = _get(buf, pos)
    except ValueError as e:
        raise CodecError(f"state difference header: {e}") from None
    if (int(n), int(d)) != base.shape:
        raise CodecError(f"state difference: {int(n)} rows of {int(d)} values, the shard's range holds {base.shape}")
    out = np.empty(base.shape, dtype=np.uint32)
    for c in range(base.shape[1]):
        if pos >= len(body):
            raise CodecError(f"state difference: column {c} is missing")
        mode = int(buf[pos])
        if mode not in (BITS, DIFFERENCE):
            raise CodecError(f"state difference: column {c} has mode {mode}, not {BITS} or {DIFFERENCE}")
        try:
            size, pos = _get(buf, pos + 1)
        except ValueError as e:
            raise CodecError(f"state difference: column {c}: {e}") from None
        if pos + int(size) > len(body):
            raise CodecError(f"state difference: column {c} says {int(size)} bytes, {len(body) - pos} are left")
        words = np.asarray(_from_planes("state difference", body[pos : pos + int(size)], int(n), 1, "<u4"), np.uint32).ravel()
        pos += int(size)
        with np.errstate(over="ignore"):
            out[:, c] = np.add(base[:, c], _unzigzag(words)) if mode == DIFFERENCE else words
    if pos != len(body):
        raise CodecError(f"state difference: {len(body) - pos} bytes after the last column")
    values = out.view(np.float32).astype(np.float64)
    if not np.isfinite(values).all():
        raise CodecError("state difference: the values it gives are not all finite")
    return values  # type: ignore[no-any-return]
