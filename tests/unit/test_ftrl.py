import numpy as np

from ps.kernels import ftrl_pull, ftrl_push, ftrl_step_reference
from ps.tables import FtrlParams, SparseTable


def test_worked_example_by_hand():
    # alpha=0.5 beta=1 l1=0.1 l2=1; z=0, n=0, g=0.8 -> w0=0; n'=0.64; sigma=(0.8-0)/0.5=1.6; z'=0.8
    # next weight: -(0.8-0.1)/((1+0.8)/0.5+1) = -0.7/4.6
    w, z, n = ftrl_step_reference(np.array([0.0]), np.array([0.0]), np.array([0.8]), 0.5, 1.0, 0.1, 1.0)
    assert w[0] == 0 and np.isclose(z[0], 0.8) and np.isclose(n[0], 0.64)
    w2, _, _ = ftrl_step_reference(z, n, np.array([0.0]), 0.5, 1.0, 0.1, 1.0)
    assert np.isclose(w2[0], -0.7 / 4.6)


def test_kernel_matches_numpy_reference_over_many_steps():
    rng = np.random.default_rng(0)
    p = FtrlParams(alpha=0.3, beta=1.0, l1=0.05, l2=0.5)
    dim, n_keys = 3, 50
    rows = np.zeros((n_keys, 2 * dim + 3), dtype=np.uint32)
    frows = rows.view(np.float32)
    z = np.zeros((n_keys, dim))
    nn = np.zeros((n_keys, dim))
    slots = np.arange(n_keys, dtype=np.int64)
    for step in range(40):
        g = rng.normal(size=(n_keys, dim)).astype(np.float32)
        ftrl_push(frows, rows, slots, g, dim, step + 1, p.alpha, p.beta, p.l1, p.l2)
        _, z, nn = ftrl_step_reference(z, nn, g.astype(np.float64), p.alpha, p.beta, p.l1, p.l2)
    w_ref, _, _ = ftrl_step_reference(z, nn, np.zeros_like(z), p.alpha, p.beta, p.l1, p.l2)
    w = ftrl_pull(frows, slots, dim, p.alpha, p.beta, p.l1, p.l2)
    np.testing.assert_allclose(w, w_ref, rtol=1e-4, atol=1e-5)
    assert (rows[:, 2 * dim] == 40).all()  # update count
    assert (rows[:, 2 * dim + 1] == 40).all()  # sequence of the last update


def test_table_pull_does_not_insert_and_tracks_updates():
    t = SparseTable("w", 1, FtrlParams())
    keys = np.array([5, 9, 11], dtype=np.uint64)
    assert (t.pull(keys) == 0).all() and t.map.size == 0
    t.push(keys[:2], np.array([1.0, -1.0], np.float32), seq=1)
    t.push(keys[1:], np.array([1.0, 2.0], np.float32), seq=2)
    changed, _ = t.updated_after(1)
    assert sorted(changed.tolist()) == [9, 11]
