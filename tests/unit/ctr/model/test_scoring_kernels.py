"""The prediction service's FM and FFM kernels against the papers' formula
(ctr.model.factorization.logit_reference), each item scored as one example: the context's
features followed by the item's."""

from __future__ import annotations

import numpy as np
import pytest

from ctr.format.located import rows_as_tables
from ctr.model.factorization import logit_reference
from ctr.model.ffm import ffm_score_items
from ctr.model.fm import fm_score_items


def reference_scores(kind: str, context, offsets, indices, x, fields, rows, k: int, bias: float, norm: bool):
    w = rows[:, :1].astype(np.float64)
    v = rows[:, 1:].astype(np.float64)
    out = []
    for a, b in zip(offsets[:-1], offsets[1:], strict=True):
        u = np.concatenate([context, indices[a:b]])
        out.append(logit_reference(kind, u, fields[u], x[u], w, v, bias, k, norm))
    return 1.0 / (1.0 + np.exp(-np.array(out)))


def a_request(seed: int, n_fields: int, width: int, items: int):
    """A dictionary of 90 entries over `n_fields` fields (some shared by the context and the
    items), items with 0 to 12 features (a feature may repeat), random values."""
    rng = np.random.default_rng(seed)
    n = 90
    rows = rng.normal(0, 0.4, size=(n, 1 + width)).astype(np.float32)
    x = rng.choice([1.0, 1.0, 0.5, 2.5, -1.5], n).astype(np.float32)
    fields = rng.integers(0, n_fields, n).astype(np.int32)
    context = np.sort(rng.choice(n, 9, replace=False)).astype(np.int64)
    sizes = rng.integers(0, 13, items)
    sizes[0] = 0  # an item with the context alone
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    indices = np.sort(rng.integers(0, n, offsets[-1])).astype(np.int64)  # ascending, repeats allowed
    return context, offsets, indices, x, fields, rows


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_ffm_grouped_by_field_equals_the_pairwise_formula(seed: int, norm: bool) -> None:
    n_fields, k = 7, 3
    context, offsets, indices, x, fields, rows = a_request(seed, n_fields, n_fields * k, items=25)
    got = ffm_score_items(context, offsets, indices, x, fields, rows_as_tables(rows), 1, k, -0.2, norm)
    want = reference_scores("ffm", context, offsets, indices, x, fields, rows, k, -0.2, norm)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_ffm_without_context_and_with_one_field() -> None:
    k = 2
    context, offsets, indices, x, fields, rows = a_request(9, 1, k, items=10)
    fields[:] = 0
    empty = np.zeros(0, dtype=np.int64)
    got = ffm_score_items(empty, offsets, indices, x, fields, rows_as_tables(rows), 1, k, 0.3, True)
    want = reference_scores("ffm", empty, offsets, indices, x, fields, rows, k, 0.3, True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("norm", [True, False])
def test_fm_score_items_equals_the_formula(norm: bool) -> None:
    k = 4
    context, offsets, indices, x, fields, rows = a_request(5, 3, k, items=25)
    got = fm_score_items(context, offsets, indices, x, rows, 1, k, 0.1, norm)
    want = reference_scores("fm", context, offsets, indices, x, fields, rows, k, 0.1, norm)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
