import math

import numba as nb
import numpy as np
import pytest

from ctr.model.optim import (
    OptimizerError,
    OptimizerSpec,
    init_rows,
    rows_with_weights,
    step,
    step_reference,
    weights_of_rows,
    weights_reference,
)

SPECS = [
    OptimizerSpec("ftrl", lr=0.3, beta=1.0, l1=0.05, l2=0.5),
    OptimizerSpec("adagrad", lr=0.1, initial_accumulator=0.1, l2=0.01),
    OptimizerSpec("adam", lr=0.01, l2=0.001),
    OptimizerSpec("sgd", lr=0.05, momentum=0.9, l2=0.01),
]


@nb.njit
def _run(state, grads, d, p):
    for i in range(grads.shape[0]):
        step(state, grads[i], d, p)


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.kind)
def test_step_kernel_matches_the_reference_over_many_steps(spec):
    d = 3
    rng = np.random.default_rng(0)
    grads = rng.normal(size=(300, d)) * 10 ** rng.uniform(-3, 1, size=(300, 1))
    state = init_rows(np.array([12345], np.uint64), spec.state_width(d), d, spec.params())[0]
    ref = state.copy()
    _run(state, grads, d, spec.params())
    for g in grads:
        ref = step_reference(ref, g, d, spec)
    np.testing.assert_allclose(state, ref, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        weights_of_rows(state[None], d, spec.params())[0], weights_reference(spec.kind, ref, d, spec), rtol=1e-6, atol=1e-7
    )


def test_ftrl_by_hand():
    # alpha=0.5 beta=1 l1=0.1 l2=1; z=0, n=0, g=0.8 -> w0=0; n'=0.64; sigma=(0.8-0)/0.5=1.6; z'=0.8
    # next weight: -(0.8-0.1)/((1+0.8)/0.5+1) = -0.7/4.6
    spec = OptimizerSpec("ftrl", lr=0.5, beta=1.0, l1=0.1, l2=1.0)
    s = np.zeros(2)
    _run(s, np.array([[0.8]]), 1, spec.params())
    assert np.isclose(s[0], 0.8) and np.isclose(s[1], 0.64)
    assert np.isclose(weights_of_rows(s[None], 1, spec.params())[0, 0], -0.7 / 4.6)


@pytest.mark.slow
def test_ftrl_accumulator_stays_exact_over_two_million_updates():
    """float32 n stops growing once n/g^2 passes 2^24; the float64 state keeps every digit."""
    spec = OptimizerSpec("ftrl", lr=0.1, beta=1.0, l1=0.0, l2=0.0)
    rng = np.random.default_rng(1)
    grads = (rng.normal(size=2_000_000) * 10 ** rng.uniform(-4, 0, size=2_000_000)).reshape(-1, 1)
    state = np.zeros(2)
    _run(state, grads, 1, spec.params())
    exact = math.fsum(float(g) ** 2 for g in grads[:, 0])
    assert abs(state[1] - exact) / exact < 1e-12
    n32 = np.float32(0)
    for g2 in (grads[:, 0] ** 2).astype(np.float32):  # what a float32 accumulator keeps
        n32 = np.float32(n32 + g2)
    assert abs(float(n32) - exact) / exact > 1e-4  # the test can tell the two apart
    # z against the float64 reference over the first 20k steps
    ref = np.zeros(2)
    head = np.zeros(2)
    _run(head, grads[:20000], 1, spec.params())
    for g in grads[:20000]:
        ref = step_reference(ref, g, 1, spec)
    np.testing.assert_allclose(head, ref, rtol=1e-9)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.kind)
def test_rows_with_weights_round_trip(spec):
    w = np.array([[0.3, -0.2, 0.0]])
    state = rows_with_weights(w, spec.state_width(3), spec.params())
    np.testing.assert_allclose(weights_of_rows(state, 3, spec.params()), w, atol=1e-7)


def test_initial_rows_are_deterministic_per_key_and_seed():
    spec = OptimizerSpec("adagrad", init_std=0.1)
    keys = np.arange(1, 20001, dtype=np.uint64)
    a = init_rows(keys, 16, 8, spec.params())
    assert np.array_equal(a, init_rows(keys, 16, 8, spec.params()))
    other = init_rows(keys, 16, 8, OptimizerSpec("adagrad", init_std=0.1, seed=1).params())
    assert not np.allclose(a[:, :8], other[:, :8])
    assert abs(a[:, :8].std() - 0.1) < 0.005 and abs(a[:, :8].mean()) < 0.005
    assert (a[:, 8:] == spec.initial_accumulator).all()


@pytest.mark.parametrize(
    "settings,needle",
    [({"kind": "rmsprop"}, "unknown kind"), ({"lr": 0}, "lr"), ({"beta1": 1.0}, "beta1"), ({"l1": -1}, "l1"), ({"x": 1}, "x")],
)
def test_bad_settings_are_named(settings, needle):
    with pytest.raises(OptimizerError, match=needle):
        OptimizerSpec.from_dict(settings)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.kind)
def test_step_rows_equals_one_step_per_row(spec):
    from ctr.model.optim import step_rows

    rng = np.random.default_rng(3)
    state = init_rows(np.arange(1, 51, dtype=np.uint64), spec.state_width(2), 2, spec.params())
    if spec.kind == "adam":
        state[::3, -1] = 7.0  # rows at different step counts
    grads = rng.normal(size=(50, 2))
    expected = np.array([step_reference(s, g, 2, spec) for s, g in zip(state, grads, strict=True)])
    step_rows(state, grads, 2, spec.params())
    np.testing.assert_allclose(state, expected, rtol=1e-12, atol=1e-15)


@pytest.mark.slow
@pytest.mark.parametrize("l1", [0.0, 0.1])
@pytest.mark.parametrize("n0", [2.0, -0.5])  # a lossy push or pull can leave n below 0
def test_the_cached_ftrl_step_gives_the_bits_of_step_then_weight_of(l1, n0):
    from ctr.model.optim import ftrl_step_1d, step, weight_of

    @nb.njit
    def cached(state, grads, p):
        sn = np.sqrt(np.maximum(state[:, 1], 0.0))  # as ctr.model.factorization keeps it
        w = np.array([weight_of(state[0], 1, 0, p)])
        out = np.empty(grads.shape[0])
        for i in range(grads.shape[0]):
            w[0] = ftrl_step_1d(state[0], grads[i], w[0], sn, 0, p)
            out[i] = w[0]
        return out

    @nb.njit
    def generic(state, grads, p):
        g = np.zeros(1)
        out = np.empty(grads.shape[0])
        for i in range(grads.shape[0]):
            g[0] = grads[i]
            step(state[0], g, 1, p)
            out[i] = weight_of(state[0], 1, 0, p)
        return out

    rng = np.random.default_rng(7)
    grads = np.concatenate([rng.normal(0, 1, 500), np.zeros(5), rng.normal(0, 1e-9, 50), rng.normal(0, 30, 50)])
    p = OptimizerSpec("ftrl", lr=0.1, l1=l1, l2=1.0).params()
    a = np.array([[0.3, n0]])
    b = a.copy()
    np.testing.assert_array_equal(cached(a, grads, p), generic(b, grads, p))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.kind)
def test_step_into_gives_the_bits_of_step_then_weight_of_and_zeroes_the_gradient(spec):
    from ctr.model.optim import step_into, weight_of

    @nb.njit
    def fused(state, grads, d, p):
        w = np.empty((grads.shape[0], d))
        left = 0.0  # what step_into left in the gradients it took
        for i in range(grads.shape[0]):
            g = grads[i].copy()
            step_into(state, g, d, p, w[i])
            left += np.abs(g).sum()
        return w, left

    @nb.njit
    def generic(state, grads, d, p):
        w = np.empty((grads.shape[0], d))
        for i in range(grads.shape[0]):
            step(state, grads[i], d, p)
            for t in range(d):
                w[i, t] = weight_of(state, d, t, p)
        return w

    d = 12
    grads = np.random.default_rng(5).normal(0, 1, (200, d))
    grads[::7] = 0.0  # rows with no gradient step too (l2, Adam's moments)
    a, b = (init_rows(np.array([9], dtype=np.uint64), spec.state_width(d), d, spec.params())[0] for _ in range(2))
    w, left = fused(a, grads, d, spec.params())
    np.testing.assert_array_equal(w, generic(b, grads, d, spec.params()))
    np.testing.assert_array_equal(a, b)
    assert left == 0.0
