"""Shadow scoring: a labelled version scores a copy of live requests off the request path.

The live answer never waits for it: the servicer hands the decoded request and its live
scores to one background thread through a bounded queue, and a copy that finds the queue
full is dropped and counted. The thread runs at the lowest CPU priority (nice 19) and
scores on itself alone, not on the scoring threads live requests share, so that where
cores are short the shadow falls behind and drops copies instead of slowing live answers. The
thread records, per model and label, the shadow's latency and how far its scores are from
the live ones (mean absolute difference), in Prometheus and, per version, as the evidence
ModelStatus reports and `boundless model promote` gates a promotion on.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from serving import metrics
from serving.client.shadow_evidence import ShadowEvidence
from serving.scoring.parallel import SERIAL

log = logging.getLogger("serving")
QUEUE = 16  # copies waiting at most; more are dropped


class ShadowScorer:
    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[str, str, Any, Any, npt.NDArray[np.float32]] | None] = queue.Queue(QUEUE)
        self._evidence: dict[tuple[str, str, int], ShadowEvidence] = {}  # (model, label, version)
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="shadow", daemon=True)
        self._thread.start()

    def _of(self, model_name: str, label: str, version: int) -> ShadowEvidence:
        """Caller holds the lock."""
        key = (model_name, label, version)
        if key not in self._evidence:
            self._evidence[key] = ShadowEvidence(label, version)
        return self._evidence[key]

    def evidence(self, model_name: str) -> list[ShadowEvidence]:
        """Copies of what each labelled version of the model saw, by label then version."""
        with self._lock:
            found = [replace(e) for (m, _, _), e in self._evidence.items() if m == model_name]
        return sorted(found, key=lambda e: (e.label, e.version))

    def submit(self, model_name: str, label: str, model: Any, req: Any, live: npt.NDArray[np.float32]) -> bool:
        """Queues a copy for `model` (a ServableModel); False (counted) when the queue is full."""
        try:
            self._queue.put_nowait((model_name, label, model, req, live))
            return True
        except queue.Full:
            metrics.SHADOW_DROPPED.labels(model_name, label).inc()
            with self._lock:
                self._of(model_name, label, int(model.version)).dropped += 1
            return False

    def _run(self) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # this thread only (Linux)
        except OSError:
            log.debug("shadow thread: cannot lower its priority", exc_info=True)
        while (job := self._queue.get()) is not None:
            model_name, label, model, req, live = job
            try:
                start = time.perf_counter()
                scores = replace(model, splitter=SERIAL).score(req)  # on this thread: the scoring threads are live traffic's
                took = time.perf_counter() - start
                diff = scores.astype(np.float64) - live
                abs_diff = float(np.mean(np.abs(diff)))
                metrics.VERSION_LATENCY.labels(model_name, label, "shadow").observe(took)
                metrics.SHADOW_DIFF.labels(model_name, label).observe(abs_diff)
                with self._lock:
                    e = self._of(model_name, label, int(model.version))
                    e.scored += 1
                    e.sum_abs_diff += abs_diff
                    e.sum_diff += float(np.mean(diff))
                    e.seconds += took
            except Exception:  # noqa: BLE001 - a shadow's failure never touches live traffic
                metrics.SHADOW_FAILED.labels(model_name, label).inc()
                with self._lock:
                    self._of(model_name, label, int(model.version)).failed += 1
                log.debug("shadow %s of %s failed", label, model_name, exc_info=True)
            finally:
                self._queue.task_done()

    def drain(self, timeout: float = 10.0) -> None:
        """Waits until the queued copies are scored (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.005)

    def close(self) -> None:
        self._queue.put(None)
