"""The gate's holdout: an export's own samples, topped up with the newest of earlier
exports' of the same model, never more than the pool holds."""

from __future__ import annotations

from typing import Any

import numpy as np

from ctr.batch import SampleBatch
from modelmgr.holdout_pool import HoldoutPool
from modelmgr.schemas import ExportManifest


def _batch(labels: list[float]) -> SampleBatch:
    n = len(labels)
    return SampleBatch(
        np.array(labels, np.float32),
        np.arange(n + 1, dtype=np.int64),
        np.arange(1, n + 1, dtype=np.uint64),
        np.zeros(n, np.int32),
        np.ones(n, np.float32),
    )


def _export(model: dict[str, Any]) -> ExportManifest:
    return ExportManifest.model_construct(model=model, feature_schema=None)  # the pool reads these two


def test_a_small_holdout_is_topped_up_with_the_newest_earlier_samples():
    pool, lr = HoldoutPool(5), _export({"type": "lr"})
    assert pool.judging(_batch([1, 2, 3]), lr).labels.tolist() == [1, 2, 3]
    assert pool.judging(_batch([4, 5]), lr).labels.tolist() == [4, 5, 1, 2, 3]
    assert pool.judging(_batch([6]), lr).labels.tolist() == [6, 4, 5, 2, 3]  # the newest of the earlier ones
    big = pool.judging(_batch([7] * 8), lr)
    assert len(big) == 8  # an export's own samples are never cut
    assert pool.judging(_batch([]), lr).labels.tolist() == [7] * 5
    assert pool._held <= 5 + 8  # bounded: what it keeps is at most one batch past the cap


def test_another_model_starts_the_pool_again():
    pool = HoldoutPool(10)
    pool.judging(_batch([1, 1]), _export({"type": "lr"}))
    assert pool.judging(_batch([0]), _export({"type": "fm", "k": 4})).labels.tolist() == [0]


def test_a_pool_of_zero_judges_on_the_export_alone():
    pool, lr = HoldoutPool(0), _export({"type": "lr"})
    pool.judging(_batch([1, 1]), lr)
    assert pool.judging(_batch([]), lr).labels.tolist() == []
