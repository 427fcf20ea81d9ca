"""The MLP's step waits for enough of both labels, says so in the log when it has waited
long, and its metrics show what waits."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import REGISTRY

from trainer.step.step_gate import WARN_FROM, StepGate


def _waiting_gauge() -> float | None:
    return REGISTRY.get_sample_value("boundless_trainer_mlp_waiting_samples")


def test_a_step_is_due_once_both_labels_reach_the_threshold_and_the_count_starts_over_at_the_reset():
    gate = StepGate(4)
    assert not gate.add(10, 3.0)  # 3 positives
    assert _waiting_gauge() == 10
    assert not gate.add(2, 0.0)  # 3 positives, 9 negatives
    assert gate.add(1, 1.0)  # 4 and 9: due
    assert (gate.samples, gate.positives) == (13, 4.0)  # what the step is on
    gate.reset()
    assert (gate.samples, gate.positives) == (0, 0.0) and _waiting_gauge() == 0
    assert not gate.add(4, 4.0)  # 4 positives, no negatives
    assert gate.add(4, 0.0)  # 4 and 4


def test_zero_makes_every_batch_a_step():
    gate = StepGate(0)
    assert gate.add(256, 0.0) and gate.add(1, 1.0)


def test_a_long_wait_is_logged_once_and_again_at_each_doubling(caplog: pytest.LogCaptureFixture):
    gate = StepGate(16)
    with caplog.at_level(logging.WARNING, logger="boundless.trainer"):
        for _ in range(4 * WARN_FROM // 100_000):
            assert not gate.add(100_000, 1.0 if gate.positives < 15 else 0.0)
    warnings = [r.getMessage() for r in caplog.records if "has not stepped" in r.getMessage()]
    assert len(warnings) == 3, warnings  # at 1M, 2M and 4M samples
    assert "10 positives" in warnings[0] and "--mlp-step-positives 16" in warnings[0]


def test_a_negative_threshold_is_refused():
    with pytest.raises(ValueError, match="--mlp-step-positives -1: must be >= 0"):
        StepGate(-1)
