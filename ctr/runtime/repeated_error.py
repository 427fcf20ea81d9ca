"""An error a daemon meets at every poll while something it needs is away (S3, a disk):
said when it starts, then once a minute with how often it came, and once when it stops,
instead of a line every poll (a manager polling every 0.2 s through an S3 outage wrote
five ERROR lines a second)."""

from __future__ import annotations

import logging
import time

SAY_S = 60.0


class RepeatedError:
    def __init__(self, log: logging.Logger, say_s: float = SAY_S) -> None:
        self.log = log
        self.say_s = say_s
        self._since: float | None = None  # time.monotonic() of the first failure of this run of them
        self._count = 0
        self._said = 0.0

    def failed(self, text: str) -> None:
        now = time.monotonic()
        if self._since is None:
            self._since, self._count, self._said = now, 1, now
            self.log.error("%s", text)
            return
        self._count += 1
        if now - self._said >= self.say_s:
            self._said = now
            self.log.error("%s (%d times in %.0f s)", text, self._count, now - self._since)

    def passed(self, what: str) -> None:
        """The poll went through: says so once if it had been failing."""
        if self._since is not None:
            self.log.warning("%s after %.0f s in which it failed %d times", what, time.monotonic() - self._since, self._count)
            self._since = None
