"""zstd (de)compressors, one of each per thread: zstandard's objects must not be shared by
threads, and making one per call costs more than a small frame. Level 1 everywhere it is
used (request encodings, the PS's byte-plane codecs): its ratio on those inputs is level
3's, at about twice the speed. The byte planes' compressor also takes no match shorter
than 7 bytes (plane_compressor, below)."""

from __future__ import annotations

import threading

import zstandard

_LOCAL = threading.local()


def compressor() -> zstandard.ZstdCompressor:
    if not hasattr(_LOCAL, "compressor"):
        _LOCAL.compressor = zstandard.ZstdCompressor(level=1)
    return _LOCAL.compressor  # type: ignore[no-any-return]


# byte planes (ps.compression.payload): level 1, but no match shorter than 7 bytes. A plane of
# exponent bytes is mostly literals for the entropy coder; the short matches level 1 takes
# there cost time and save nothing. On planes captured from Frappe LR and Criteo 10k DeepFM
# runs, 5-26% less time at the same size or smaller (docs/design/lossless-planes.md)
PLANE_MIN_MATCH = 7


def plane_compressor() -> zstandard.ZstdCompressor:
    if not hasattr(_LOCAL, "plane_compressor"):
        params = zstandard.ZstdCompressionParameters.from_level(1, min_match=PLANE_MIN_MATCH)
        _LOCAL.plane_compressor = zstandard.ZstdCompressor(compression_params=params)
    return _LOCAL.plane_compressor  # type: ignore[no-any-return]


def decompressor() -> zstandard.ZstdDecompressor:
    if not hasattr(_LOCAL, "decompressor"):
        _LOCAL.decompressor = zstandard.ZstdDecompressor()
    return _LOCAL.decompressor  # type: ignore[no-any-return]
