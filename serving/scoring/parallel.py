"""Splits one request's work into ranges run on a few scoring threads: the kernels release
the GIL, so one large request uses every core, while small ones stay on the caller's
thread.

A request hands work to another thread several times (decoding, hashing, lookups,
scoring). Waking a sleeping thread costs 50-150 us on a VM, so both sides spin first
(serving.scoring.spin_wait, GIL released): a worker that has just finished a task watches for
the next one for `spin_s`, and a caller waiting for a worker's part watches its task's
flag as long, before either falls back to sleeping on a condition.

A woken worker can also wait milliseconds for a core (another thread holds it for its
time slice): on two cores that made about one request in twenty take twice as long. So
a task is claimed by whoever starts it, and a caller that has finished its own part
runs the parts no worker has claimed yet (the last posted first, while workers take
the first): a late worker costs the overlap, never a wait. (Two ranges per thread,
so that a caller could take over part of a late worker's share, made lookups 20%
slower: the caller took back ranges the worker was about to claim.)

Requests in flight together share the threads (`Splitter.request`): each already keeps
the core of the thread it runs on busy, so on two cores two requests each run on their
own thread, with none of the hand-offs and spins that would only take CPU from the
other (LR 200 x 500 over gRPC, two alternating runs each way: four clients 290-320
requests/s against 281-288 with every request split, two clients 248-258 against
241-255 on 1.45 cores instead of 1.57).
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from serving.scoring.spin_wait import finish_then_spin, spin_while, spins_for, swap_if

T = TypeVar("T")
U = TypeVar("U")

MIN_PART = 8192  # smallest range worth a hand-off to another thread
SPIN_S = 200e-6  # how long a waiting thread spins before it sleeps


POSTED, DONE, WAITER_SLEEPS, RUNNING, TAKEN_BACK = 0, 1, 2, 3, 4  # a task's state


class _Task:
    """One call handed to a worker. Whoever moves `state` from POSTED runs it: a worker
    (RUNNING, then DONE) or its caller (TAKEN_BACK). A caller waits for a worker's
    RUNNING task to finish."""

    __slots__ = ("fn", "result", "error", "state", "sleeper")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None
        self.state = np.zeros(1, dtype=np.int64)
        self.sleeper: threading.Event | None = None

    def _call(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as e:  # handed to the caller, which raises it
            self.error = e

    def run(self, posted: npt.NDArray[np.int64], seen: int, spins: int) -> int | None:
        """A worker's turn: unless the caller has taken the task back, calls fn, marks the
        task done and spins for the next one (serving.scoring.spin_wait.finish_then_spin);
        returns the count of tasks posted by then (None when the task was taken back)."""
        if swap_if(self.state, 0, POSTED, RUNNING) != POSTED:
            return None
        self._call()
        old, now = finish_then_spin(self.state, RUNNING, DONE, posted, seen, spins)
        if old == WAITER_SLEEPS and self.sleeper is not None:  # the caller stopped spinning
            self.sleeper.set()
        return now

    def take_back(self) -> bool:
        """Runs the task on the caller's thread if no worker has started it."""
        if swap_if(self.state, 0, POSTED, TAKEN_BACK) != POSTED:
            return False
        self._call()
        return True

    def wait(self, spins: int) -> Any:
        """The task's result (or error), once it is done: here, unless a worker runs it."""
        if not self.take_back() and spin_while(self.state, 0, RUNNING, spins) == RUNNING:
            self.sleeper = threading.Event()  # made before the swap that lets run() see it
            if swap_if(self.state, 0, RUNNING, WAITER_SLEEPS) == RUNNING:
                self.sleeper.wait()
        if self.error is not None:
            raise self.error
        return self.result


class _Workers:
    """Threads taking tasks from one queue; idle ones spin on the count of tasks posted."""

    def __init__(self, count: int, spins: int) -> None:
        self._spins = spins
        self._tasks: deque[_Task] = deque()
        self._posted = np.zeros(1, dtype=np.int64)
        self._cond = threading.Condition()
        self._sleeping = 0
        self._closed = False
        for i in range(count):
            threading.Thread(target=self._loop, name=f"score-{i + 1}", daemon=True).start()

    def post(self, task: _Task) -> None:
        with self._cond:
            self._tasks.append(task)
            self._posted[0] += 1
            if self._sleeping:
                self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._posted[0] += 1
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                task = self._tasks.popleft() if self._tasks else None
                seen = int(self._posted[0])
            now = task.run(self._posted, seen, self._spins) if task is not None else None
            if now is None:  # no task, or one its caller took back
                now = seen if self._tasks else spin_while(self._posted, 0, seen, self._spins)
            if now != seen:
                continue
            with self._cond:
                self._sleeping += 1
                while not self._tasks and not self._closed:
                    self._cond.wait()
                self._sleeping -= 1


class Splitter:
    def __init__(self, threads: int, spin_s: float = SPIN_S) -> None:
        if threads < 1:
            raise ValueError(f"threads {threads} must be at least 1")
        if spin_s < 0:
            raise ValueError(f"spin_s {spin_s} must not be negative")
        self.threads = threads
        self.spin_s = spin_s
        self._workers: _Workers | None = None
        self._spins = 0
        self._lock = threading.Lock()
        self._in_flight = 0

    @contextmanager
    def request(self) -> Iterator[None]:
        """Counts a request in flight while the block runs (serving.loading.watcher.ModelWatcher.use)."""
        with self._lock:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def share(self) -> int:
        """The threads one request may use now: all of them while it is alone, an equal part
        when several are in flight (at least its own)."""
        return max(1, self.threads // max(1, self._in_flight))

    def run(self, part: Callable[[int, int], None], n: int, min_part: int = MIN_PART) -> None:
        """Calls part(lo, hi) over [0, n) in up to share() ranges, one of them on this
        thread; returns when all are done, raising the first error."""
        parts = max(1, min(self.share(), n // max(1, min_part)))
        if parts == 1:
            part(0, n)
            return
        bounds = [n * i // parts for i in range(parts + 1)]
        tasks = [self._post(functools.partial(part, bounds[i], bounds[i + 1])) for i in range(1, parts)]
        try:
            part(bounds[0], bounds[1])
            for t in reversed(tasks):  # from the last: the workers take the first ones
                t.take_back()
        finally:
            for t in tasks:
                t.wait(self._spins)

    def both(self, first: Callable[[], T], second: Callable[[], U]) -> tuple[T, U]:
        """first() here and second() on a worker at the same time (in turn when serial, or
        when other requests in flight leave this one a single thread)."""
        if self.share() < 2:
            return first(), second()
        later = self._post(second)
        try:
            a = first()
        finally:
            b = later.wait(self._spins)
        return a, b

    def _post(self, fn: Callable[[], Any]) -> _Task:
        with self._lock:
            if self._workers is None:
                self._spins = spins_for(self.spin_s)
                self._workers = _Workers(self.threads - 1, self._spins)
        task = _Task(fn)
        self._workers.post(task)
        return task

    def close(self) -> None:
        if self._workers is not None:
            self._workers.close()


SERIAL = Splitter(1)
