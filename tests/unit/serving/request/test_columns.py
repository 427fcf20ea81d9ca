"""Columnar request encoding: every item decodes back to exactly its features."""

from __future__ import annotations

import numba as nb
import numpy as np
import pytest
import zstandard
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctr.data.formats import bucket_numeric
from ctr.data.hashing import field_id, hash_tokens_reference
from ctr.format.varint import unzigzag_one
from serving.client import RequestEncoder
from serving.client.predict_client import Value
from serving.request.columns import column_keys, hash_int_tokens
from serving.request.encoding import MIN_ZSTD_SAVING, decode, group_indices, group_indices_reference
from serving.request.token_dictionary import decode_blocks, encode_blocks, encode_blocks_reference, keys_of_blocks
from serving.request.token_kernels import (
    expand_columns,
    expand_columns_reference,
    ordered_unique,
    ordered_unique_reference,
    sorted_groups,
)

FIELDS = ["user", "hour", "item", "tags", "price", "brand"]


def features_of(d, indices) -> list[tuple[int, int, float]]:
    return sorted((int(d.keys[i]), int(d.fields[i]), float(d.values[i])) for i in indices)


def expected(name: str, raw: object, numeric: bool) -> tuple[int, int, float]:
    token = bucket_numeric(repr(float(raw)), name) if numeric else str(raw)  # type: ignore[arg-type]
    assert token is not None  # the values here are numbers, no missing markers
    return (hash_tokens_reference([field_id(name)], [token])[0], FIELDS.index(name), 1.0)


FIELD_IDS = np.array([field_id(f) for f in FIELDS], dtype=np.uint32)


@pytest.mark.parametrize(
    ("tokens", "compress", "top", "strings"),
    [(True, True, 10**12, False), (True, True, 10**12, True), (True, False, 2**62, False), (False, False, 10**12, True)],
)
def test_columns_decode_back_to_each_items_exact_features(tokens, compress, top, strings):
    """Token dictionaries (zstd or not) and hashed keys. With no string column the tokens
    take the one-sort path; string keys, or ids too large to pack, the general one."""
    from ctr.data.schema import FeatureSchema

    rng = np.random.default_rng(3)
    n = 37
    items = {
        "item": rng.integers(-top, top, n),
        "tags": rng.integers(-5, 50, (n, 4)),
        "price": rng.choice([0.0, 1.5, 2.0, 3.0, 250.0, -7.25], n),
        "brand": np.array(["acme", "", "ünï", "x"] * 10)[:n],
        "unknown": np.arange(n),  # not a model field: dropped
    }
    context = {"user": np.array(["u-1"]), "hour": np.array([13, 14])}
    if not strings:
        items["brand"] = np.array([""] * n)  # every value missing: no string key at all
    enc = RequestEncoder(FeatureSchema(numeric=("price",)), FIELDS)
    req = enc.encode_columns(items, context, compress=compress, tokens=tokens)
    assert bool(req.tokens) == tokens and req.compression == int(compress)
    d = decode(req, len(FIELDS), FIELD_IDS)
    want_ctx = [expected("user", "u-1", False), expected("hour", 13, False), expected("hour", 14, False)]
    assert features_of(d, d.context) == sorted(want_ctx)
    for i in range(n):
        want = [expected("item", items["item"][i], False), expected("price", items["price"][i], True)]
        want += [expected("tags", t, False) for t in items["tags"][i]]
        if items["brand"][i] != "":  # an empty string is a missing value
            want.append(expected("brand", items["brand"][i], False))
        got = features_of(d, d.item_indices[d.item_offsets[i] : d.item_offsets[i + 1]])
        assert got == sorted(want), i  # repeats count twice, as in training


def test_requests_go_compressed_by_default_only_when_zstd_saves_an_eighth():
    """Ids from small vocabularies repeat their gaps and compress; unique random ids in
    varint gaps barely do, and go raw. Both decode to the same features as forced zstd."""
    rng = np.random.default_rng(5)
    enc = RequestEncoder(None, FIELDS)
    shapes = {"item": (200,), "tags": (200, 8)}
    for vocab, compressed in ((50, True), (2**62, False)):
        items = {f: rng.integers(0, vocab, shape) for f, shape in shapes.items()}
        auto, forced = enc.encode_columns(items, {"hour": 3}), enc.encode_columns(items, {"hour": 3}, compress=True)
        raw = enc.encode_columns(items, {"hour": 3}, compress=False)
        assert auto.compression == int(compressed) and forced.compression == 1 and raw.compression == 0
        assert (forced.nbytes < (1 - MIN_ZSTD_SAVING) * raw.nbytes) == compressed
        a, b = decode(auto, len(FIELDS), FIELD_IDS), decode(forced, len(FIELDS), FIELD_IDS)
        np.testing.assert_array_equal(a.keys, b.keys)
        np.testing.assert_array_equal(a.item_indices, b.item_indices)


def test_dict_requests_decode_back_to_each_items_exact_features():
    enc = RequestEncoder(None, FIELDS)
    items: list[dict[str, Value]] = [{"item": str(i), "brand": ["a", "b"][i % 2], "tags": ("t7", 0.5)} for i in range(20)]
    d = decode(enc.encode(items, {"user": "u9"}))
    assert features_of(d, d.context) == [expected("user", "u9", False)]
    for i, item in enumerate(items):
        want = [expected("item", item["item"], False), expected("brand", item["brand"], False)]
        want.append((hash_tokens_reference([field_id("tags")], ["t7"])[0], FIELDS.index("tags"), 0.5))
        got = features_of(d, d.item_indices[d.item_offsets[i] : d.item_offsets[i + 1]])
        assert got == sorted(want)


EDGE_VALUES = [0, 1, 9, 10, 99, 100, 999, 1000, 9999, 10000, 99999999, 100000000, 10**12 - 1, 10**12, 10**16, 10**18]
EDGE_VALUES += [2**63 - 1, -1, -9, -10, -999, -1000, -9999, -10000, -(10**16), -(2**63)]
# around the vectorized path's bound (magnitude < 2**32) and its ten digits
SMALL_EDGES = [999_999_999, 1_000_000_000, 2**32 - 1, 2**32, -(2**32 - 1), -(2**32), 4_000_000_000]
EDGE_VALUES += SMALL_EDGES


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1) | st.sampled_from(EDGE_VALUES), max_size=50), st.sampled_from([0, 98, 118]))
@example(EDGE_VALUES, 0)
def test_int_token_hash_equals_the_reference(values, prefix):
    keys = hash_int_tokens(np.asarray(values, dtype=np.int64), prefix, np.uint32(field_id("f")))
    head = chr(prefix) if prefix else ""
    assert keys.tolist() == hash_tokens_reference([field_id("f")] * len(values), [f"{head}{v}" for v in values])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(-(2**32), 2**32) | st.integers(-(2**63), 2**63 - 1) | st.sampled_from(SMALL_EDGES), max_size=3000),
    st.sampled_from([0, 98]),
)
def test_token_blocks_hash_as_the_reference(values, prefix):
    """keys_of_blocks over decoded blocks: the small-magnitude lanes and the general path
    (a block's codes ascend, so it switches once) give each token's text hash."""
    tokens = sorted(set(values), key=lambda v: 2 * v if v >= 0 else -2 * v - 1)  # zigzag order
    codes = [2 * v if v >= 0 else -2 * v - 1 for v in tokens]
    blob = encode_blocks_reference([(1, 1, prefix, codes)])
    field, kind, pre, bounds, zs = decode_blocks(np.frombuffer(blob, dtype=np.uint8), 1 << 20)
    keys, fields = keys_of_blocks(field, kind, pre, bounds, zs, np.array([7, field_id("f")], dtype=np.uint32))
    head = chr(prefix) if prefix else ""
    assert keys.tolist() == hash_tokens_reference([field_id("f")] * len(tokens), [f"{head}{v}" for v in tokens])
    assert fields.tolist() == [1] * len(tokens)


def test_int_token_hash_takes_both_paths_in_one_column():
    """Chunks of small magnitudes go to the lanes, a chunk holding a large one does not."""
    rng = np.random.default_rng(3)
    values = rng.integers(-(2**31), 2**31, 5000)
    values[4000] = 2**40
    keys = hash_int_tokens(values, 0, np.uint32(field_id("f")))
    assert keys.tolist() == hash_tokens_reference([field_id("f")] * len(values), [str(v) for v in values.tolist()])


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 6), st.lists(st.tuples(st.integers(-1, 5), st.integers(0, 30)), max_size=80))
def test_grouping_equals_lexsort(items, pairs):
    pairs = [(min(o, items - 1), i) for o, i in pairs]
    owner = np.asarray([o for o, _ in pairs], dtype=np.int64)
    idx = np.asarray([i for _, i in pairs], dtype=np.int64)
    got, want = group_indices(owner, idx, items), group_indices_reference(owner, idx, items)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


block_lists = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.sampled_from([0, 1]),
        st.sampled_from([0, 98, 118]),
        st.sets(st.integers(0, 2**64 - 1), max_size=30),
    ),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(block_lists)
def test_token_blocks_encode_as_the_reference_and_decode_back(blocks):
    plain = [(f, k, p if k else 0, sorted(vals)) for f, k, p, vals in blocks]
    values = np.array([v for *_, vals in plain for v in vals], dtype=np.uint64)
    bounds = np.cumsum([0] + [len(vals) for *_, vals in plain]).astype(np.int64)
    cols = [np.array([b[i] for b in plain], dtype=np.int64) for i in range(3)]
    got = bytes(encode_blocks(cols[0], cols[1], cols[2], bounds, values))  # type: ignore[call-arg, arg-type]
    assert got == encode_blocks_reference(plain)
    field, kind, prefix, b2, v2 = decode_blocks(np.frombuffer(got, dtype=np.uint8), 1 << 20)
    assert (field.tolist(), kind.tolist(), prefix.tolist()) == tuple(c.tolist() for c in cols)
    assert b2.tolist() == bounds.tolist() and v2.tolist() == values.tolist()


@pytest.mark.parametrize(
    ("blob", "why"),
    [
        (encode_blocks_reference([(0, 1, 0, [5, 9])])[:-1], "truncated"),
        (encode_blocks_reference([(0, 2, 0, [5])]), "unknown block kind"),
        (encode_blocks_reference([(0, 1, 256, [5])]), "prefix above 255"),
        (encode_blocks_reference([(0, 1, 0, [5])]) + b"\x00", "trailing bytes"),
        (encode_blocks_reference([(0, 0, 0, [5])])[:-3], "truncated keys"),
        (bytes([1, 0, 1, 0, 2, 5, 0]), "not strictly increasing"),
        (bytes([1, 0, 1, 0, 100, 5]), "more entries than"),
    ],
)
def test_malformed_token_blocks_are_refused_with_the_reason(blob, why):
    with pytest.raises(ValueError, match=why):
        decode_blocks(np.frombuffer(blob, dtype=np.uint8), 1 << 20)


def test_a_token_request_with_a_field_beyond_the_model_or_a_bomb_is_invalid():
    from serving.request.encoding import EncodedRequest, EncodingError

    tokens = encode_blocks_reference([(9, 1, 0, [1, 2])])
    req = EncodedRequest(1, b"", b"", b"", bytes([0]), b"", tokens)
    with pytest.raises(EncodingError, match="tokens: block 0: field index 9"):
        decode(req, len(FIELDS), FIELD_IDS)
    for declared in (True, False):  # a frame that declares its size, and one that does not
        bomb = zstandard.ZstdCompressor(write_content_size=declared).compress(b"\0" * (1 << 20))
        with pytest.raises(EncodingError, match="items: not a zstd frame of at most"):
            decode(EncodedRequest(1, b"", b"", b"", bomb, b"", b"", 1), len(FIELDS), FIELD_IDS, max_bytes=1 << 16)
    with pytest.raises(EncodingError, match="either tokens or dictionary"):
        decode(EncodedRequest(1, b"\0" * 8, b"", b"", bytes([0]), b"", tokens), len(FIELDS), FIELD_IDS)


column_sets = st.lists(
    st.tuples(
        st.integers(0, 60),  # field
        st.integers(0, 3),  # values per item, 0: the context
        st.booleans(),  # numeric: sub codes per value
        st.sampled_from([3, 1000, 2**40, 2**62]),  # value range
        st.integers(0, 2**32),  # seed
    ),
    max_size=6,
)


def columns_of(cols, items) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(cols[0][4] if cols else 0)
    sizes = [items * per if per else rng.integers(0, 4) for _, per, _, _, _ in cols]
    tokens = np.concatenate(
        [rng.integers(-top, top, n) for (_, _, _, top, _), n in zip(cols, sizes, strict=True)] + [np.zeros(0, np.int64)]
    )
    numeric = any(num for _, _, num, _, _ in cols)
    subs = [rng.integers(1, 3, n) if num else np.zeros(n, np.int64) for (_, _, num, _, _), n in zip(cols, sizes, strict=True)]
    sub = np.concatenate([*subs, np.zeros(0)]).astype(np.uint8) if numeric else np.zeros(0, np.uint8)
    start = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    code = np.asarray([f * 4 for f, _, _, _, _ in cols], dtype=np.int64)
    per = np.asarray([p for _, p, _, _, _ in cols], dtype=np.int64)
    return tokens.astype(np.int64), sub, start, code, per


@settings(max_examples=200, deadline=None)
@given(column_sets, st.integers(1, 5))
def test_expanded_columns_equal_the_reference(cols, items):
    args = columns_of(cols, items)
    for got, want in zip(expand_columns(*args), expand_columns_reference(*args), strict=True):
        np.testing.assert_array_equal(got, want)


@settings(max_examples=200, deadline=None)
@given(column_sets, st.integers(1, 5))
def test_sorted_groups_equal_unique_then_grouping(cols, items):
    args = columns_of(cols, items)
    got = sorted_groups(*args, items)
    code, z, owner = expand_columns_reference(*args)
    if code.shape[0] == 0:
        assert got is None
        return
    code_bits = int(args[3].max() + 3).bit_length()
    fits = max(1, int(z.max()).bit_length()) + code_bits + (items + 1).bit_length() <= 64
    if not fits:
        assert got is None
        return
    assert got is not None
    pairs = np.unique(np.stack([code.astype(np.uint64), z], axis=1), axis=0, return_inverse=True)
    want_bounds, want_grouped = group_indices_reference(owner, pairs[1].reshape(-1).astype(np.int64), items)
    np.testing.assert_array_equal(got[0], pairs[0][:, 0].astype(np.int64))
    np.testing.assert_array_equal(got[1], pairs[0][:, 1])
    np.testing.assert_array_equal(got[2], want_bounds)
    np.testing.assert_array_equal(got[3], want_grouped)


@nb.njit
def _unzigzag(z):
    out = np.empty(z.shape[0], dtype=np.int64)
    for i in range(z.shape[0]):
        out[i] = unzigzag_one(z[i])
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=50))
def test_unzigzag_inverts_zigzag(values):
    z = np.asarray(values, dtype=np.uint64)
    t = _unzigzag(z)
    np.testing.assert_array_equal(((t << 1) ^ (t >> 63)).astype(np.uint64), z)
    np.testing.assert_array_equal(t, (z >> np.uint64(1)).astype(np.int64) ^ -(z & np.uint64(1)).astype(np.int64))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 2**40)), max_size=300))
def test_ordered_unique_equals_the_reference(pairs):
    code = np.array([c for c, _ in pairs], dtype=np.int64)
    z = np.array([v for _, v in pairs], dtype=np.uint64)
    got, want = ordered_unique(code, z, 48), ordered_unique_reference(code, z, 48)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_a_float_column_of_a_categorical_field_is_refused_naming_it() -> None:
    """A DataFrame's columns: which of thirty was the float one, and what to send instead."""
    with pytest.raises(ValueError, match=r"column 'C1': dtype float64 .*whole: send them as integers"):
        column_keys(np.array([1005.0, np.nan]), "C1", False)
    with pytest.raises(ValueError, match=r"column 'price': dtype float64 .*tokens: send them as the text"):
        column_keys(np.array([0.5, 2.0]), "price", False)
