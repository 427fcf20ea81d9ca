"""The compact request encoding (docs/request-encoding.md), without protobuf.

A request holds a dictionary of unique (key, value) entries as uint64 keys plus optional
float32 values (absent: all 1.0), the shared context features once as one index list, and
each item as one index list, and the field index of each dictionary entry, run-length
coded. An index list is a varint count then varint gaps between ascending dictionary
indices. The client orders the dictionary field by field, so an item's gaps stay small and
the field runs are few.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numba as nb
import numpy as np
import numpy.typing as npt
import zstandard

from ctr.data.hashing import field_id
from ctr.data.unique import first_occurrence, unique_inverse
from ctr.format.varint import decode_index_lists, decode_runs, encode_index_lists, encode_varints
from ctr.format.zstd_local import compressor, decompressor
from serving.request.columns import PREFIX_OF_SUB, TokenFeatures
from serving.request.token_dictionary import KIND_INTS, KIND_KEYS, Both, decode_blocks, encode_blocks, keys_of_blocks
from serving.request.token_kernels import expand_columns, ordered_unique, sorted_groups

MAX_ITEMS = 100_000
MAX_EXPANDED_BYTES = 64 << 20  # what a compressed field may expand to
# the least share of the bytes zstd must save for a request to go compressed by default:
# decompressing costs the server about 1 ms per MB, and on a 1 Gb/s link 1/8 of a MB
# takes as long to send, so a smaller saving costs more time than it saves on any faster
# link (random ids in varint gaps save ~10%; Zipf-distributed ones ~30%)
MIN_ZSTD_SAVING = 1 / 8


class EncodingError(ValueError):
    """A request whose bytes are truncated or inconsistent, naming the field."""


# how serving begins the FAILED_PRECONDITION of a request encoded for another version's
# field list or transform (its transform_digest), which a client answers by asking again
TRANSFORM_CHANGED = "the model's field list or feature transform changed"


@dataclass(frozen=True)
class EncodedRequest:
    item_count: int
    dictionary: bytes
    values: bytes
    context: bytes
    items: bytes
    fields: bytes = b""
    tokens: bytes = b""
    compression: int = 0  # 1: each non-empty bytes field is a zstd frame
    unknown_features: int = 0  # features the encoder dropped: the model has no field of their name
    unknown_fields: tuple[str, ...] = ()  # those fields' names, the first few
    transform_digest: int = 0  # the field list and transform it was encoded for (0: not checked)

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b in (self.dictionary, self.values, self.context, self.items, self.fields, self.tokens))


@dataclass(frozen=True)
class DecodedRequest:
    keys: npt.NDArray[np.uint64]
    values: npt.NDArray[np.float32]
    fields: npt.NDArray[np.int32]
    context: npt.NDArray[np.int64]
    item_offsets: npt.NDArray[np.int64]
    item_indices: npt.NDArray[np.int64]


def encode(
    keys: npt.NDArray[np.uint64],
    values: npt.NDArray[np.float32],
    rank: npt.NDArray[np.int64],
    owner: npt.NDArray[np.int64],
    item_count: int,
    fields: npt.NDArray[np.int64] | None = None,
) -> EncodedRequest:
    """Encodes flat features: feature j has keys[j], values[j], field rank[j] (the order of
    the dictionary), field index fields[j] (default 0), and belongs to item owner[j] (-1 for
    the shared context)."""
    values = values.astype(np.float32)
    first, inverse = _unique_pairs(keys, values)
    # dictionary in (field rank, first appearance) order, so each field's values sit together
    order = np.lexsort((first, rank[first]))
    new_index = np.empty(order.shape[0], dtype=np.int64)
    new_index[order] = np.arange(order.shape[0])
    idx = new_index[inverse]
    dict_keys = keys[first[order]]
    dict_vals = values[first[order]]
    bounds, idx_sorted = group_indices(owner, idx, item_count)  # context first, ascending inside
    ctx = encode_index_lists(np.array([0, bounds[1]], dtype=np.int64), idx_sorted[: bounds[1]])
    item_offsets = (bounds[1:] - bounds[1]).astype(np.int64)
    items = encode_index_lists(item_offsets, np.ascontiguousarray(idx_sorted[bounds[1] :]))
    values_bytes = b"" if bool(np.all(dict_vals == 1.0)) else dict_vals.astype("<f4").tobytes()
    field_bytes = b"" if fields is None else encode_field_runs(np.asarray(fields, np.int64)[first[order]])
    return EncodedRequest(item_count, dict_keys.astype("<u8").tobytes(), values_bytes, bytes(ctx), bytes(items), field_bytes)


def _ordered_unique(code: npt.NDArray[np.int64], z: npt.NDArray[np.uint64]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The unique (code, z) pairs in ascending order (codes, values) and each feature's
    index among them. One uint64 per pair when both fit (the usual case), hashed."""
    if code.shape[0] == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.int64)
    shift = 64 - max(1, int(code.max()).bit_length())
    if int(z.max()) < (1 << shift):
        s, idx = ordered_unique(code, z, shift)
        return (s >> np.uint64(shift)).astype(np.int64), s & np.uint64((1 << shift) - 1), idx
    pairs = np.stack([code.astype(np.uint64), z], axis=1)
    u, inverse = np.unique(pairs, axis=0, return_inverse=True)
    return u[:, 0].astype(np.int64), u[:, 1].copy(), inverse.reshape(-1).astype(np.int64)


def encode_tokens(features: TokenFeatures, item_count: int, compress: bool | None = None) -> EncodedRequest:
    """The token-dictionary request (serving.request.token_dictionary) of columnar features,
    zstd-compressed when `compress`, or by default when that saves MIN_ZSTD_SAVING of the
    bytes."""
    columns = (features.tokens, features.sub, features.col_start, features.col_code, features.col_per)
    # every feature an integer token (the usual columnar request): one packed sort
    fast = None if features.keys.shape[0] else sorted_groups(*columns, item_count)
    if fast is not None:
        codes, zs, grouped, idx_sorted = fast
    else:
        int_code, int_z, int_owner = expand_columns(*columns)
        codes, zs, int_idx = _ordered_unique(int_code, int_z)
    ukeys, kinv = unique_inverse(features.keys)
    kfields = features.key_fields[first_occurrence(kinv, ukeys.shape[0])]
    korder = np.lexsort((ukeys, kfields))
    krank = np.empty(korder.shape[0], dtype=np.int64)
    krank[korder] = np.arange(korder.shape[0])
    n_int = codes.shape[0]
    # blocks: integer ones by code, then hashed keys by field
    int_starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]]) if n_int else np.zeros(0, np.int64)
    sorted_kf = kfields[korder]
    key_starts = np.flatnonzero(np.r_[True, sorted_kf[1:] != sorted_kf[:-1]]) if korder.shape[0] else np.zeros(0, np.int64)
    block_code = codes[int_starts]
    field = np.concatenate([block_code // 4, sorted_kf[key_starts]]).astype(np.int64)
    kind = np.concatenate([np.full(int_starts.shape[0], KIND_INTS), np.full(key_starts.shape[0], KIND_KEYS)]).astype(np.int64)
    prefix = np.concatenate([np.asarray(PREFIX_OF_SUB, np.int64)[block_code % 4], np.zeros(key_starts.shape[0], np.int64)])
    bounds = np.concatenate([int_starts, key_starts + n_int, [n_int + korder.shape[0]]]).astype(np.int64)
    tokens = encode_blocks(field, kind, prefix, bounds, np.concatenate([zs, ukeys[korder]]))
    if fast is None:
        idx = np.concatenate([int_idx, krank[kinv] + n_int])
        owner = np.concatenate([int_owner, features.key_owner])
        grouped, idx_sorted = group_indices(owner, idx, item_count)
    ctx = encode_index_lists(np.array([0, grouped[1]], dtype=np.int64), idx_sorted[: grouped[1]])
    items = encode_index_lists((grouped[1:] - grouped[1]).astype(np.int64), np.ascontiguousarray(idx_sorted[grouped[1] :]))
    parts = [bytes(tokens), bytes(ctx), bytes(items)]
    if compress is False:
        return EncodedRequest(item_count, b"", b"", parts[1], parts[2], b"", parts[0], 0)
    zc = compressor()
    packed = [zc.compress(p) if p else p for p in parts]
    raw_bytes, packed_bytes = sum(len(p) for p in parts), sum(len(p) for p in packed)
    if compress is None and packed_bytes > (1 - MIN_ZSTD_SAVING) * raw_bytes:
        return EncodedRequest(item_count, b"", b"", parts[1], parts[2], b"", parts[0], 0)
    return EncodedRequest(item_count, b"", b"", packed[1], packed[2], b"", packed[0], 1)


def _unique_pairs(
    keys: npt.NDArray[np.uint64], values: npt.NDArray[np.float32]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(first occurrence of each unique (key, value) pair, each feature's pair number), by
    hashing the keys; np.unique over the pairs only when a key comes with several values."""
    uniq, inverse = unique_inverse(keys)
    first = first_occurrence(inverse, uniq.shape[0])
    if bool(np.all(values == values[first[inverse]])):
        return first, inverse
    pairs = np.empty((keys.shape[0], 2), dtype=np.uint64)
    pairs[:, 0] = keys
    pairs[:, 1] = values.view(np.uint32)
    _, first, inverse = np.unique(pairs, axis=0, return_index=True, return_inverse=True)
    return first.astype(np.int64), inverse.reshape(-1).astype(np.int64)


@nb.njit(cache=True, nogil=True)
def group_indices(
    owner: npt.NDArray[np.int64], idx: npt.NDArray[np.int64], item_count: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The features grouped by owner (-1 = context, then items 0..n-1), each group's
    dictionary indices ascending: (group bounds [item_count + 2], indices). Two counting
    sorts, by index then stably by owner, so no comparison sort runs."""
    n = idx.shape[0]
    size = 0
    for j in range(n):
        size = max(size, idx[j] + 1)
    start = np.zeros(size + 1, dtype=np.int64)
    for j in range(n):
        start[idx[j] + 1] += 1
    for d in range(size):
        start[d + 1] += start[d]
    by_idx = np.empty(n, dtype=np.int64)  # feature numbers in ascending index order
    for j in range(n):
        by_idx[start[idx[j]]] = j
        start[idx[j]] += 1
    bounds = np.zeros(item_count + 2, dtype=np.int64)
    for j in range(n):
        bounds[owner[j] + 2] += 1
    for g in range(1, item_count + 2):
        bounds[g] += bounds[g - 1]
    fill = bounds[:-1].copy()
    out = np.empty(n, dtype=np.int64)
    for q in range(n):
        j = by_idx[q]
        g = owner[j] + 1
        out[fill[g]] = idx[j]
        fill[g] += 1
    return bounds, out


def group_indices_reference(
    owner: npt.NDArray[np.int64], idx: npt.NDArray[np.int64], item_count: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """np.lexsort of group_indices, used by its tests."""
    order = np.lexsort((idx, owner))
    return np.searchsorted(owner[order], np.arange(-1, item_count + 1)).astype(np.int64), idx[order]


def encode_field_runs(fields: npt.NDArray[np.int64]) -> bytes:
    """runs, then (field, length) per run of equal fields, all varints."""
    if fields.shape[0] == 0:
        return b""
    starts = np.flatnonzero(np.r_[True, fields[1:] != fields[:-1]])
    lengths = np.diff(np.r_[starts, fields.shape[0]])
    pairs = np.empty(2 * starts.shape[0] + 1, dtype=np.uint64)
    pairs[0] = starts.shape[0]
    pairs[1::2] = fields[starts]
    pairs[2::2] = lengths
    return bytes(encode_varints(pairs))


@functools.lru_cache(maxsize=8)
def field_hash_ids(names: tuple[str, ...]) -> npt.NDArray[np.uint32]:
    """The hash id of each of a model's fields, which token dictionaries are hashed with."""
    return np.array([field_id(n) for n in names], dtype=np.uint32)


def decode(
    req: EncodedRequest,
    field_count: int = 1 << 16,
    field_hash_ids: npt.NDArray[np.uint32] | None = None,
    max_bytes: int = MAX_EXPANDED_BYTES,
    both: Both | None = None,
) -> DecodedRequest:
    """Validates and expands a request; field indices must be < field_count. A token
    dictionary is hashed with the model's field hash ids. With `both` (run two calls at
    once, serving.scoring.parallel.Splitter.both), the dictionary and the item lists are decoded on
    two threads: neither needs the other until the indices are checked against it."""
    if req.item_count > MAX_ITEMS:
        raise EncodingError(f"item_count: {req.item_count} exceeds the limit of {MAX_ITEMS}")
    if req.compression not in (0, 1):
        raise EncodingError(f"compression: unknown code {req.compression}")
    run = both or (lambda a, b: (a(), b()))
    (keys, values, fields), (ctx, offsets, indices) = run(
        lambda: _dictionary(req, field_count, field_hash_ids, max_bytes, both),
        lambda: _lists(req, max_bytes),
    )
    n = keys.shape[0]
    for name, idx in (("context", ctx), ("items", indices)):
        if idx.shape[0] and int(idx.max()) >= n:
            raise EncodingError(f"{name}: index out of the dictionary's range")
    return DecodedRequest(keys, values, fields, ctx, offsets, indices)


def _expanded(req: EncodedRequest, name: str, max_bytes: int) -> bytes:
    """One bytes field of the request, its zstd frame expanded when compressed."""
    data: bytes = getattr(req, name)
    if req.compression == 0 or not data:
        return data
    try:
        # a declared size is checked before anything is allocated; an undeclared one is
        # bounded while decompressing
        if zstandard.frame_content_size(data) > max_bytes:
            raise zstandard.ZstdError(f"the frame declares {zstandard.frame_content_size(data)} bytes")
        return decompressor().decompress(data, max_output_size=max_bytes)  # type: ignore[no-any-return]
    except zstandard.ZstdError as e:
        raise EncodingError(f"{name}: not a zstd frame of at most {max_bytes} bytes: {e}") from None


def _dictionary(
    req: EncodedRequest,
    field_count: int,
    field_hash_ids: npt.NDArray[np.uint32] | None,
    max_bytes: int,
    both: Both | None = None,
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32], npt.NDArray[np.int32]]:
    """keys, values and fields of the dictionary entries; with `both`, the tokens are
    hashed on two threads (the item lists are decoded by then, or nearly)."""
    tokens = _expanded(req, "tokens", max_bytes)
    token_fields = None
    if tokens:
        if req.dictionary or req.fields:
            raise EncodingError("tokens: a request carries either tokens or dictionary and fields, not both")
        if field_hash_ids is None or field_hash_ids.shape[0] == 0:
            raise EncodingError("tokens: this model has no field list to hash tokens with; send hashed keys")
        try:
            blocks = decode_blocks(np.frombuffer(tokens, dtype=np.uint8), max_bytes)
            keys, token_fields = keys_of_blocks(*blocks, field_hash_ids[:field_count], both)
        except ValueError as e:
            raise EncodingError(f"tokens: {e}") from None
    else:
        dictionary = _expanded(req, "dictionary", max_bytes)
        if len(dictionary) % 8:
            raise EncodingError(f"dictionary: {len(dictionary)} bytes is not a whole number of uint64 keys")
        keys = np.frombuffer(dictionary, dtype="<u8").astype(np.uint64, copy=False)
    n = keys.shape[0]
    raw_values = _expanded(req, "values", max_bytes)
    if raw_values:
        if len(raw_values) != 4 * n:
            raise EncodingError(f"values: {len(raw_values)} bytes for {n} dictionary entries")
        values = np.frombuffer(raw_values, dtype="<f4").astype(np.float32, copy=False)
        if not np.isfinite(values).all():
            raise EncodingError("values: non-finite feature value")
    else:
        values = np.ones(n, dtype=np.float32)
    raw_fields = _expanded(req, "fields", max_bytes)
    if token_fields is not None:
        fields = token_fields
    elif raw_fields:
        try:
            fields = decode_runs(np.frombuffer(raw_fields, dtype=np.uint8), n, field_count)
        except ValueError as e:
            raise EncodingError(f"fields: {e}") from None
    else:
        fields = np.zeros(n, dtype=np.int32)
    return keys, values, fields


def _lists(req: EncodedRequest, max_bytes: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The context's and the items' index lists (checked against the dictionary later)."""
    unbounded = 1 << 62
    context = _expanded(req, "context", max_bytes)
    try:
        _, ctx = (
            decode_index_lists(np.frombuffer(context, dtype=np.uint8), 1, unbounded) if context else (None, np.zeros(0, np.int64))
        )
    except ValueError as e:
        raise EncodingError(f"context: {e}") from None
    try:
        offsets, indices = decode_index_lists(
            np.frombuffer(_expanded(req, "items", max_bytes), dtype=np.uint8), req.item_count, unbounded
        )
    except ValueError as e:
        raise EncodingError(f"items: {e}") from None
    return ctx, offsets, indices
