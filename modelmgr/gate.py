"""Quality gate: a version is published only if its training metrics clear the thresholds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class QualityGate:
    min_auc: float = 0.5
    max_logloss: float = 1.0
    min_samples: int = 1000  # below this the window is too small to judge

    def check(self, metrics: dict[str, Any]) -> str | None:
        """None when the version passes, else the reason it does not."""
        samples = metrics.get("window_samples") or 0
        if samples < self.min_samples:
            return None
        auc = metrics.get("window_auc")
        loss = metrics.get("window_logloss")
        if loss is None or not math.isfinite(loss):
            return f"window logloss is {loss}"
        if loss > self.max_logloss:
            return f"window logloss {loss:.4f} above the gate's {self.max_logloss}"
        if auc is not None and math.isfinite(auc) and auc < self.min_auc:
            return f"window AUC {auc:.4f} below the gate's {self.min_auc}"
        return None
