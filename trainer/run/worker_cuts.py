"""Checkpoint cuts of a run with several workers: the coordinator pauses every worker at a
batch boundary with its pushes acknowledged, records where each stands, prepares the cut
on every shard, lets the workers go on and commits the cut."""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from typing import Any

from ps.client import PSClient
from trainer.run.recovery import encode_workers

log = logging.getLogger("trainer")


class WorkerCuts:
    """reports: the workers' report queue; latest: the coordinator's last report of each
    worker (updated here too); check: raises when a worker died."""

    def __init__(
        self,
        client: PSClient,
        controls: list[Any],
        reports: Any,
        latest: dict[int, Any],
        cut: int,
        check: Callable[[], None],
        aggregated: bool = False,
    ) -> None:
        self.aggregated = aggregated  # --local-aggregate: the leader's residuals go out once all are paused
        self.client = client
        self.controls = controls
        self.reports = reports
        self.latest = latest
        self.cut = cut
        self.check = check

    def _flush(self, paused: set[int]) -> None:
        """Every worker paused: the local aggregation's leader sends its residuals (the
        others' last pushes went through it after it paused) and the others forget theirs."""
        for i in paused:
            self.controls[i].put("flush")
        waiting = set(paused)
        while waiting:
            try:
                r = self.reports.get(timeout=0.2)
            except queue.Empty:
                self.check()
                continue
            if r.flushed:
                waiting.discard(r.index)

    def take(self) -> None:
        started = time.monotonic()
        workers = len(self.controls)
        waiting = {i for i in range(workers) if not (i in self.latest and self.latest[i].final)}
        for i in waiting:
            self.controls[i].put("pause")
        paused = set()
        while waiting:
            try:
                r = self.reports.get(timeout=0.2)
            except queue.Empty:
                self.check()
                continue
            self.latest[r.index] = r
            if r.paused or r.final:
                waiting.discard(r.index)
                if r.paused:
                    paused.add(r.index)
        if self.aggregated and paused:
            self._flush(paused)
        stalled = time.monotonic() - started
        self.cut += 1
        states = [self.latest[i].state for i in range(workers)]
        rows = self.client.control.prepare(self.cut, encode_workers(states))
        for i in paused:
            self.controls[i].put("resume")
        self.client.control.commit(self.cut)
        log.info(
            "checkpoint cut %d committed: %d rows, %d workers paused for %.0f ms", self.cut, rows, len(paused), 1000 * stalled
        )
