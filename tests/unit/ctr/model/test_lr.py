import numpy as np

from ctr.data.quality import auc, logloss
from ctr.model.lr import lr_score_items, lr_score_items_reference


def _csr(rng, n=64, nnz=8, vocab=30):
    counts = rng.integers(0, nnz, n)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    index = rng.integers(0, vocab, offsets[-1]).astype(np.int64)
    values = rng.random(offsets[-1]).astype(np.float32)
    return offsets, index, values


def test_score_items_matches_reference():
    rng = np.random.default_rng(4)
    offsets, index, _ = _csr(rng, n=200)
    contrib = rng.normal(size=30).astype(np.float32)
    ctx = np.array([1, 4, 7], dtype=np.int64)
    np.testing.assert_allclose(
        lr_score_items(ctx, offsets, index, contrib, -0.5),
        lr_score_items_reference(ctx, offsets, index, contrib, -0.5),
        rtol=1e-5,
        atol=1e-6,
    )


def test_auc_and_logloss():
    assert auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == 0.75
    assert auc([0, 1], [0.5, 0.5]) == 0.5
    assert np.isnan(auc([1, 1], [0.2, 0.3]))
    assert np.isclose(logloss([1, 0], [0.5, 0.5]), np.log(2))
