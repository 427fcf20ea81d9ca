"""The manager daemon's one writer of the repository: the scan that publishes exports and
the admin calls (pin, unpin, rollback, gc, publish now) take turns under one lock, and
serving is told after each change."""

from __future__ import annotations

import threading

from ctr.repository.versions import Policy, Repository
from modelmgr.commands import actions
from modelmgr.notify import Notifier
from modelmgr.publish.publisher import Publisher


class Manager:
    def __init__(self, repo: Repository, publisher: Publisher, notifier: Notifier) -> None:
        self.repo = repo
        self.publisher = publisher
        self.notifier = notifier
        self.lock = threading.Lock()

    def scan(self) -> list[int]:
        """Publishes every new READY export; returns the versions published."""
        with self.lock:
            published = self.publisher.poll()
            changed, self.publisher.changed = self.publisher.changed, False
        if changed:
            self.notifier.notify()
        return published

    def set_policy(self, change: actions.PolicyChange) -> tuple[Policy, int]:
        """Applies a policy change; returns it and how many serving replicas took the refresh."""
        with self.lock:
            policy = change(self.repo)
        return policy, self.notifier.notify()

    def gc(self, keep_full: int, dry_run: bool) -> list[int]:
        with self.lock:
            gone = actions.gc(self.repo, keep_full, dry_run)
            if not dry_run:
                self.publisher.forget(gone)
        return gone
