"""An error a process meets at every poll while something it needs is away (S3, a disk, a
Kafka broker): said when it starts, then once a minute with how often it came, and once
when it stops, instead of a line every poll (a manager polling every 0.2 s through an S3
outage wrote five ERROR lines a second). The model manager's scans and publishes and the
trainer's S3 and Kafka sources keep their outages with it."""

from __future__ import annotations

import logging
import time

SAY_S = 60.0


class RepeatedError:
    def __init__(self, log: logging.Logger, say_s: float = SAY_S, level: int = logging.ERROR) -> None:
        self.log = log
        self.say_s = say_s
        self.level = level  # a source that waits out an outage says it as a warning
        self._since: float | None = None  # time.monotonic() of the first failure of this run of them
        self._count = 0
        self._said = 0.0

    @property
    def failing(self) -> bool:
        """The last poll failed."""
        return self._since is not None

    @property
    def count(self) -> int:
        """The failures of the run of them going on (0: none is)."""
        return self._count if self._since is not None else 0

    def failed(self, text: str) -> float:
        """A failed poll, said as above; returns how long they have failed, in seconds."""
        now = time.monotonic()
        if self._since is None:
            self._since, self._count, self._said = now, 1, now
            self.log.log(self.level, "%s", text)
            return 0.0
        self._count += 1
        if now - self._said >= self.say_s:
            self._said = now
            self.log.log(self.level, "%s (%d times in %.0f s)", text, self._count, now - self._since)
        return now - self._since

    def passed(self, what: str) -> None:
        """The poll went through: says so once if it had been failing."""
        if self._since is not None:
            self.log.warning("%s after %.0f s in which it failed %d times", what, time.monotonic() - self._since, self._count)
            self._since = None
