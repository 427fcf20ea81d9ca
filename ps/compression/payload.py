"""The self-describing push payload (docs/ps-compression.md):

    u8 magic 0xC7, u8 version 1, u8 codec id, u8 flags (1: a row subset follows,
    2: as a bitmap, else as an index list; 4: exact rows follow), varint rows (the keys
    the push names), varint sent (rows carried), varint cols, [varint subset bytes],
    [varint exact index bytes, varint exact value bytes], [subset], [exact index, exact
    values], body.

A value codec turns rows [sent, cols] into a body and back. Exact rows replace some of the
carried rows' decoded values with their float64 values: an index list of their positions
among the carried rows, then the values in fp64z's byte planes (rows whose error-feedback
residual passed its bound travel in the push itself, not in a call of their own:
docs/design/residual-bound.md). Decoding checks every count and length against the header
and the push, so a payload that does not match raises CodecError before the shard changes
anything."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import zstandard

from ctr.format.varint import _get, decode_index_lists, encode_index_lists, encode_varints
from ctr.format.zstd_local import decompressor, plane_compressor
from ps.compression.bits import (
    bit_planes,
    byte_planes,
    pack_bits,
    packed_bytes,
    unpack_bits,
    words_of_planes,
)
from ps.compression.minifloat import column_shifts, decode_minifloat, encode_minifloat
from ps.compression.quantize import decode_int8, decode_onebit, decode_onebit_planes, encode_int8, encode_onebit, round_bf16

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
MAGIC, VERSION = 0xC7, 1
BF16_MANTISSA = 7


class CodecError(ValueError):
    """A payload whose header, counts, lengths or values do not match its push."""


SUBSET, BITMAP, EXACT = 1, 2, 4


@dataclass(frozen=True)
class ValueCodec:
    """encode(rows, rng) -> (body, the rows the shard will decode); decode(body, n, d).
    feedback: whether its rounding is worth error feedback (not for fp32 and fp64)."""

    wire_id: int
    name: str
    feedback: bool
    encode: Callable[[F64, np.random.Generator], tuple[bytes, F64]]
    decode: Callable[[bytes, int, int], F64]


def _cast_values(rows: F64, dtype: str) -> tuple[npt.NDArray[np.floating], F64]:
    """(the rows as `dtype`, those values as float64): fp64 as they are (the default state
    deltas: nothing to round or saturate); narrower types saturated rather than overflowing
    to inf (error feedback carries the excess)."""
    if np.dtype(dtype).itemsize == 8:
        return np.ascontiguousarray(rows, dtype=dtype), rows
    top = float(np.finfo(dtype).max)
    cast = np.ascontiguousarray(np.clip(rows, -top, top), dtype=dtype)
    return cast, cast.astype(np.float64)


def _cast(dtype: str) -> tuple[Callable[[F64, np.random.Generator], tuple[bytes, F64]], Callable[[bytes, int, int], F64]]:
    size = np.dtype(dtype).itemsize

    def enc(rows: F64, rng: np.random.Generator) -> tuple[bytes, F64]:
        cast, decoded = _cast_values(rows, dtype)
        return cast.tobytes(), decoded

    def dec(body: bytes, n: int, d: int) -> F64:
        _expect(body, n * d * size)
        return np.frombuffer(body, dtype=dtype).astype(np.float64).reshape(n, d)

    return enc, dec


PLANES_MIN_BYTES = 1024  # smaller: the words go as they are (8 frames' headers cost ~80 bytes)
RAW, PLANES = 0, 1  # the body's first byte


def _to_planes(words: npt.NDArray[np.generic]) -> bytes:
    """Fixed-width words [n, d]: a layout byte, then (PLANES) the words in byte planes column
    by column (byte b of every word of column 0, then of column 1, ...), each plane its own
    zstd frame: varint frame lengths, one a byte of the width, then the frames; or (RAW,
    below PLANES_MIN_BYTES, where the frames' headers would outweigh what they save) the
    words as they are. A column's values share their sign and exponent bytes far more often
    than a row's neighbours do (an MLP's w | m | v | t columns; a table's factor columns),
    and a plane of alike bytes is what zstd compresses; a plane of noise (low mantissa
    bytes) passes through its own frame at memcpy speed (docs/design/lossless-planes.md)."""
    n, d = words.shape
    size = words.dtype.itemsize
    if words.nbytes < PLANES_MIN_BYTES:
        return bytes([RAW]) + np.ascontiguousarray(words).tobytes()
    planes = byte_planes(np.ascontiguousarray(words).view(np.uint8).reshape(-1), n, d, size)
    compress = plane_compressor().compress
    frames = [compress(planes[b].data) for b in range(size)]
    lengths = bytes(encode_varints(np.array([len(f) for f in frames], dtype=np.uint64)))
    return bytes([PLANES]) + lengths + b"".join(frames)


def _from_planes(name: str, body: bytes, n: int, d: int, dtype: str) -> npt.NDArray[np.generic]:
    """The words [n, d] of _to_planes's body, every frame checked against the counts."""
    size = np.dtype(dtype).itemsize
    if not body or body[0] not in (RAW, PLANES):
        raise CodecError(f"{name}: the layout byte must be {RAW} (raw) or {PLANES} (planes)")
    if body[0] == RAW:
        _expect(body, 1 + n * d * size)
        return np.frombuffer(body, dtype=dtype, offset=1).reshape(n, d)
    buf = np.frombuffer(body, dtype=np.uint8)
    lengths, pos = _frame_lengths(name, buf, 1, size)
    if pos + sum(lengths) != len(body):
        raise CodecError(f"{name}: body is {len(body)} bytes, its frame lengths say {pos + sum(lengths)}")
    plane = n * d
    out = np.empty((size, plane), dtype=np.uint8)
    for b, length in enumerate(lengths):
        out[b] = _inflate(f"{name}: plane {b}", body[pos : pos + length], plane)
        pos += length
    return words_of_planes(out, n, d, dtype)


def _frame_lengths(name: str, buf: npt.NDArray[np.uint8], pos: int, count: int) -> tuple[list[int], int]:
    """`count` varint frame lengths from buf[pos:], and the offset after them."""
    lengths = []
    try:
        for _ in range(count):
            varint, pos = _get(buf, pos)
            lengths.append(int(varint))
    except ValueError as e:
        raise CodecError(f"{name}: frame lengths: {e}") from None
    return lengths, pos


def _inflate(what: str, frame: bytes, size: int) -> npt.NDArray[np.uint8]:
    """The `size` bytes a zstd frame holds, its declared size checked before it is inflated
    (a small frame may declare gigabytes)."""
    try:
        declared = zstandard.frame_content_size(frame)
        if declared != size:
            raise CodecError(f"{what} declares {declared} bytes, the header's counts need {size}")
        got = decompressor().decompress(frame, max_output_size=size)
    except zstandard.ZstdError as e:
        raise CodecError(f"{what}: not a zstd frame ({e})") from None
    if len(got) != size:
        raise CodecError(f"{what} inflates to {len(got)} bytes, not {size}")
    return np.frombuffer(got, dtype=np.uint8)


def _planes_zstd(
    name: str, dtype: str
) -> tuple[Callable[[F64, np.random.Generator], tuple[bytes, F64]], Callable[[bytes, int, int], F64]]:
    """fp32z, fp64z: the values cast as fp32 or fp64 do, lossless from there, in zstd'd byte planes."""

    def enc(rows: F64, rng: np.random.Generator) -> tuple[bytes, F64]:
        cast, decoded = _cast_values(rows, dtype)
        return _to_planes(cast), decoded

    def dec(body: bytes, n: int, d: int) -> F64:
        return _from_planes(name, body, n, d, dtype).astype(np.float64)

    return enc, dec


def _bf16_words(rows: F64, coarse: tuple[slice, int] | None = None) -> tuple[npt.NDArray[np.uint16], F64]:
    """(the bf16 words of rows, to nearest even, and the values they decode to); with coarse
    (columns, bits), those columns' normal values keep only `bits` (1-7) mantissa bits, the
    rest of their words zero (subnormals round as bf16's own, never to 0)."""
    drop = np.full(rows.shape[-1], 16, dtype=np.uint32)  # the float32 bits each column's rounding drops
    if coarse is not None:
        columns, bits = coarse  # checked by coarse_bf16z
        drop[columns] = 16 + BF16_MANTISSA - bits
    return round_bf16(np.ascontiguousarray(rows, dtype=np.float64).reshape(-1, rows.shape[-1]), drop)  # type: ignore[no-any-return]


def _bf16_encode(rows: F64, rng: np.random.Generator) -> tuple[bytes, F64]:
    top, values = _bf16_words(rows)
    return top.astype("<u2", copy=False).tobytes(), values.reshape(rows.shape)


def _bf16_values(top: npt.NDArray[np.uint16], shape: tuple[int, ...]) -> F64:
    return (top.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64).reshape(shape)


def _bf16_decode(body: bytes, n: int, d: int) -> F64:
    _expect(body, n * d * 2)
    return _bf16_values(np.frombuffer(body, dtype="<u2"), (n, d))


def _bf16z_encode(rows: F64, rng: np.random.Generator) -> tuple[bytes, F64]:
    """bf16 in zstd'd byte planes: its high byte is the sign and most of the exponent."""
    body, decoded = _bf16_encode(rows, rng)
    return _to_planes(np.frombuffer(body, dtype="<u2").reshape(rows.shape)), decoded


def coarse_bf16z(columns: slice, bits: int) -> ValueCodec:
    """bf16z whose `columns` keep only `bits` mantissa bits: bf16z on the wire (its id, its
    decoder), the low bits of those words zero, so their low byte plane compresses
    (docs/design/rounded-pushes.md, "Accumulators at 4 mantissa bits")."""
    if not 1 <= bits <= BF16_MANTISSA:
        raise ValueError(f"bf16 keeps 1 to {BF16_MANTISSA} mantissa bits, not {bits}")

    def enc(rows: F64, rng: np.random.Generator) -> tuple[bytes, F64]:
        top, values = _bf16_words(rows, (columns, bits))
        return _to_planes(top.astype("<u2", copy=False)), values

    return ValueCodec(VALUE_CODECS["bf16z"].wire_id, "bf16z", True, enc, _bf16z_decode)


def _bf16z_decode(body: bytes, n: int, d: int) -> F64:
    return _bf16_values(np.ascontiguousarray(_from_planes("bf16z", body, n, d, "<u2")).reshape(-1), (n, d))


def _int8_encode(rows: F64, rng: np.random.Generator) -> tuple[bytes, F64]:
    """Row-wise scale and offset; narrow rows (fewer than 8 values, where 8 bytes of scale and
    offset per row would cost more than the values) take them per column instead."""
    by_column = rows.shape[1] < 8
    lo, step, codes, decoded = encode_int8(rows.T if by_column else rows, int(rng.integers(0, 2**62)))
    body = bytes([int(by_column)]) + lo.tobytes() + step.tobytes() + codes.tobytes()
    return body, decoded.T if by_column else decoded


def _int8_decode(body: bytes, n: int, d: int) -> F64:
    if not body or body[0] > 1:
        raise CodecError("int8 body: the layout byte must be 0 (per row) or 1 (per column)")
    by_column = body[0] == 1
    groups, width = (d, n) if by_column else (n, d)
    _expect(body, 1 + groups * 8 + n * d)
    buf = np.frombuffer(body, dtype=np.uint8)[1:]
    lo, step = buf[: 4 * groups].view("<f4"), buf[4 * groups : 8 * groups].view("<f4")
    out = decode_int8(lo.astype(np.float32), step.astype(np.float32), buf[8 * groups :], width)
    return out.T.copy() if by_column else out  # type: ignore[no-any-return]


def _minifloat(exp_bits: int, man_bits: int) -> tuple[Callable[..., tuple[bytes, F64]], Callable[[bytes, int, int], F64]]:
    bits = 1 + exp_bits + man_bits

    def enc(rows: F64, rng: np.random.Generator) -> tuple[bytes, F64]:
        rows = np.ascontiguousarray(rows)
        shifts = column_shifts(rows, exp_bits)
        codes, decoded = encode_minifloat(rows, shifts, exp_bits, man_bits)
        return shifts.astype("<i2").tobytes() + pack_bits(codes, bits).tobytes(), decoded

    def dec(body: bytes, n: int, d: int) -> F64:
        _expect(body, 2 * d + packed_bytes(n * d, bits))
        shifts = np.frombuffer(body[: 2 * d], dtype="<i2").astype(np.int32)
        if np.abs(shifts).max(initial=0) > 1300:  # float64 binades plus the format's own
            raise CodecError("column scale out of the float64 range")
        codes = unpack_bits(np.frombuffer(body, dtype=np.uint8)[2 * d :], n * d, bits)
        return decode_minifloat(codes, d, shifts, exp_bits, man_bits)  # type: ignore[no-any-return]

    return enc, dec


BY_ROW, SIGN_PLANES = 1, 2  # onebit's layout byte: means per row; signs column by column in zstd frames
SIGN_PLANES_MIN_BYTES = 128  # fewer sign bytes: the frames' headers would outweigh what they save


def _onebit_encode(rows: F64, rng: np.random.Generator) -> tuple[bytes, F64]:
    """Signs plus two means per column, or per row when there are fewer rows than columns (a
    top-k push of a few wide rows), whichever takes fewer means; the signs row-major, or
    column by column in zstd frames where that is smaller: a column of one sign, such as
    the zeros of the accumulator columns auto's 1-bit holds back, costs a few bytes
    (docs/design/sign-planes.md; error feedback makes an accumulator's own signs noise).
    A layout byte says which."""
    by_row = rows.shape[0] < rows.shape[1]
    groups = np.ascontiguousarray(rows.T if by_row else rows)
    pos, neg, packed = encode_onebit(groups)
    decoded = decode_onebit(pos, neg, packed, groups.shape[0])
    layout, signs = int(by_row), packed.tobytes()
    if packed.nbytes >= SIGN_PLANES_MIN_BYTES:
        planes = _sign_planes(packed, *groups.shape)
        if len(planes) < len(signs):
            layout, signs = layout | SIGN_PLANES, planes
    return bytes([layout]) + pos.tobytes() + neg.tobytes() + signs, decoded.T if by_row else decoded


def _sign_planes(packed: npt.NDArray[np.uint8], n: int, d: int) -> bytes:
    """Row-major sign bits [n, d] as d planes of ceil(n / 8) bytes, each a zstd frame (or,
    where zstd saves nothing, the plane itself, its length written as 0): varint lengths,
    then the frames."""
    planes = bit_planes(packed, n, d)
    compress = plane_compressor().compress
    chunks, lengths = [], []
    for c in range(d):
        frame = compress(planes[c].data)
        raw = len(frame) >= planes.shape[1]
        chunks.append(planes[c].tobytes() if raw else frame)
        lengths.append(0 if raw else len(frame))
    return bytes(encode_varints(np.array(lengths, dtype=np.uint64))) + b"".join(chunks)


def _planes_of(body: bytes, n: int, d: int) -> npt.NDArray[np.uint8]:
    """The d sign planes of n bits each in _sign_planes's bytes, every length checked."""
    buf = np.frombuffer(body, dtype=np.uint8)
    plane = (n + 7) // 8
    lengths, pos = _frame_lengths("onebit sign planes", buf, 0, d)
    expected = pos + sum(length or plane for length in lengths)
    if expected != len(body):
        raise CodecError(f"onebit sign planes: {len(body)} bytes, their lengths say {expected}")
    planes = np.empty((d, plane), dtype=np.uint8)
    for c, length in enumerate(lengths):
        if length:
            planes[c] = _inflate(f"onebit sign plane {c}", body[pos : pos + length], plane)
        else:
            planes[c] = buf[pos : pos + plane]
        pos += length or plane
    return planes


def _onebit_decode(body: bytes, n: int, d: int) -> F64:
    if not body or body[0] > BY_ROW | SIGN_PLANES:
        raise CodecError("onebit body: the layout byte must be 0-3 (1: means per row, not per column; 2: signs in planes)")
    by_row = bool(body[0] & BY_ROW)
    length, groups = (d, n) if by_row else (n, d)
    means = 1 + 8 * groups
    if len(body) < means:
        raise CodecError(f"body is {len(body)} bytes, the header's counts need at least {means}")
    pos = np.frombuffer(body[1 : 1 + 4 * groups], dtype="<f4").astype(np.float32)
    neg = np.frombuffer(body[1 + 4 * groups : means], dtype="<f4").astype(np.float32)
    if body[0] & SIGN_PLANES:
        out = decode_onebit_planes(pos, neg, _planes_of(body[means:], length, groups), length)
    else:
        _expect(body, means + packed_bytes(n * d, 1))
        out = decode_onebit(pos, neg, np.frombuffer(body, dtype=np.uint8)[means:], length)
    return out.T.copy() if by_row else out  # type: ignore[no-any-return]


def _expect(body: bytes, size: int) -> None:
    if len(body) != size:
        raise CodecError(f"body is {len(body)} bytes, the header's counts need {size}")


VALUE_CODECS: dict[str, ValueCodec] = {
    c.name: c
    for c in (
        ValueCodec(0, "fp32", False, *_cast("<f4")),
        ValueCodec(1, "fp16", True, *_cast("<f2")),
        ValueCodec(2, "fp64", False, *_cast("<f8")),
        ValueCodec(3, "bf16", True, _bf16_encode, _bf16_decode),
        ValueCodec(4, "int8", True, _int8_encode, _int8_decode),
        ValueCodec(5, "epgc8", True, *_minifloat(5, 2)),
        ValueCodec(6, "epgc9", True, *_minifloat(8, 0)),
        ValueCodec(7, "epgc11", True, *_minifloat(5, 5)),
        ValueCodec(8, "onebit", True, _onebit_encode, _onebit_decode),
        ValueCodec(9, "fp32z", False, *_planes_zstd("fp32z", "<f4")),
        ValueCodec(10, "fp64z", False, *_planes_zstd("fp64z", "<f8")),
        ValueCodec(11, "bf16z", True, _bf16z_encode, _bf16z_decode),
    )
}
BY_ID = {c.wire_id: c for c in VALUE_CODECS.values()}


@dataclass(frozen=True)
class Compressed:
    """A push's rows as a codec encoded them: `sent` (indices of the rows carried, None: all
    of them) of `rows` rows of `cols` values."""

    codec: ValueCodec
    rows: int
    cols: int
    sent: I64 | None
    body: bytes
    values: F64 | None = None  # the carried rows as the receiver decodes them, when the encoder kept them
    exact_index: bytes = b""  # with_exact's: the exact rows' positions among the carried rows
    exact_values: bytes = b""  # ... and their values, fp64 in byte planes

    @property
    def count(self) -> int:
        return self.rows if self.sent is None else int(self.sent.shape[0])

    @property
    def value_bytes(self) -> int:
        """The bytes of values the payload carries: the codec's body and the exact rows."""
        return len(self.body) + len(self.exact_index) + len(self.exact_values)

    def with_exact(self, at: I64, rows: F64) -> Compressed:
        """This payload with the carried rows at positions `at` (ascending, unique) sent as
        they are, float64, instead of as the codec decodes them."""
        assert self.values is not None, "the encoder keeps the values it sent"
        values = self.values.copy()
        values[at] = rows
        index = bytes(encode_index_lists(np.array([0, at.shape[0]], dtype=np.int64), at))
        exact = _to_planes(np.ascontiguousarray(rows, dtype="<f8").reshape(at.shape[0], self.cols))
        return replace(self, values=values, exact_index=index, exact_values=exact)

    def decoded(self, with_subset: bool) -> tuple[I64 | None, F64] | None:
        """What decode_payload returns for payload(with_subset), when this kept the values."""
        if self.values is None:
            return None
        return (self.sent if with_subset else None), self.values

    def payload(self, with_subset: bool) -> bytes:
        """The payload for a push naming all `rows` keys (with_subset: the subset travels in
        the header) or naming only the sent keys."""
        subset = b""
        flags = 0
        if with_subset and self.sent is not None:
            flags = SUBSET
            subset = bytes(encode_index_lists(np.array([0, self.sent.shape[0]], dtype=np.int64), self.sent))
            bitmap = np.packbits(np.isin(np.arange(self.rows), self.sent), bitorder="little").tobytes()
            if len(bitmap) < len(subset):
                subset, flags = bitmap, SUBSET | BITMAP
        n = self.rows if with_subset else self.count
        counts = [n, self.count, self.cols] + ([len(subset)] if flags else [])
        if self.exact_values:
            flags |= EXACT
            counts += [len(self.exact_index), len(self.exact_values)]
        head = bytes([MAGIC, VERSION, self.codec.wire_id, flags])
        exact = self.exact_index + self.exact_values
        return head + bytes(encode_varints(np.asarray(counts, dtype=np.uint64))) + subset + exact + self.body


def encode_rows(rows: npt.NDArray[np.floating], codec_name: str, rng: np.random.Generator) -> bytes:
    """A payload of every row in a value codec (a pull reply, a dense push)."""
    codec = value_codec(codec_name)
    cols = rows.shape[1] if rows.ndim == 2 else 1  # an empty pull has no size to infer it from
    x = np.ascontiguousarray(rows, dtype=np.float64).reshape(rows.shape[0], cols)
    return Compressed(codec, x.shape[0], x.shape[1], None, codec.encode(x, rng)[0]).payload(with_subset=False)


def value_codec(name: str) -> ValueCodec:
    codec = VALUE_CODECS.get(name)
    if codec is None:
        raise CodecError(f"unknown value codec {name!r}; known: {', '.join(VALUE_CODECS)}")
    return codec


# what a residual drain may also travel in: bf16z on the wire with every value at 4 mantissa
# bits, a quarter less than bf16z on drained residuals (docs/design/cut-drains.md#coarser-cut-drains-2026-12-03)
COARSE_DRAIN_CODECS = {"e8m4z": coarse_bf16z(slice(None), 4)}


def drain_codec(name: str) -> ValueCodec:
    """A value codec by name, or a coarse drain codec (COARSE_DRAIN_CODECS)."""
    return COARSE_DRAIN_CODECS[name] if name in COARSE_DRAIN_CODECS else value_codec(name)


def decode_payload(payload: bytes, rows: int, cols: int) -> tuple[I64 | None, F64]:
    """(indices of the rows the payload carries, None: all; their values [sent, cols]) of a
    push naming `rows` keys of a table with `cols` values per row."""
    if len(payload) < 4 or payload[0] != MAGIC or payload[1] != VERSION:
        raise CodecError("payload: not a compressed push (magic or version)")
    codec = BY_ID.get(payload[2])
    if codec is None:
        raise CodecError(f"payload: unknown codec id {payload[2]}")
    flags = payload[3]
    if flags & ~(SUBSET | BITMAP | EXACT):
        raise CodecError(f"payload: unknown flags {flags}")
    buf = np.frombuffer(payload, dtype=np.uint8)
    try:
        n, pos = _get(buf, 4)
        sent, pos = _get(buf, pos)
        d, pos = _get(buf, pos)
        size, pos = _get(buf, pos) if flags & SUBSET else (np.uint64(0), pos)
        index_size, pos = _get(buf, pos) if flags & EXACT else (np.uint64(0), pos)
        exact_size, pos = _get(buf, pos) if flags & EXACT else (np.uint64(0), pos)
    except ValueError as e:
        raise CodecError(f"payload header: {e}") from None
    if int(n) != rows or int(d) != cols or int(sent) > rows:
        raise CodecError(f"payload header: {int(sent)} of {int(n)} rows of {int(d)} values, the push names {rows} of {cols}")
    if not flags & SUBSET and int(sent) != rows:
        raise CodecError(f"payload header: {int(sent)} rows sent of {rows} with no subset")
    if int(size) + int(index_size) + int(exact_size) > buf.shape[0] - pos:
        raise CodecError("payload: subset and exact rows longer than the payload")
    subset = _subset(buf[pos : pos + int(size)], flags, rows, int(sent)) if flags & SUBSET else None
    pos += int(size)
    exact = None
    if flags & EXACT:
        at = _exact_index(buf[pos : pos + int(index_size)], int(sent))
        pos += int(index_size)
        try:
            exact = at, _from_planes("exact rows", payload[pos : pos + int(exact_size)], at.shape[0], cols, "<f8")
        except CodecError as e:
            raise CodecError(f"payload exact rows: {e}") from None
        pos += int(exact_size)
    values = codec.decode(payload[pos:], int(sent), cols)
    if exact is not None:
        values = np.array(values, dtype=np.float64)  # a decoder may hand back the payload's own read-only bytes
        values[exact[0]] = exact[1]
    if not np.isfinite(values).all():
        raise CodecError(f"payload: {codec.name} values are not all finite")
    return subset, values


def _exact_index(data: npt.NDArray[np.uint8], sent: int) -> I64:
    """The exact rows' positions among the `sent` carried rows: ascending, unique, at least one."""
    try:
        _, at = decode_index_lists(data, 1, sent)
    except ValueError as e:
        raise CodecError(f"payload exact rows: {e}") from None
    if not at.shape[0] or (at.shape[0] > 1 and not bool(np.all(at[1:] > at[:-1]))):
        raise CodecError("payload exact rows: none listed, or positions repeat")
    return at


def _subset(data: npt.NDArray[np.uint8], flags: int, rows: int, sent: int) -> I64:
    if flags & BITMAP:
        if data.shape[0] != (rows + 7) // 8:
            raise CodecError(f"payload subset: a bitmap of {data.shape[0]} bytes for {rows} rows")
        idx = np.flatnonzero(np.unpackbits(data, bitorder="little")[:rows]).astype(np.int64)
    else:
        try:
            _, idx = decode_index_lists(data, 1, rows)
        except ValueError as e:
            raise CodecError(f"payload subset: {e}") from None
        if idx.shape[0] > 1 and not bool(np.all(idx[1:] > idx[:-1])):
            raise CodecError("payload subset: indices repeat")
    if idx.shape[0] != sent:
        raise CodecError(f"payload subset: {idx.shape[0]} rows, the header says {sent}")
    return idx
