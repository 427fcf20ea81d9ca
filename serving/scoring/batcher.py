"""Dynamic batching of the MLP forward pass (wdl, deepfm): concurrent requests' items wait
up to `max_wait_s` after the first of them arrives, or until `max_items` are queued, and
then run as one batch. On a GPU one pass (a replayed CUDA graph, serving.scoring.mlp_cuda) replaces
one per request; each request's rows are copied straight into the pinned staging buffer.
Only items of the same version's scorer share a batch. Without CUDA it runs the same way
on the CPU (the code path the CPU-only tests cover), though it is only switched on there
when asked for."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt


def _held_lock() -> threading.Lock:
    """A latch: acquired here, released once by the batch thread. A lock's wait is one C
    call, an Event's several Python-level steps: this is paid once per request."""
    lock = threading.Lock()
    lock.acquire()
    return lock


@dataclass
class _Job:
    scorer: Any  # serving.scoring.mlp.DeepScorer
    pooled: npt.NDArray[np.float32]
    partial: npt.NDArray[np.float32]
    done: threading.Lock = field(default_factory=_held_lock)  # released when scored
    scores: npt.NDArray[np.float32] | None = None
    error: BaseException | None = None


class DynamicBatcher:
    def __init__(self, max_wait_s: float, max_items: int) -> None:
        self.max_wait_s = max_wait_s
        self.max_items = max_items
        self.batches = 0
        self.items = 0
        self._jobs: list[_Job] = []
        self._queued = 0  # items in _jobs
        self._cv = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="dnn-batcher", daemon=True)
        self._thread.start()

    def predict(self, scorer: Any, pooled: npt.NDArray[np.float32], partial: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """scorer's sigmoid(partial + MLP(pooled)) per item, computed in a shared batch."""
        job = _Job(scorer, pooled, partial)
        with self._cv:
            self._jobs.append(job)
            self._queued += pooled.shape[0]
            # wake the batch thread only when it has something to do: a first job starts
            # its wait, a full batch ends it (a wake per job costs a GIL hand-off each)
            if len(self._jobs) == 1 or self._queued >= self.max_items:
                self._cv.notify()
        job.done.acquire()
        if job.error is not None:
            raise job.error
        assert job.scores is not None
        return job.scores

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()

    def _take(self) -> list[_Job]:
        """The jobs of one batch: the oldest job's scorer, once the wait is over or full."""
        with self._cv:
            while not self._jobs and not self._stop:
                self._cv.wait()
            if self._stop:
                return []
            until = time.monotonic() + self.max_wait_s
            while self._queued < self.max_items and not self._stop:
                left = until - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)
            scorer = self._jobs[0].scorer
            batch: list[_Job] = []
            rest: list[_Job] = []
            size = 0
            for j in self._jobs:
                if j.scorer is scorer and (not batch or size + j.pooled.shape[0] <= self.max_items):
                    batch.append(j)
                    size += j.pooled.shape[0]
                else:
                    rest.append(j)
            self._jobs = rest
            self._queued -= size
            return batch

    def _run(self) -> None:
        while True:
            batch = self._take()
            if not batch:
                return
            try:
                scores = batch[0].scorer.run([j.pooled for j in batch], [j.partial for j in batch])
                at = 0
                for j in batch:
                    j.scores = scores[at : at + j.pooled.shape[0]]
                    at += j.pooled.shape[0]
                self.batches += 1
                self.items += at
            except BaseException as e:  # noqa: BLE001 - handed to every waiting request
                for j in batch:
                    j.error = e
            for j in batch:
                j.done.release()


_SHARED: DynamicBatcher | None = None
_SHARED_LOCK = threading.Lock()


def shared(max_wait_s: float, max_items: int) -> DynamicBatcher:
    """The process's batcher (one worker thread for every version)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = DynamicBatcher(max_wait_s, max_items)
        return _SHARED
