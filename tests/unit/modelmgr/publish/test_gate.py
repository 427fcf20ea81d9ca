"""The quality gate's reasons: a holdout of one class says why it cannot judge (a rare
event's stream often holds 2,000 samples without a click), where it said "calibration inf
outside [0.5, 2.0]"."""

from __future__ import annotations

import math

from modelmgr.publish.evaluate import Evaluation
from modelmgr.publish.gate import QualityGate


def _candidate(auc: float, calibration: float) -> Evaluation:
    return Evaluation(version=0, samples=2000, auc=auc, logloss=0.1, calibration=calibration, finite=True)


def test_a_holdout_of_one_class_is_no_evidence_and_says_so():
    gate = QualityGate()
    no_click = gate.judge(_candidate(math.nan, math.inf), None)
    assert no_click is not None and no_click.startswith("the holdout's 2000 samples hold no click")
    only_clicks = gate.judge(_candidate(math.nan, 0.9), None)
    assert only_clicks is not None and "hold only clicks" in only_clicks
    assert gate.judge(_candidate(0.75, 1.0), None) is None
    assert gate.judge(_candidate(0.75, 3.0), None) == "calibration (mean prediction / CTR) 3.000 outside [0.5, 2.0]"
