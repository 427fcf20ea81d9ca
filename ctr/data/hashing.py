"""Stable 64-bit feature hashing.

Definition (stable across versions, processes and machines):

    field_id(name) = fnv1a32(utf8(name))
    key(field, value) = fmix(fnv1a64(utf8(value)) XOR ((field_id + 1) * 0x9E3779B97F4A7C15))

where fmix is the splitmix64 finalizer. The key 0 is reserved as the empty slot of
the hashmap, so a hash of 0 is mapped to 1. Tests pin known values.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba as nb
import numpy as np
import numpy.typing as npt

FNV64_OFFSET = np.uint64(0xCBF29CE484222325)
FNV64_PRIME = np.uint64(0x100000001B3)
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
MIX1 = np.uint64(0xBF58476D1CE4E5B9)
MIX2 = np.uint64(0x94D049BB133111EB)


def field_id(name: str) -> int:
    """32-bit FNV-1a of the field name: the field's id inside every key."""
    h = 0x811C9DC5
    for b in name.encode("utf-8"):
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


@nb.njit(cache=True, nogil=True, inline="always")
def fnv_bytes(h: np.uint64, buf: npt.NDArray[np.uint8], s: int, e: int) -> np.uint64:
    """FNV-1a 64 of buf[s:e], continuing from state h (FNV64_OFFSET to start)."""
    for j in range(s, e):
        h = (h ^ np.uint64(buf[j])) * FNV64_PRIME
    return h


@nb.njit(cache=True, nogil=True, inline="always")
def finish_key(h: np.uint64, fid: np.uint32) -> np.uint64:
    """The key of a token whose FNV-1a 64 is h, in the field with hash id fid."""
    h = h ^ ((np.uint64(fid) + np.uint64(1)) * GOLDEN)
    h = (h ^ (h >> np.uint64(30))) * MIX1
    h = (h ^ (h >> np.uint64(27))) * MIX2
    h = h ^ (h >> np.uint64(31))
    return h if h != np.uint64(0) else np.uint64(1)


@nb.njit(cache=True, nogil=True)
def hash_tokens(
    buf: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64], fields: npt.NDArray[np.uint32]
) -> npt.NDArray[np.uint64]:
    """Keys for tokens buf[offsets[i]:offsets[i+1]] of field fields[i]."""
    n = fields.shape[0]
    out = np.empty(n, dtype=np.uint64)
    for i in range(n):
        out[i] = finish_key(fnv_bytes(FNV64_OFFSET, buf, offsets[i], offsets[i + 1]), fields[i])
    return out


def hash_tokens_reference(fields: Sequence[int], tokens: Sequence[str]) -> list[int]:
    """Plain-Python reference of hash_tokens, used by the tests."""
    mask = (1 << 64) - 1
    out = []
    for f, tok in zip(fields, tokens, strict=True):
        h = 0xCBF29CE484222325
        for b in tok.encode("utf-8"):
            h = ((h ^ b) * 0x100000001B3) & mask
        h ^= ((f + 1) * 0x9E3779B97F4A7C15) & mask
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & mask
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & mask
        h ^= h >> 31
        out.append(h or 1)
    return out


def pack_tokens(tokens: Sequence[str]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """Concatenates UTF-8 tokens into one buffer with offsets, the input of hash_tokens."""
    encoded = [t.encode("utf-8") for t in tokens]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    if encoded:
        np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    buf = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return buf, offsets


def hash_features(fields: Sequence[int], tokens: Sequence[str]) -> npt.NDArray[np.uint64]:
    """Keys of (field id, token) pairs."""
    buf, offsets = pack_tokens(tokens)
    return hash_tokens(buf, offsets, np.asarray(fields, dtype=np.uint32))  # type: ignore[no-any-return]
