"""AUC and the paired standard error of an AUC difference, against their definitions."""

import math

import numpy as np

from ctr.data.quality import auc, auc_difference_se, midranks


def reference_se(labels: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """DeLong's variance from its definition: psi over every positive-negative pair."""
    y = labels > 0.5
    v10, v01 = [], []
    for s in (a, b):
        psi = (s[y][:, None] > s[~y][None, :]) + 0.5 * (s[y][:, None] == s[~y][None, :])
        v10.append(psi.mean(axis=1))
        v01.append(psi.mean(axis=0))
    d10, d01 = v10[0] - v10[1], v01[0] - v01[1]
    return math.sqrt(d10.var(ddof=1) / y.sum() + d01.var(ddof=1) / (~y).sum())


def test_midranks_share_ties():
    assert midranks([3.0, 1.0, 3.0, 2.0]).tolist() == [3.5, 1.0, 3.5, 2.0]


def test_auc_counts_pairs_with_ties_as_half():
    labels = np.array([1, 0, 1, 0, 1, 0])
    s = np.array([0.9, 0.1, 0.5, 0.5, 0.2, 0.3])
    y = labels > 0.5
    pairs = (s[y][:, None] > s[~y][None, :]) + 0.5 * (s[y][:, None] == s[~y][None, :])
    assert auc(labels, s) == pairs.mean()
    assert math.isnan(auc([1, 1], [0.2, 0.3]))


def test_the_paired_standard_error_matches_its_definition():
    rng = np.random.default_rng(7)
    for n in (6, 50, 400):
        labels = (rng.random(n) < 0.3).astype(np.float64)
        labels[:2] = [0, 1]
        signal = labels + rng.normal(0, 1, n)
        a = np.round(signal + rng.normal(0, 0.5, n), 1)  # rounded: ties within and across classes
        b = np.round(signal + rng.normal(0, 0.5, n), 1)
        assert math.isclose(auc_difference_se(labels, a, b), reference_se(labels, a, b), rel_tol=1e-9)
    assert auc_difference_se(labels, a, a) == 0.0
    assert math.isnan(auc_difference_se([1, 0, 0], [0.1, 0.2, 0.3], [0.3, 0.2, 0.1]))


def test_two_equally_good_models_rarely_differ_by_two_standard_errors():
    """Calibration under the null: two models of the same quality on 2,000 samples."""
    rng = np.random.default_rng(11)
    z = []
    for _ in range(300):
        labels = (rng.random(2000) < 0.25).astype(np.float64)
        signal = labels + rng.normal(0, 1.2, labels.size)
        a, b = signal + rng.normal(0, 0.6, labels.size), signal + rng.normal(0, 0.6, labels.size)
        z.append((auc(labels, a) - auc(labels, b)) / auc_difference_se(labels, a, b))
    share = np.mean(np.abs(z) > 1.96)
    assert 0.02 <= share <= 0.09, share  # 5% expected
    assert 0.8 <= np.std(z) <= 1.2
