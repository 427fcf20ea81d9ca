import numpy as np
import pytest

from ctr.format.varint import decode_sorted_keys, encode_sorted_keys
from serving.client import RequestEncoder
from serving.client.predict_client import Value
from serving.request.encoding import EncodedRequest, EncodingError, decode


def test_sorted_keys_round_trip():
    keys = np.unique(np.random.default_rng(0).integers(1, 2**64 - 1, 500, dtype=np.uint64))
    assert (decode_sorted_keys(encode_sorted_keys(keys), keys.shape[0]) == keys).all()
    with pytest.raises(ValueError):
        decode_sorted_keys(encode_sorted_keys(keys)[:-1], keys.shape[0])


def test_request_round_trip_and_sharing():
    enc = RequestEncoder()
    items: list[dict[str, Value]] = [{"item": str(i), "cat": str(i % 3), "w": ("k", 0.5)} for i in range(50)]
    req = enc.encode(items, {"user": "u1", "hour": "13"})
    d = decode(req)
    assert req.item_count == 50 and d.item_offsets.shape[0] == 51
    assert d.context.shape[0] == 2
    assert (np.diff(d.item_offsets) == 3).all()
    # unique entries only: 50 items + 3 categories + 1 weighted + 2 context
    assert d.keys.shape[0] == 56
    assert sorted(set(d.values.tolist())) == [0.5, 1.0]


def _req():
    return RequestEncoder().encode([{"a": "1", "b": "2"}, {"a": "3", "b": "2"}], {"u": "x"})


@pytest.mark.parametrize(
    "mutate,field",
    [
        (lambda r: EncodedRequest(r.item_count, r.dictionary[:-3], r.values, r.context, r.items), "dictionary"),
        (lambda r: EncodedRequest(r.item_count, r.dictionary, r.values, r.context, r.items[:-1]), "items"),
        (lambda r: EncodedRequest(r.item_count + 1, r.dictionary, r.values, r.context, r.items), "items"),
        (lambda r: EncodedRequest(r.item_count, r.dictionary, b"\0\0\0", r.context, r.items), "values"),
        (lambda r: EncodedRequest(r.item_count, r.dictionary, r.values, b"\x05\x01", r.items), "context"),
        (lambda r: EncodedRequest(r.item_count, r.dictionary[:8], r.values, r.context, r.items), "range"),
    ],
)
def test_inconsistent_requests_are_rejected_with_the_field(mutate, field):
    with pytest.raises(EncodingError, match=field):
        decode(mutate(_req()))


def test_compressed_requests_decode_concurrently():
    """zstandard's decompressor objects are not thread-safe: one shared by the gRPC worker
    threads crashed the server (SIGSEGV) under 4 concurrent clients."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    fields = [f"f{i}" for i in range(8)]
    enc = RequestEncoder(None, fields)
    rng = np.random.default_rng(0)
    req = enc.encode_columns({f: rng.integers(1, 1 << 30, (200, 5)) for f in fields}, compress=True)
    assert req.compression == 1
    from serving.request.encoding import field_hash_ids

    hashes = field_hash_ids(tuple(fields))
    want = decode(req, len(fields), hashes).keys

    def many(_: int) -> bool:
        return all(np.array_equal(decode(req, len(fields), hashes).keys, want) for _ in range(200))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(many, range(4)))


def test_token_hashing_split_over_two_threads_gives_the_same_keys():
    import numpy as np

    from serving.request.encoding import field_hash_ids
    from serving.scoring.parallel import Splitter

    fields = [f"f{i}" for i in range(9)]
    enc = RequestEncoder(None, fields)
    rng = np.random.default_rng(1)
    req = enc.encode_columns({f: rng.integers(1, 1 << 30, (50, 3)) for f in fields})
    hashes = field_hash_ids(tuple(fields))
    alone = decode(req, len(fields), hashes)
    pair = Splitter(2)
    split = decode(req, len(fields), hashes, both=pair.both)
    pair.close()
    assert np.array_equal(alone.keys, split.keys) and np.array_equal(alone.fields, split.fields)
    assert np.array_equal(alone.item_indices, split.item_indices) and np.array_equal(alone.context, split.context)
