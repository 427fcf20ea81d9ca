"""One labelled version's shadow evidence: the copies of live requests its shadow scoring
scored, dropped and failed, and how far its scores were from the live answers'. Serving sums
it per process and reports it in ModelStatus (`ShadowEvidence` on the wire); `boundless
model promote` sums it over the replicas and judges it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from protos import predict_pb2


@dataclass
class ShadowEvidence:
    label: str
    version: int
    scored: int = 0
    dropped: int = 0
    failed: int = 0
    sum_abs_diff: float = 0.0  # of each copy's mean |shadow - live| over its items
    sum_diff: float = 0.0  # the same, signed
    seconds: float = 0.0  # the shadow's scoring time

    def _mean(self, total: float) -> float:
        return total / self.scored if self.scored else math.nan  # no copy scored: unknown, not zero

    @property
    def mean_abs_diff(self) -> float:
        return self._mean(self.sum_abs_diff)

    @property
    def mean_diff(self) -> float:
        return self._mean(self.sum_diff)

    @property
    def mean_seconds(self) -> float:
        return self._mean(self.seconds)

    def add(self, other: ShadowEvidence) -> None:
        self.scored += other.scored
        self.dropped += other.dropped
        self.failed += other.failed
        self.sum_abs_diff += other.sum_abs_diff
        self.sum_diff += other.sum_diff
        self.seconds += other.seconds

    def to_message(self) -> predict_pb2.ShadowEvidence:
        return predict_pb2.ShadowEvidence(
            label=self.label,
            version=self.version,
            scored=self.scored,
            dropped=self.dropped,
            failed=self.failed,
            mean_abs_diff=self.mean_abs_diff,
            mean_diff=self.mean_diff,
            mean_seconds=self.mean_seconds,
        )

    @classmethod
    def from_message(cls, m: predict_pb2.ShadowEvidence) -> ShadowEvidence:
        n = int(m.scored)
        sums = (m.mean_abs_diff * n, m.mean_diff * n, m.mean_seconds * n) if n else (0.0, 0.0, 0.0)
        return cls(m.label, int(m.version), n, int(m.dropped), int(m.failed), *sums)
