"""serving.scoring.parallel's scoring threads and serving.scoring.spin_wait's kernels: every range runs
once, errors reach the caller, callers in several threads share the workers, and waits
that outlast the spin fall back to sleeping without losing a wake-up."""

import threading
import time

import numpy as np
import pytest

from serving.scoring.parallel import Splitter
from serving.scoring.spin_wait import finish_then_spin, spin_while, spin_while_reference, spins_for, swap_if


def test_spin_while_equals_the_reference():
    flags = np.array([5, 7], dtype=np.int64)
    for i, value, spins in ((0, 5, 10), (0, 4, 10), (1, 7, 0), (1, 3, 1)):
        assert spin_while(flags, i, value, spins) == spin_while_reference(flags, i, value, spins)


def test_spin_while_sees_another_threads_store():
    flags = np.zeros(1, dtype=np.int64)
    threading.Timer(0.02, lambda: flags.__setitem__(0, 9)).start()
    assert spin_while(flags, 0, 0, spins_for(5.0)) == 9  # returns on the store, not after 5 s


def test_swap_if_and_finish_then_spin():
    state = np.zeros(1, dtype=np.int64)
    assert swap_if(state, 0, 1, 5) == 0 and state[0] == 0  # not 1: unchanged
    assert swap_if(state, 0, 0, 2) == 0 and state[0] == 2
    posted = np.array([3], dtype=np.int64)
    assert finish_then_spin(state, 3, 1, posted, 3, 10) == (2, 3) and state[0] == 2  # a waiter sleeps: left as it is
    state[0] = 3
    assert finish_then_spin(state, 3, 1, posted, 2, 10) == (3, 3) and state[0] == 1  # posted moved on: no spinning


@pytest.mark.parametrize("threads,spin_s", [(1, 0.0), (2, 0.0), (2, 200e-6), (3, 50e-6)])
def test_run_covers_every_range_once(threads, spin_s):
    splitter = Splitter(threads, spin_s)
    try:
        for n in (0, 1, 100, 8192 * 3 + 5, 100_000):
            hits = np.zeros(n, dtype=np.int64)

            def part(lo: int, hi: int, hits: np.ndarray = hits) -> None:
                hits[lo:hi] += 1

            splitter.run(part, n)
            assert (hits == 1).all()
        assert splitter.both(lambda: 1, lambda: 2) == (1, 2)
    finally:
        splitter.close()


def test_a_workers_error_reaches_the_caller():
    splitter = Splitter(2, 100e-6)
    try:

        def fails() -> None:
            raise KeyError("in the worker")

        with pytest.raises(KeyError, match="in the worker"):
            splitter.both(lambda: None, fails)
        assert splitter.both(lambda: "a", lambda: "b") == ("a", "b")  # the worker lives on
    finally:
        splitter.close()


def test_waits_longer_than_the_spin_sleep_and_wake():
    """A worker's part that outlasts the caller's spin: the caller sleeps, and is woken.
    The caller's own part returns only once the worker has started, so the caller cannot
    take the slow part back."""
    splitter = Splitter(2, 20e-6)
    try:
        for _ in range(5):
            started = threading.Event()

            def slow(started: threading.Event = started) -> int:
                started.set()
                time.sleep(0.005)
                return 2

            def first(started: threading.Event = started) -> int:
                return int(started.wait(10))

            assert splitter.both(first, slow) == (1, 2)
            time.sleep(0.002)  # the worker stops spinning and sleeps between calls
    finally:
        splitter.close()


def test_a_caller_takes_back_parts_no_worker_has_started():
    """With the only worker held by another caller's part, both() and run() still finish:
    the caller runs its posted parts itself instead of waiting for the worker."""
    splitter = Splitter(2, 50e-6)
    started, release = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        release.wait(30)

    holder = threading.Thread(target=lambda: splitter.both(lambda: started.wait(10), hold))
    holder.start()
    try:
        assert started.wait(10)  # the worker is inside hold()
        done: list[object] = []

        def caller() -> None:
            hits = np.zeros(100_000, dtype=np.int64)

            def part(lo: int, hi: int) -> None:
                hits[lo:hi] += 1

            splitter.run(part, hits.shape[0])
            done.append((splitter.both(lambda: "a", lambda: "b"), bool((hits == 1).all())))

        t = threading.Thread(target=caller)
        t.start()
        t.join(timeout=20)
        assert done == [(("a", "b"), True)]
    finally:
        release.set()
        holder.join(timeout=20)
        splitter.close()
    assert not holder.is_alive()


def test_callers_in_several_threads_share_the_workers():
    splitter = Splitter(3, 100e-6)
    errors: list[BaseException] = []

    def caller(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(40):
                n = int(rng.integers(0, 40_000))
                out = np.zeros(n, dtype=np.int64)

                def part(lo: int, hi: int, out: np.ndarray = out) -> None:
                    out[lo:hi] = np.arange(lo, hi)

                splitter.run(part, n)
                assert np.array_equal(out, np.arange(n))
                a, b = splitter.both(lambda: seed, lambda: -seed)
                assert (a, b) == (seed, -seed)
        except BaseException as e:
            errors.append(e)

    callers = [threading.Thread(target=caller, args=(s,)) for s in range(4)]
    for c in callers:
        c.start()
    for c in callers:
        c.join(timeout=60)
    splitter.close()
    assert not errors and not any(c.is_alive() for c in callers)


def test_close_ends_the_workers():
    before = set(threading.enumerate())
    splitter = Splitter(3, 1e-3)
    splitter.both(lambda: None, lambda: None)
    mine = [t for t in threading.enumerate() if t not in before and t.name.startswith("score-")]
    assert len(mine) == 2
    splitter.close()
    for t in mine:
        t.join(timeout=5)
    assert not any(t.is_alive() for t in mine)


def test_requests_in_flight_share_the_threads():
    splitter = Splitter(2, 0.0)
    me = threading.get_ident()
    ranges: list[tuple[int, int]] = []

    def part(lo: int, hi: int) -> None:
        ranges.append((lo, hi))

    try:
        with splitter.request():  # alone: two ranges, one for each thread
            assert splitter.share() == 2
            splitter.run(part, 100_000)
        assert sorted(ranges) == [(0, 50_000), (50_000, 100_000)]
        ranges.clear()
        with splitter.request(), splitter.request():  # another request in flight: this one runs alone
            assert splitter.in_flight == 2 and splitter.share() == 1
            splitter.run(part, 100_000)
            assert splitter.both(threading.get_ident, threading.get_ident) == (me, me)
        assert ranges == [(0, 100_000)]
        with pytest.raises(KeyError), splitter.request():  # an error still ends the count
            raise KeyError("in the request")
        assert splitter.in_flight == 0 and splitter.share() == 2
    finally:
        splitter.close()


def test_more_threads_are_shared_out_among_the_requests():
    splitter = Splitter(8, 0.0)
    with splitter.request(), splitter.request(), splitter.request():
        assert splitter.share() == 2
    assert splitter.share() == 8  # none in flight: the watcher warming a version gets them all
    splitter.close()
