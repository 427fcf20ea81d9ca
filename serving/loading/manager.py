"""Which version serving should load next, decided from state alone (TF Serving's Manager):
the version serving now, the policy's target (the Source: the repository's policy), and the
versions that failed with when each may be tried again. Pure; the watcher
(serving.loading.watcher) asks it at every look and carries the answer out."""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_RETRY_S = 60.0  # the longest wait before a failed version is tried again


@dataclass
class LoadState:
    serving: int | None = None  # the version serving now
    failed: dict[int, tuple[int, float]] = field(default_factory=dict)  # version -> (failures, monotonic next try)


@dataclass(frozen=True)
class Idle:
    """Nothing to do: no target yet (`waiting` while nothing serves), or the target serves."""

    waiting: bool = False


@dataclass(frozen=True)
class Load:
    version: int
    failures: int = 0  # earlier failed loads of it


@dataclass(frozen=True)
class Backoff:
    """The target failed to load; it is tried again at `until` (monotonic seconds)."""

    version: int
    until: float


Action = Idle | Load | Backoff


def next_action(state: LoadState, target: int | None, now: float) -> Action:
    if target is None:
        return Idle(waiting=state.serving is None)
    if state.serving == target:
        return Idle()
    failures, next_try = state.failed.get(target, (0, 0.0))
    if now < next_try:
        return Backoff(target, next_try)
    return Load(target, failures)


def failed(state: LoadState, version: int, failures: int, now: float, poll_s: float) -> float:
    """Records a failed load; returns the delay before the next try (doubling, capped)."""
    delay = min(MAX_RETRY_S, poll_s * 2 ** (failures + 1))
    state.failed[version] = (failures + 1, now + delay)
    return delay


def loaded(state: LoadState, version: int) -> None:
    state.failed.pop(version, None)
    state.serving = version
