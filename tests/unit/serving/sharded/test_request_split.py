"""The router's split of a request by serving shard (serving.sharded.request_split) equals the plain
numpy one with masks, and each shard's part, mapped back through its keys, is exactly the
request's features that the shard owns, in order."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctr.routing import owner_reference
from serving.sharded.request_split import split_request_features, split_request_keys

I64 = npt.NDArray[np.int64]
Request = tuple[npt.NDArray[np.uint64], I64, I64, I64]  # keys, context, item offsets, item indices


def split_reference(
    keys: npt.NDArray[np.uint64], shard_files: int, shards: int, context: I64, offsets: I64, indices: I64
) -> list[tuple[list[int], list[int], list[int], list[int]]]:
    """Per serving shard: its key positions, its context and item indices as positions in
    its keys, and its per-item offsets."""
    shard = np.array([owner_reference(int(k), shard_files) % shards for k in keys], dtype=np.int64)
    local = np.zeros(keys.shape[0], dtype=np.int64)
    item_of = np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets))
    out = []
    for j in range(shards):
        mine = np.flatnonzero(shard == j)
        local[mine] = np.arange(mine.shape[0])
        sel = shard[indices] == j
        counts = np.bincount(item_of[sel], minlength=offsets.shape[0] - 1)
        out.append(
            (
                mine.tolist(),
                local[context[shard[context] == j]].tolist(),
                local[indices[sel]].tolist(),
                np.concatenate([[0], np.cumsum(counts)]).tolist(),
            )
        )
    return out


@st.composite
def request(draw: st.DrawFn) -> Request:
    n = draw(st.integers(0, 60))
    keys = np.array(draw(st.lists(st.integers(1, 2**64 - 1), min_size=n, max_size=n, unique=True)), dtype=np.uint64)
    most = 8 if n else 0  # features index the keys: none without keys
    feature = st.integers(0, max(0, n - 1))
    context = np.array(draw(st.lists(feature, max_size=most + 2 * bool(n))), dtype=np.int64)
    items = draw(st.lists(st.lists(feature, max_size=most), max_size=12))
    offsets = np.concatenate([[0], np.cumsum([len(i) for i in items])]).astype(np.int64)
    indices = np.array([f for i in items for f in i], dtype=np.int64)
    return keys, context, offsets, indices


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(request(), st.sampled_from([1, 2, 3, 4, 7, 8, 64]), st.sampled_from([1, 2, 3, 4]))
def test_the_split_equals_the_reference(req, shard_files, shards) -> None:
    keys, context, offsets, indices = req
    shards = min(shards, shard_files)
    split = split_request_keys(keys, shard_files, shards)
    feats = split_request_features(split, shards, context, offsets, indices)
    want = split_reference(keys, shard_files, shards, context, offsets, indices)
    kb, cb, ib = split.bounds, feats.context_bounds, feats.index_bounds
    for j, (mine, ctx, idx, offs) in enumerate(want):
        assert split.order[kb[j] : kb[j + 1]].tolist() == mine
        assert feats.context[cb[j] : cb[j + 1]].tolist() == ctx
        assert feats.indices[ib[j] : ib[j + 1]].tolist() == idx
        assert feats.offsets[j].tolist() == offs
        # mapped back through the shard's keys, item i's part is the item's features it owns
        part = feats.indices[ib[j] : ib[j + 1]]
        for i in range(offsets.shape[0] - 1):
            back = [mine[x] for x in part[feats.offsets[j, i] : feats.offsets[j, i + 1]]]
            assert back == [f for f in indices[offsets[i] : offsets[i + 1]] if split.shard[f] == j]
    assert kb[-1] == keys.shape[0] and cb[-1] == context.shape[0] and ib[-1] == indices.shape[0]
