"""Compressed files read as the text they hold: gzip, bzip2, xz and zstd, told by their first
bytes (not their names): the trainer's sources (a followed folder, a file named as the
source, objects under an s3:// prefix, whose bytes are read from the start since a ranged
GET cannot start mid-stream) and the sample files of `boundless predict` and `eval`.

Without this, a gzip'd day of clicks (the form Criteo publishes its logs in) parsed as
binary: a file named as the source failed on "line is not valid UTF-8", and one in a folder
of plain files trained nothing while its few chance newlines were counted as bad lines.

The stream position in a compressed file is a byte offset in its text, as for Parquet's
rendered text (ctr.data.parquet_text): a restart at a checkpoint cut decompresses from
the start up to that offset and takes up at the same line. A compressed file is read whole
once it is there: it cannot grow in place. A followed folder's is read once its last write
is a second old (trainer.input.source.SETTLE_S), so one written in place is read whole
unless its writer stalls longer mid-file (then write it under another name and rename
it). One cut short or damaged has the lines before the damage trained, and the damage is
logged with the file and the text offset.
"""

from __future__ import annotations

import bz2
import gzip
import io
import logging
import lzma
import os
from pathlib import Path
from typing import Any

log = logging.getLogger("boundless.data")  # propagates to the daemon's log (trainer, serving tools)

MAX_HEADER_BYTES = 1 << 20  # a CSV header longer than this is not looked for further

# names that announce a compressed file: one still empty is left for a later pass (its
# first bytes decide how it is read), not read as a plain file that grows
COMPRESSED_SUFFIXES = frozenset({".gz", ".gzip", ".bz2", ".xz", ".zst", ".zstd"})

MAGIC = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
}


def compression_of(head: bytes) -> str | None:
    """The compression a file's first bytes announce, or None for plain text."""
    return next((kind for magic, kind in MAGIC.items() if head.startswith(magic)), None)


def compression_of_file(fd: int) -> str | None:
    """compression_of() of an open file's first bytes, read without moving its offset."""
    return compression_of(os.pread(fd, 6, 0))


def _open(raw: Any, kind: str) -> Any:
    """A decompressing reader over `raw`, a binary file object it closes with itself."""
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if kind == "bzip2":
        return bz2.BZ2File(raw, "rb")
    if kind == "xz":
        return lzma.LZMAFile(raw, "rb")
    import zstandard

    return zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True, closefd=True)


class _RawFailed(Exception):
    """Reading the compressed bytes failed (its cause says how): not damage in them."""


class _Raw:
    """The compressed bytes, their read errors marked (_RawFailed), so that the decompressor's
    errors, which mean damage, are told apart from the storage's (an S3 outage, the stream
    stopping), which must reach the caller: as damage, the rest of the file would be lost."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def read(self, size: int = -1) -> bytes:
        try:
            return self.raw.read(size)  # type: ignore[no-any-return]
        except Exception as e:
            raise _RawFailed() from e

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self.raw.close()


class DecompressedText(io.RawIOBase):
    """The text of one compressed file (or of `raw`, an object's bytes from its start, named
    `path`), read forward from any offset. A stream that ends early or is damaged reads as
    ending there (`damage` says why and where); an error reading `raw` itself is raised."""

    def __init__(self, path: str | Path, kind: str, raw: Any = None) -> None:
        self.path, self.kind = str(path), kind
        self._raw = open(path, "rb") if raw is None else raw  # noqa: SIM115 - closed in close()
        self._file = _open(_Raw(self._raw), kind)
        self._at = 0
        self.damage: str | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._at

    def disk_per_text(self) -> float | None:
        """Compressed bytes consumed per byte of text so far (None before any text, or where
        the compressed stream cannot say where it is): a position in the text, times this,
        is about where the file stands on disk."""
        if self._at <= 0:
            return None
        try:
            consumed = self._raw.tell() if hasattr(self._raw, "tell") else getattr(self._raw, "offset", None)
        except (OSError, ValueError):
            return None
        return consumed / self._at if isinstance(consumed, int) and consumed > 0 else None

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Forward from where it is (the source seeks once, to its start offset, before reading)."""
        if whence != io.SEEK_SET or offset < self._at:
            raise io.UnsupportedOperation("a compressed file is read forward")
        while self._at < offset and self.read1(min(offset - self._at, 1 << 20)):
            pass
        return self._at

    def read1(self, size: int = -1) -> bytes:
        """`size` bytes of text (1 MiB by default), fewer only at the end or the damage."""
        want = size if size > 0 else 1 << 20
        parts: list[bytes] = []
        got = 0
        # the pieces of the decompressor's read1, not one read(): a buffered read() of a
        # stream cut short raises at its end and drops what it decompressed before; read1
        # hands each piece over (gzip's are ~23 KB, zstd's 512 KB: joined here, so the
        # reader's blocks stay whole MiBs, as read() gave them, and a batch is joined from as
        # few of them as before)
        while got < want and self.damage is None:
            try:
                data = self._file.read1(want - got)
            except _RawFailed as e:  # the storage's error, not the file's: the caller's to handle
                raise e.__cause__ from None  # type: ignore[misc]
            except Exception as e:  # noqa: BLE001 - EOFError (cut short), BadGzipFile, zlib.error, LZMAError, ZstdError
                self._damaged(e)
                break
            if not data:
                break
            parts.append(data)
            got += len(data)
            self._at += len(data)
        return b"".join(parts)

    def read(self, size: int = -1) -> bytes:
        return self.read1(size)

    def _damaged(self, e: BaseException) -> None:
        self.damage = f"{type(e).__name__}: {e}"
        log.error(
            "%s: its %s stream is cut short or damaged after %d bytes of text (%s); the whole lines before it are read. A"
            " compressed file is read whole once it is there (in a followed folder, once its last write is a second old):"
            " write it under another name and rename it into the folder",
            self.path,
            self.kind,
            self._at,
            self.damage,
        )

    def close(self) -> None:
        if not self.closed:
            self._file.close()
            self._raw.close()  # gzip, bz2 and lzma leave a file object they were given open
        super().close()


def first_line(path: str | Path) -> str:
    """A file's first line of text (a CSV's header, for a reader resumed inside the file),
    decompressed where the file is compressed."""
    with open(path, "rb") as fh:
        kind = compression_of_file(fh.fileno())
        if kind is None:
            return fh.readline().decode("utf-8", errors="replace")
    with DecompressedText(path, kind) as text:
        head = b""
        while b"\n" not in head and len(head) < MAX_HEADER_BYTES:
            more = text.read1(1 << 16)
            if not more:
                break
            head += more
    return head.split(b"\n", 1)[0].decode("utf-8", errors="replace")
