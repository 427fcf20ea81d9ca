"""The quality gate: a candidate is published only on evidence, its scores on a holdout it
has not trained on, against the version serving now; and the auto-rollback rule that
compares the live version with its predecessor on each new holdout, which pins serving and
so acts only on a drop both large and well beyond the holdout's noise
(docs/design/rollback-evidence.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ctr.repository.holdout import JUDGED_FROM
from modelmgr.publish.evaluate import Evaluation


@dataclass(frozen=True)
class QualityGate:
    min_samples: int = JUDGED_FROM  # holdout samples needed to judge
    max_auc_drop: float = 0.02  # the candidate's AUC may trail the live version's by this much
    min_auc: float = 0.5  # and never below this
    max_logloss: float = 1.0
    calibration_low: float = 0.5  # mean prediction / CTR must lie in [low, high]
    calibration_high: float = 2.0
    rollback_auc_drop: float = 0.01  # the live version trailing its predecessor by more: roll back,
    rollback_z: float = 3.0  # if the drop is also this many standard errors of the paired difference

    def judge(self, candidate: Evaluation, live: Evaluation | None) -> str | None:
        """None when the candidate may be published, else why not."""
        if candidate.samples < self.min_samples:
            return (
                f"{candidate.samples} holdout samples the candidate has not trained on, {self.min_samples} needed to judge"
                " (the stream ended or stopped before the export's holdout came)"
            )
        if not candidate.finite:
            return "a score on the holdout is NaN or infinite"
        if not math.isfinite(candidate.auc):  # one class: nothing to rank, and a CTR of 0 calibrates nothing
            held = "no click" if not math.isfinite(candidate.calibration) else "only clicks"
            return (
                f"the holdout's {candidate.samples} samples hold {held}: AUC and calibration cannot judge the candidate"
                " (the next export's holdout may hold both)"
            )
        if not math.isfinite(candidate.logloss) or candidate.logloss > self.max_logloss:
            return f"holdout logloss {candidate.logloss:.4f} above {self.max_logloss}"
        if not (self.calibration_low <= candidate.calibration <= self.calibration_high):
            return (
                f"calibration (mean prediction / CTR) {candidate.calibration:.3f} outside "
                f"[{self.calibration_low}, {self.calibration_high}]"
            )
        if math.isfinite(candidate.auc) and candidate.auc < self.min_auc:
            return f"holdout AUC {candidate.auc:.4f} below {self.min_auc}"
        behind = live is not None and math.isfinite(live.auc) and candidate.auc < live.auc - self.max_auc_drop
        if behind and live is not None:
            return f"holdout AUC {candidate.auc:.4f} trails version {live.version}'s {live.auc:.4f} by over {self.max_auc_drop}"
        return None

    def falls_behind(self, live: Evaluation, predecessor: Evaluation, se: float = math.nan) -> bool:
        """The live version lost to the one before it on a holdout neither trained on: by more
        than rollback_auc_drop and by rollback_z standard errors `se` of the paired AUC
        difference (NaN: not known, the drop alone decides)."""
        if live.samples < self.min_samples or not live.finite:
            return not live.finite and predecessor.finite
        if not (math.isfinite(live.auc) and math.isfinite(predecessor.auc)):
            return False
        drop = predecessor.auc - live.auc
        return drop > self.rollback_auc_drop and not drop < self.rollback_z * se
