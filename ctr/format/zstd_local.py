"""zstd (de)compressors, one of each per thread: zstandard's objects must not be shared by
threads, and making one per call costs more than a small frame. Level 1 everywhere it is
used (request encodings, the PS's byte-plane codecs): its ratio on those inputs is level
3's, at about twice the speed."""

from __future__ import annotations

import threading

import zstandard

_LOCAL = threading.local()


def compressor() -> zstandard.ZstdCompressor:
    if not hasattr(_LOCAL, "compressor"):
        _LOCAL.compressor = zstandard.ZstdCompressor(level=1)
    return _LOCAL.compressor  # type: ignore[no-any-return]


def decompressor() -> zstandard.ZstdDecompressor:
    if not hasattr(_LOCAL, "decompressor"):
        _LOCAL.decompressor = zstandard.ZstdDecompressor()
    return _LOCAL.decompressor  # type: ignore[no-any-return]
