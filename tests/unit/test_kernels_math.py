import numpy as np

from ctr.lr import lr_gradients, lr_gradients_reference, lr_logits, lr_logits_reference
from ctr.metrics import auc, logloss
from serving.kernels import lr_score_items, lr_score_items_reference


def _csr(rng, n=64, nnz=8, vocab=30):
    counts = rng.integers(0, nnz, n)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    index = rng.integers(0, vocab, offsets[-1]).astype(np.int64)
    values = rng.random(offsets[-1]).astype(np.float32)
    return offsets, index, values


def test_lr_kernels_match_references():
    rng = np.random.default_rng(3)
    offsets, index, values = _csr(rng)
    w = rng.normal(size=30).astype(np.float32)
    np.testing.assert_allclose(
        lr_logits(offsets, index, values, w, 0.3), lr_logits_reference(offsets, index, values, w, 0.3), rtol=1e-5, atol=1e-5
    )
    probs = rng.random(64).astype(np.float32)
    labels = (rng.random(64) > 0.5).astype(np.float32)
    g, gb = lr_gradients(offsets, index, values, probs, labels, 30)
    g_ref, gb_ref = lr_gradients_reference(offsets, index, values, probs, labels, 30)
    np.testing.assert_allclose(g, g_ref, rtol=1e-4, atol=1e-5)
    assert np.isclose(gb, gb_ref, atol=1e-4)


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
