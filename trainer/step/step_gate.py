"""When the MLP of wdl and deepfm steps: once the samples since its last step hold at least
`need` positives and `need` negatives (--mlp-step-positives, docs/design/mlp-step.md). On a
stream with rare positives a batch holds one or two, and Adam steps about as far on any
gradient, so a step on one positive moves the tower as far as a step on many."""

from __future__ import annotations

import logging

from trainer import metrics

log = logging.getLogger("boundless.trainer")

WARN_FROM = 1_000_000  # samples without a step before the log says so, then at each doubling


class StepGate:
    def __init__(self, need: int) -> None:
        if need < 0:
            raise ValueError(f"--mlp-step-positives {need}: must be >= 0")
        self.need = need
        self.samples = 0  # since the last step
        self.positives = 0.0
        self._warn_at = WARN_FROM

    def add(self, samples: int, positives: float) -> bool:
        """Counts a batch (or a round); True when the step is due (the caller steps on
        every sample counted, then resets)."""
        self.samples += samples
        self.positives += positives
        if min(self.positives, self.samples - self.positives) >= self.need:
            return True
        metrics.MLP_WAITING_SAMPLES.set(self.samples)
        if self.samples >= self._warn_at:
            log.warning(
                "the MLP has not stepped for %d samples: they hold %d positives and %d negatives, fewer than"
                " --mlp-step-positives %d of one of them (are the labels right?)",
                self.samples,
                round(self.positives),
                round(self.samples - self.positives),
                self.need,
            )
            self._warn_at *= 2
        return False

    def resume(self, samples: int, positives: float) -> None:
        """Counts what a cut carried as waiting."""
        self.samples, self.positives = samples, positives
        metrics.MLP_WAITING_SAMPLES.set(samples)

    def reset(self) -> None:
        """Nothing waits: a step was taken (or the samples will be trained again)."""
        self.samples, self.positives = 0, 0.0
        self._warn_at = WARN_FROM
        metrics.MLP_WAITING_SAMPLES.set(0)
