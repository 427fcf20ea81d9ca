"""Splits one request's work into ranges run on a small thread pool: the kernels release
the GIL, so one large request uses every core, while small ones stay on the caller's
thread (a hand-off costs tens of microseconds)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
U = TypeVar("U")
Both = Callable[[Callable[[], Any], Callable[[], Any]], tuple[Any, Any]]  # Splitter.both's shape

MIN_PART = 8192  # smallest range worth a hand-off to another thread


class Splitter:
    def __init__(self, threads: int) -> None:
        if threads < 1:
            raise ValueError(f"threads {threads} must be at least 1")
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def run(self, part: Callable[[int, int], None], n: int, min_part: int = MIN_PART) -> None:
        """Calls part(lo, hi) over [0, n) in up to `threads` ranges, one of them on this
        thread; returns when all are done, raising the first error."""
        parts = max(1, min(self.threads, n // max(1, min_part)))
        if parts == 1:
            part(0, n)
            return
        bounds = [n * i // parts for i in range(parts + 1)]
        pool = self._executor()
        futures: list[Future[None]] = [pool.submit(part, bounds[i], bounds[i + 1]) for i in range(1, parts)]
        try:
            part(bounds[0], bounds[1])
        finally:
            for f in futures:
                f.result()

    def both(self, first: Callable[[], T], second: Callable[[], U]) -> tuple[T, U]:
        """first() here and second() on the pool at the same time (in turn when serial)."""
        if self.threads == 1:
            return first(), second()
        later = self._executor().submit(second)
        try:
            a = first()
        finally:
            b = later.result()
        return a, b

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="score")
            return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)


SERIAL = Splitter(1)
