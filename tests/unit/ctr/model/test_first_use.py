"""A request renumbered in first-use order (ctr.model.first_use): the kernel against its numpy
reference, and every kernel that reads a request's rows gives bit-identical answers on the
renumbered request, whose rows come in the new order."""

from __future__ import annotations

import numpy as np
import pytest

from ctr.model.dnn import deep_inputs
from ctr.model.first_use import first_use_order, first_use_order_reference, in_first_use_order
from ctr.model.fm import fm_score_items
from ctr.model.partial_sums import partial_sums
from serving.request.encoding import DecodedRequest

K, FIELDS = 4, 6


def a_request(seed: int, n: int = 120, context: int = 7, items: int = 30) -> tuple[DecodedRequest, np.ndarray]:
    """A dictionary of n entries, some used by no feature, some by the context and items
    alike; items with 0 to 15 features, ascending, repeats allowed; and its rows."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 16, items)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    req = DecodedRequest(
        keys=rng.integers(1, 2**63, n, dtype=np.uint64),
        values=rng.choice([1.0, 0.5, 2.5, -1.5], n).astype(np.float32),
        fields=rng.integers(0, FIELDS, n).astype(np.int32),
        context=np.sort(rng.choice(n, min(context, n), replace=False)).astype(np.int64),
        item_offsets=offsets,
        item_indices=np.sort(rng.integers(0, n, offsets[-1])).astype(np.int64),
    )
    rows = rng.normal(0, 0.4, size=(n, 1 + K)).astype(np.float32)
    return req, rows


@pytest.mark.parametrize("seed", range(6))
def test_the_kernel_equals_its_reference(seed: int) -> None:
    req, _ = a_request(seed, context=seed)  # seed 0: no context
    args = (req.context, req.item_indices, req.keys, req.values, req.fields)
    got = first_use_order(*args)
    for g, w in zip(got, first_use_order_reference(*args), strict=True):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(g, w)
    keys, _, _, context, indices = got
    assert keys.shape[0] < req.keys.shape[0]  # some entries are named by no feature
    np.testing.assert_array_equal(keys[indices], req.keys[req.item_indices])  # each feature names the same entry
    np.testing.assert_array_equal(keys[context], req.keys[req.context])


def test_an_empty_request_renumbers_to_nothing() -> None:
    req, _ = a_request(2, n=5)
    empty = np.zeros(0, np.int64)
    got = first_use_order(empty, empty, req.keys, req.values, req.fields)
    assert all(a.shape == (0,) for a in got)


def test_the_rows_an_item_reads_come_in_order() -> None:
    """Items whose features no other item names, scattered over the dictionary, read the
    renumbered rows one after another."""
    req, _ = a_request(1, n=400)
    rng = np.random.default_rng(7)
    blocks = np.sort(rng.choice(np.arange(3, 400), 200, replace=False)).reshape(20, 10)
    scattered = blocks[rng.permutation(20)].reshape(-1).astype(np.int64)  # ascending inside each item
    offsets = np.arange(0, 201, 10, dtype=np.int64)
    renumbered = in_first_use_order(
        DecodedRequest(req.keys, req.values, req.fields, np.arange(3, dtype=np.int64), offsets, scattered)
    )
    np.testing.assert_array_equal(renumbered.context, np.arange(3))
    np.testing.assert_array_equal(renumbered.item_indices, np.arange(3, 203))
    np.testing.assert_array_equal(renumbered.keys, req.keys[np.concatenate([np.arange(3), scattered])])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("norm", [True, False])
def test_scores_are_bit_identical_on_the_renumbered_request(seed: int, norm: bool) -> None:
    req, rows = a_request(seed)
    r = in_first_use_order(req)
    row_of = {int(key): rows[j] for j, key in enumerate(req.keys)}
    again = np.array([row_of[int(key)] for key in r.keys])  # the rows a lookup of r.keys returns

    def fm(q, rw):
        return fm_score_items(q.context, q.item_offsets, q.item_indices, q.values, rw, 1, K, -0.3, norm)

    def deep(q, rw):
        return deep_inputs(q.context, q.item_offsets, q.item_indices, q.values, q.fields, rw, 1, K, FIELDS, 0.1, True, norm)

    def sums(q, rw):
        return partial_sums(q.context, q.item_offsets, q.item_indices, q.values, rw, 1, K)

    assert np.ptp(fm(req, rows)) > 0
    np.testing.assert_array_equal(fm(r, again), fm(req, rows))
    for got, want in zip(deep(r, again), deep(req, rows), strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(sums(r, again), sums(req, rows))
