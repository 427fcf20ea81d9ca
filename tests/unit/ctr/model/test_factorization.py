"""LR/FM/FFM and the DNN sparse-side kernels against plain references and finite differences."""

import numpy as np
import pytest

from ctr.model.dnn import deep_partials, deep_partials_reference, pool_fields, pool_fields_reference, train_deep_batch
from ctr.model.factorization import MODEL_CODES, batch_logloss_reference, logit_reference, logits, train_batch
from ctr.model.optim import PLAIN, OptimizerSpec, init_rows, plain_state

K, F, U = 3, 4, 12


def _batch(rng, n=16, per=5):
    counts = rng.integers(1, per + 1, n)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    nnz = int(offsets[-1])
    uidx = rng.integers(0, U, nnz).astype(np.int64)
    fields = (uidx % F).astype(np.int32)  # a key belongs to one field
    x = rng.uniform(0.5, 1.5, nnz).astype(np.float32)
    labels = (rng.random(n) < 0.4).astype(np.float32)
    return offsets, uidx, fields, x, labels


def _dv(model):
    return {"lr": 0, "fm": K, "ffm": F * K}[model]


@pytest.mark.parametrize("norm", [False, True], ids=["plain", "norm"])
@pytest.mark.parametrize("model", ["lr", "fm", "ffm"])
def test_logits_match_the_reference(model, norm):
    rng = np.random.default_rng(0)
    offsets, uidx, fields, x, _ = _batch(rng)
    w = rng.normal(size=(U, 1)).astype(np.float32)
    v = rng.normal(scale=0.3, size=(U, max(1, _dv(model)))).astype(np.float32)
    got = logits(MODEL_CODES[model], offsets, uidx, fields, x, w, v, 0.2, K, norm)
    ref = [
        logit_reference(model, uidx[a:b], fields[a:b], x[a:b], w.astype(np.float64), v.astype(np.float64), 0.2, K, norm)
        for a, b in zip(offsets[:-1], offsets[1:], strict=True)
    ]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("norm", [False, True], ids=["plain", "norm"])
@pytest.mark.parametrize("model", ["lr", "fm", "ffm"])
def test_batch_gradients_match_finite_differences(model, norm):
    rng = np.random.default_rng(1)
    offsets, uidx, fields, x, labels = _batch(rng)
    dv = _dv(model)
    w = rng.normal(scale=0.5, size=(U, 1))
    v = rng.normal(scale=0.3, size=(U, dv))
    p = PLAIN.params()
    _, gw, gv, gb = train_batch(
        MODEL_CODES[model],
        False,
        offsets,
        uidx,
        fields,
        x,
        labels,
        plain_state(w),
        p,
        plain_state(v),
        dv,
        p,
        plain_state(np.array([[0.1]])),
        p,
        K,
        norm,
    )

    def loss(w_, v_, b_):
        return batch_logloss_reference(model, offsets, uidx, fields, x, labels, w_, v_, b_, K, norm)

    eps = 1e-6
    for u in range(U):
        e = np.zeros_like(w)
        e[u, 0] = eps
        assert np.isclose(gw[u, 0], (loss(w + e, v, 0.1) - loss(w - e, v, 0.1)) / (2 * eps), atol=1e-6)
        for t in range(dv):
            e = np.zeros_like(v)
            e[u, t] = eps
            assert np.isclose(gv[u, t], (loss(w, v + e, 0.1) - loss(w, v - e, 0.1)) / (2 * eps), atol=1e-6)
    assert np.isclose(gb, (loss(w, v, 0.1 + eps) - loss(w, v, 0.1 - eps)) / (2 * eps), atol=1e-6)


@pytest.mark.parametrize("norm", [False, True], ids=["plain", "norm"])
@pytest.mark.parametrize("model", ["lr", "fm", "ffm"])
def test_a_sequential_batch_equals_batch_size_one(model, norm):
    rng = np.random.default_rng(2)
    offsets, uidx, fields, x, labels = _batch(rng, n=40)
    dv = max(1, _dv(model))
    ow = OptimizerSpec("ftrl", lr=0.5, l1=0.1, l2=1.0)
    ov = OptimizerSpec("adagrad", lr=0.2, init_std=0.1)
    ob = OptimizerSpec("ftrl", lr=0.5)
    keys = np.arange(1, U + 1, dtype=np.uint64)
    states = [
        init_rows(keys, ow.state_width(1), 1, ow.params()),
        init_rows(keys, ov.state_width(dv), dv, ov.params()),
        np.zeros((1, 2)),
    ]
    one = [s.copy() for s in states]
    code = MODEL_CODES[model]
    probs, *_ = train_batch(
        code,
        True,
        offsets,
        uidx,
        fields,
        x,
        labels,
        states[0],
        ow.params(),
        states[1],
        dv,
        ov.params(),
        states[2],
        ob.params(),
        K,
        norm,
    )
    single = []
    for e in range(40):
        a, b = offsets[e], offsets[e + 1]
        o = np.array([0, b - a], np.int64)
        p1, *_ = train_batch(
            code,
            True,
            o,
            uidx[a:b],
            fields[a:b],
            x[a:b],
            labels[e : e + 1],
            one[0],
            ow.params(),
            one[1],
            dv,
            ov.params(),
            one[2],
            ob.params(),
            K,
            norm,
        )
        single.append(p1[0])
    np.testing.assert_array_equal(probs, np.array(single, np.float32))
    for after, alone in zip(states, one, strict=True):
        np.testing.assert_array_equal(after, alone)


def test_pooling_matches_the_reference():
    rng = np.random.default_rng(3)
    offsets, uidx, fields, x, _ = _batch(rng)
    emb = rng.normal(size=(U, K)).astype(np.float32)
    np.testing.assert_allclose(
        pool_fields(offsets, uidx, fields, x, emb, F), pool_fields_reference(offsets, uidx, fields, x, emb, F), atol=1e-6
    )


@pytest.mark.parametrize("with_fm,norm", [(False, False), (True, False), (True, True)], ids=["wdl", "deepfm", "deepfm-norm"])
def test_deep_partials_match_the_reference(with_fm, norm):
    rng = np.random.default_rng(4)
    offsets, uidx, fields, x, _ = _batch(rng)
    emb = rng.normal(size=(U, K)).astype(np.float32)
    w = rng.normal(size=U).astype(np.float32)
    pooled = pool_fields(offsets, uidx, fields, x, emb, F)
    np.testing.assert_allclose(
        deep_partials(offsets, uidx, x, w, pooled, 0.3, with_fm, norm),
        deep_partials_reference(offsets, uidx, x, w, pooled, 0.3, with_fm, norm),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("with_fm,norm", [(False, False), (True, False), (True, True)], ids=["wdl", "deepfm", "deepfm-norm"])
def test_deep_sparse_gradients_match_finite_differences(with_fm, norm):
    """With the MLP linearized (out + jac . (pooled - pooled0)), the kernel's row gradients
    are those of the whole logit."""
    rng = np.random.default_rng(4)
    offsets, uidx, fields, x, labels = _batch(rng)
    w = rng.normal(scale=0.5, size=(U, 1))
    emb = rng.normal(scale=0.3, size=(U, K))
    n = labels.shape[0]
    mlp_out = rng.normal(size=n).astype(np.float32)
    jac = rng.normal(scale=0.5, size=(n, F, K)).astype(np.float32)
    p = PLAIN.params()
    pooled0 = _pool64(offsets, uidx, fields, x, emb)

    def loss(w_, e_, b_):
        pooled = _pool64(offsets, uidx, fields, x, e_)
        lin = np.array([np.sum(w_[uidx[a:b], 0] * x[a:b]) for a, b in zip(offsets[:-1], offsets[1:], strict=True)])
        z = b_ + lin + mlp_out + (jac * (pooled - pooled0)).sum(axis=(1, 2))
        if with_fm:
            s = pooled.sum(axis=1)
            sq = np.array([np.sum(x[a:b].astype(np.float64) ** 2) for a, b in zip(offsets[:-1], offsets[1:], strict=True)])
            r = 1.0 / sq if norm else 1.0
            z = z + r * 0.5 * (s * s - (pooled * pooled).sum(axis=1)).sum(axis=1)
        return float(np.sum(np.logaddexp(0, z) - labels.astype(np.float64) * z))

    _, _, gw, ge, gb = train_deep_batch(
        False,
        with_fm,
        norm,
        offsets,
        uidx,
        fields,
        x,
        labels,
        mlp_out,
        jac,
        plain_state(w),
        p,
        plain_state(emb),
        p,
        plain_state(np.array([[0.1]])),
        p,
    )
    eps = 1e-6
    for u in range(U):
        d = np.zeros_like(w)
        d[u, 0] = eps
        assert np.isclose(gw[u, 0], (loss(w + d, emb, 0.1) - loss(w - d, emb, 0.1)) / (2 * eps), atol=2e-5)
        for t in range(K):
            d = np.zeros_like(emb)
            d[u, t] = eps
            assert np.isclose(ge[u, t], (loss(w, emb + d, 0.1) - loss(w, emb - d, 0.1)) / (2 * eps), atol=2e-5)
    assert np.isclose(gb, (loss(w, emb, 0.1 + eps) - loss(w, emb, 0.1 - eps)) / (2 * eps), atol=2e-5)


def _pool64(offsets, uidx, fields, x, emb):
    out = np.zeros((offsets.shape[0] - 1, F, K))
    sample = np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets))
    np.add.at(out, (sample, fields), emb[uidx] * x[:, None].astype(np.float64))
    return out


def test_partial_sums_match_their_reference_and_add_up_to_fm_across_shards():
    """ctr.model.partial_sums.partial_sums over two shards' shares of a request, added up by the
    router (finish_fm), equal fm_score_items over the whole request."""
    import numpy as np

    from ctr.model.fm import fm_score_items
    from ctr.model.partial_sums import finish_fm, partial_sums, partial_sums_reference, sum_squares_per_item

    rng = np.random.default_rng(3)
    n_keys, k = 60, 4
    rows = rng.normal(0, 0.3, size=(n_keys, 1 + k)).astype(np.float32)
    x = rng.uniform(0.5, 2.0, n_keys).astype(np.float32)
    context = np.arange(0, 8, dtype=np.int64)
    offsets = np.array([0, 5, 5, 12, 20], dtype=np.int64)
    indices = rng.choice(np.arange(8, n_keys), 20, replace=False).astype(np.int64)
    whole = partial_sums(context, offsets, indices, x, rows, 1, k)
    np.testing.assert_allclose(whole, partial_sums_reference(context, offsets, indices, x, rows, 1, k), rtol=1e-5, atol=1e-6)
    shard = rng.integers(0, 2, n_keys)
    total = np.zeros((4, 1 + 2 * k))
    for s in (0, 1):  # each shard sees only its own features, renumbered locally
        mine = np.flatnonzero(shard == s)
        local = np.full(n_keys, -1)
        local[mine] = np.arange(mine.shape[0])
        item_of = np.repeat(np.arange(4), np.diff(offsets))
        sel = shard[indices] == s
        offs = np.concatenate([[0], np.cumsum(np.bincount(item_of[sel], minlength=4))])
        ctx = local[context[shard[context] == s]]
        total += partial_sums(ctx, offs, local[indices[sel]], x[mine], rows[mine], 1, k)
    sq = sum_squares_per_item(context, offsets, indices, x)
    got = finish_fm(total, k, 0.1, 1.0 / sq)
    np.testing.assert_allclose(got, fm_score_items(context, offsets, indices, x, rows, 1, k, 0.1, True), atol=1e-5)
