"""Model files: full hashmap images, deltas and dense arrays, each with a checksum.

Every file is a 64-byte header followed by a payload (see docs/model-format.md):

    magic "BLMF" | u16 format version | u16 kind | u32 dim | u64 count | u64 extra
    | u64 payload bytes | u32 crc32(payload) | zero padding to 64 bytes

kind 4 BUCKETS: payload = bucketized cuckoo table uint32[extra=buckets, width]
    (ctr.format.bucket_kernels); count = entries. Serving mmaps it as a BucketMap without copying.
    width is 8 * (2 + dim) (the wide layout), or 16 for dim 1 (the line layout: 5 keys and
    their rows a 64-byte bucket; dim-1 images written before 2026-11-25 are wide, and
    still read). The payload starts at byte 64, so a mapped bucket is one cache line.
kind 1 IMAGE (older): linear-probing slots uint32[extra=capacity, 2 + dim]; still read,
    rebuilt into a BucketMap in memory.
kind 2 DELTA: payload = keys uint64[count] sorted | rows float32[count, dim]
    | tombstones uint64[extra] sorted.
kind 3 (DENSE ranges) is retired: dense weights travel as safetensors (trainer.run.exporter).

Files are written to a temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ctr.format import bucket_kernels
from ctr.format.bucket_map import BucketMap
from ctr.format.hashmap import KEY_WORDS, CompactHashMap

# an export's folder, named by a caller (PS Export, manager Publish): one name, never a path
EXPORT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
MAGIC = b"BLMF"
FORMAT_VERSION = 1
HEADER = struct.Struct("<4sHHIQQQI")
HEADER_SIZE = 64


class Kind(IntEnum):
    IMAGE = 1  # linear probing (ctr.format.hashmap), written before bucketized images
    DELTA = 2
    BUCKETS = 4


class ModelFileError(ValueError):
    """A model file that is truncated, corrupt or of the wrong kind."""


@dataclass(frozen=True)
class Header:
    kind: Kind
    dim: int
    count: int
    extra: int
    payload_bytes: int
    crc32: int


@dataclass(frozen=True)
class Delta:
    keys: npt.NDArray[np.uint64]
    rows: npt.NDArray[np.float32]
    tombstones: npt.NDArray[np.uint64]


def _write(path: Path, kind: Kind, dim: int, count: int, extra: int, parts: list[bytes]) -> None:
    crc = 0
    size = 0
    for p in parts:
        crc = zlib.crc32(p, crc)
        size += len(p)
    head = HEADER.pack(MAGIC, FORMAT_VERSION, int(kind), dim, count, extra, size, crc)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(head.ljust(HEADER_SIZE, b"\0"))
        for p in parts:
            f.write(p)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_header(path: Path) -> Header:
    with open(path, "rb") as f:
        raw = f.read(HEADER_SIZE)
    if len(raw) < HEADER_SIZE:
        raise ModelFileError(f"{path}: {len(raw)} bytes, shorter than the {HEADER_SIZE}-byte header")
    magic, version, kind, dim, count, extra, size, crc = HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise ModelFileError(f"{path}: bad magic {magic!r}")
    if version != FORMAT_VERSION:
        raise ModelFileError(f"{path}: format version {version}, expected {FORMAT_VERSION}")
    try:
        k = Kind(kind)
    except ValueError:
        raise ModelFileError(f"{path}: unknown kind {kind}") from None
    actual = path.stat().st_size - HEADER_SIZE
    if actual != size:
        raise ModelFileError(f"{path}: payload is {actual} bytes, header says {size}")
    return Header(k, dim, count, extra, size, crc)


def verify(path: Path) -> Header:
    """Checks header, size and payload CRC; raises ModelFileError naming what is wrong."""
    h = read_header(path)
    crc = 0
    with open(path, "rb") as f:
        f.seek(HEADER_SIZE)
        while chunk := f.read(1 << 22):
            crc = zlib.crc32(chunk, crc)
    if crc != h.crc32:
        raise ModelFileError(f"{path}: payload crc32 {crc:08x} does not match header {h.crc32:08x}")
    return h


def sha256_file(path: Path) -> str:
    d = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            d.update(chunk)
    return d.hexdigest()


def copy_checked(src: Path, dst: Path, size: int, sha256: str, listed_in: str = "the manifest") -> None:
    """Copies src to dst reading it once, checking its size and sha256 against what
    `listed_in` says on the way; dst appears whole (a rename) and only when both match.
    ModelFileError names what did not."""
    if not src.is_file():
        raise ModelFileError(f"{src.name}: listed but missing")
    tmp = dst.with_name(f".{dst.name}.part")
    d = hashlib.sha256()
    copied = 0
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as fout:
            while chunk := fin.read(1 << 22):
                d.update(chunk)
                fout.write(chunk)
                copied += len(chunk)
            fout.flush()
            os.fsync(fout.fileno())
        if copied != size:
            raise ModelFileError(f"{src.name}: {copied} bytes, {listed_in} says {size}")
        if d.hexdigest() != sha256:
            raise ModelFileError(f"{src.name}: sha256 does not match {listed_in}")
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)


def write_image(path: Path, keys: npt.NDArray[np.uint64], rows: npt.NDArray[np.float32]) -> None:
    """A full snapshot: keys with float32 rows, as a bucketized table sized for mmap lookups."""
    dim = rows.shape[1] if rows.ndim == 2 else 1
    rows2 = np.ascontiguousarray(rows, dtype=np.float32).reshape(keys.shape[0], dim)
    m = BucketMap.from_rows(keys, rows2.view(np.uint32))
    _write(path, Kind.BUCKETS, dim, m.size, m.buckets, [m.table.tobytes()])


def load_image(path: Path, mmap: bool = True) -> BucketMap:
    """The image as a read-only BucketMap (memory-mapped unless mmap=False, or when the
    file is an older linear-probing image, which is rebuilt in memory)."""
    h = read_header(path)
    if h.kind == Kind.IMAGE:
        return _legacy_image(path, h)
    if h.kind != Kind.BUCKETS:
        raise ModelFileError(f"{path}: kind {h.kind.name}, expected an image")
    width = h.payload_bytes // (4 * h.extra) if h.extra >= 2 else 0
    shape = (h.extra, width)
    if width == 0 or h.payload_bytes != shape[0] * shape[1] * 4 or bucket_kernels.row_words_of(width) != h.dim:
        raise ModelFileError(f"{path}: payload size does not match {h.extra} buckets of dim {h.dim}")
    table: npt.NDArray[np.uint32]
    if mmap:
        table = np.memmap(path, dtype=np.uint32, mode="r", offset=HEADER_SIZE, shape=shape)
    else:
        table = np.fromfile(path, dtype=np.uint32, offset=HEADER_SIZE).reshape(shape)
        table.flags.writeable = False
    return BucketMap(h.dim, table=table, size=h.count)


def _legacy_image(path: Path, h: Header) -> BucketMap:
    shape = (h.extra, KEY_WORDS + h.dim)
    if h.payload_bytes != shape[0] * shape[1] * 4:
        raise ModelFileError(f"{path}: payload size does not match capacity {h.extra} x dim {h.dim}")
    old = CompactHashMap(h.dim, slots=np.fromfile(path, dtype=np.uint32, offset=HEADER_SIZE).reshape(shape), size=h.count)
    keys, slots = old.items()
    m = BucketMap.from_rows(keys, np.ascontiguousarray(old.words[slots]))
    m.table.flags.writeable = False
    return m


def write_delta(
    path: Path,
    keys: npt.NDArray[np.uint64],
    rows: npt.NDArray[np.float32],
    tombstones: npt.NDArray[np.uint64],
) -> None:
    order = np.argsort(keys, kind="stable")
    k = np.ascontiguousarray(keys[order], dtype=np.uint64)
    dim = rows.shape[1] if rows.ndim == 2 else 1
    r = np.ascontiguousarray(rows.reshape(keys.shape[0], dim)[order], dtype=np.float32)
    t = np.sort(np.asarray(tombstones, dtype=np.uint64))
    _write(path, Kind.DELTA, r.shape[1], k.shape[0], t.shape[0], [k.tobytes(), r.tobytes(), t.tobytes()])


def read_delta(path: Path) -> Delta:
    h = read_header(path)
    if h.kind != Kind.DELTA:
        raise ModelFileError(f"{path}: kind {h.kind.name}, expected DELTA")
    if h.payload_bytes != h.count * 8 + h.count * h.dim * 4 + h.extra * 8:
        raise ModelFileError(f"{path}: payload size does not match its counts")
    raw = np.fromfile(path, dtype=np.uint8, offset=HEADER_SIZE)
    a = h.count * 8
    b = a + h.count * h.dim * 4
    return Delta(
        raw[:a].view(np.uint64),
        raw[a:b].view(np.float32).reshape(h.count, h.dim),
        raw[b:].view(np.uint64),
    )


def shard_index(name: str) -> int:
    """The shard of a sparse file named `shard<i>-...`: readers order shard files by this,
    never by name (shard10 sorts before shard2). Raises ModelFileError for another name."""
    head = name.split("-", 1)[0].removeprefix("shard")
    if not name.startswith("shard") or not head.isdigit():
        raise ModelFileError(f"{name}: not a shard file name (shard<index>-...)")
    return int(head)


def file_shard(entry: Mapping[str, Any]) -> int:
    """The shard of a manifest's file entry: its `shard` index, else its name's."""
    return int(entry["shard"]) if entry.get("shard") is not None else shard_index(str(entry["name"]))
