"""Where the trainer's progress goes while it runs: the window AUC and logloss gauges an
operator's dashboard reads, and with `--curve-out` one JSON line per record, which
`boundless report` draws as training curves."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

from ctr.runtime import strict_json
from trainer import metrics

log = logging.getLogger("trainer")


class ProgressLog:
    def __init__(
        self,
        curve_out: str | None = None,
        count_samples: bool = False,
        on_record: Callable[[dict[str, float]], None] | None = None,
    ) -> None:
        self.path = Path(curve_out) if curve_out else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.count_samples = count_samples  # a coordinator counts its workers' samples here
        self.on_record = on_record  # a listener (boundless.api's progress bar)
        self._samples = 0.0
        self._started = time.monotonic()
        self._unwritten = 0  # records the curve file could not take since its last write

    def record(self, snap: dict[str, float], push_bytes: int = 0, pull_bytes: int = 0, trained: int = 0) -> None:
        """`snap`: the stream's progressive metrics (a cut taken up carries its samples on);
        `trained`: the samples this run trained, which the samples counter counts."""
        for gauge, key in (
            (metrics.WINDOW_AUC, "window_auc"),
            (metrics.WINDOW_LOGLOSS, "window_logloss"),
            (metrics.PROGRESSIVE_LOGLOSS, "progressive_logloss"),
        ):
            if math.isfinite(snap.get(key, math.nan)):
                gauge.set(snap[key])
        if self.count_samples and trained > self._samples:
            metrics.SAMPLES.inc(trained - self._samples)
            self._samples = trained
        if self.on_record is not None:
            self.on_record({**snap, "trained_samples": trained})
        if self.path is None:
            return
        line = {
            "time": time.time(),
            "elapsed_s": time.monotonic() - self._started,
            **snap,
            "push_bytes": push_bytes,
            "pull_bytes": pull_bytes,
            "trained_samples": trained,
        }
        text = strict_json.dumps(line) + "\n"  # NaN (no value yet) as null
        try:
            with self.path.open("a") as f:  # one line per record: a reader never sees half of one
                f.write(text)
        except OSError as e:  # a full disk: the curve has a gap, training goes on (as an export that fails)
            if not self._unwritten:
                log.warning("--curve-out %s: cannot write (%s); the curve misses records until it can", self.path, e)
            self._unwritten += 1
            return
        if self._unwritten:
            log.info("--curve-out %s: written again, after %d records it could not write", self.path, self._unwritten)
            self._unwritten = 0
