"""The samples the gate judges an export on: its own holdout and, when that is small (a
short export interval, the last export of a stream), the newest holdout samples of earlier
exports of the same model. The trainer never trains on holdout samples, so every one of
them is unseen by the candidate and by the live version alike."""

from __future__ import annotations

import json
from collections import deque

from ctr import holdout as holdouts
from ctr.batch import SampleBatch
from modelmgr.schemas import ExportManifest


class HoldoutPool:
    def __init__(self, samples: int) -> None:
        self.samples = samples  # judge on at least this many samples when the pool has them
        self._batches: deque[SampleBatch] = deque()
        self._held = 0
        self._model = ""  # the spec and feature schema the pooled samples were hashed for

    def judging(self, own: SampleBatch, export: ExportManifest) -> SampleBatch:
        """The holdout to judge `export` on; adds `own` to the pool."""
        model = json.dumps([export.model, export.feature_schema], sort_keys=True, default=str)
        if model != self._model:  # another model or schema: earlier samples do not fit it
            self._batches.clear()
            self._held, self._model = 0, model
        parts, n = [own], len(own)
        for earlier in reversed(self._batches):
            if n >= self.samples:
                break
            take = earlier if n + len(earlier) <= self.samples else holdouts.tail(earlier, len(earlier) - (self.samples - n))
            parts.append(take)
            n += len(take)
        self._add(own)
        return parts[0] if len(parts) == 1 else holdouts.concat(parts)

    def _add(self, batch: SampleBatch) -> None:
        if not len(batch) or self.samples <= 0:
            return
        self._batches.append(batch)
        self._held += len(batch)
        while self._batches and self._held - len(self._batches[0]) >= self.samples:
            self._held -= len(self._batches.popleft())
