"""Scores a version (or a candidate) on a holdout, as serving would: what the quality gate
and the auto-rollback compare."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ctr.data.batch import SampleBatch
from ctr.data.quality import auc, logloss
from ctr.repository.versions import Repository
from serving.loading.servable import ServableModel, load
from serving.request.encoding import DecodedRequest

CHUNK = 4096  # samples scored at once: bounds the memory a big holdout takes


@dataclass(frozen=True)
class Evaluation:
    version: int  # 0: the candidate, not published yet
    samples: int
    auc: float
    logloss: float
    calibration: float  # mean prediction over the holdout's CTR (1: calibrated)
    finite: bool  # every score a number

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def load_published(repo: Repository, version: int, current: ServableModel | None = None) -> ServableModel:
    """A published version, loaded as serving loads it (with `current`'s images and overlay
    when the version extends its delta chain)."""
    m = repo.manifest(version)
    base = int(m["base_version"])
    chain = [(repo.path(v), repo.manifest(v)) for v in m["delta_chain"]]
    return load(repo.path(version), m, repo.manifest(base), repo.path(base), chain, current)


def scores(model: ServableModel, batch: SampleBatch) -> np.ndarray:
    """One score per sample: each sample is an item with its own features, no context."""
    out = np.empty(len(batch), dtype=np.float32)
    for lo in range(0, len(batch), CHUNK):
        hi = min(len(batch), lo + CHUNK)
        a, b = int(batch.offsets[lo]), int(batch.offsets[hi])
        req = DecodedRequest(
            keys=batch.keys[a:b],
            values=batch.values[a:b],
            fields=batch.fields[a:b],
            context=np.zeros(0, dtype=np.int64),
            item_offsets=(batch.offsets[lo : hi + 1] - a).astype(np.int64),
            item_indices=np.arange(b - a, dtype=np.int64),
        )
        out[lo:hi] = model.score(req)
    return out


def evaluate(model: ServableModel, batch: SampleBatch, version: int) -> Evaluation:
    return evaluate_scores(scores(model, batch), batch.labels, version)


def evaluate_scores(p: np.ndarray, labels: np.ndarray, version: int) -> Evaluation:
    finite = bool(np.isfinite(p).all())
    ctr = float(labels.mean()) if len(labels) else float("nan")
    if not finite or not len(labels):
        return Evaluation(version, len(labels), float("nan"), float("nan"), float("nan"), finite)
    calibration = float(p.mean()) / ctr if ctr > 0 else float("inf")
    return Evaluation(version, len(labels), auc(labels, p), logloss(labels, p), calibration, finite)
