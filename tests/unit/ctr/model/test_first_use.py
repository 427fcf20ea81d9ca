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
    got = first_use_order(req.context, req.item_indices, req.keys.shape[0])
    want = first_use_order_reference(req.context, req.item_indices, req.keys.shape[0])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    order, context, indices = got
    assert order.shape[0] < req.keys.shape[0]  # some entries are named by no feature
    np.testing.assert_array_equal(order[indices], req.item_indices)  # each feature names the same entry
    np.testing.assert_array_equal(order[context], req.context)


def test_an_empty_request_renumbers_to_nothing() -> None:
    empty = np.zeros(0, np.int64)
    order, context, indices = first_use_order(empty, empty, 5)
    assert order.shape == context.shape == indices.shape == (0,)


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
    order, _, _ = first_use_order(req.context, req.item_indices, req.keys.shape[0])
    r = in_first_use_order(req)
    np.testing.assert_array_equal(r.keys, req.keys[order])
    again = np.ascontiguousarray(rows[order])  # the rows a lookup of r.keys returns

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
