"""Write leases: a shard's promise to a client that keeps rows (docs/design/write-leases.md).

While a client holds a table's lease, no one else writes that table and no row of it moves,
so the client's copies that a push of its own confirmed stay the shard's rows bit for bit,
and its pulls of rows it holds need not travel. A lease lasts `lease_s` from its grant; the
client counts it from when it sent the push the grant answered, so its view ends first.

The shard grants a lease in the reply of a push by a keeping client, when that client has
been the table's only writer for `quiet_s` (so that ranks starting together do not wait on
each other's first lease). A write by anyone else waits until
the lease has run out (and stops renewals from the moment it asks). A shard that evicts
rows grants none (lease_s 0). One instance per shard, called under its lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ps.server.tables import ANONYMOUS

DEFAULT_LEASE_S = 1.0
QUIET_FACTOR = 2.0  # after a writer changes, no grants for this many lease lengths


@dataclass
class _Lease:
    client: int
    until: float


class WriteLeases:
    def __init__(
        self, lease_s: float = DEFAULT_LEASE_S, quiet_s: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if lease_s < 0 or (quiet_s is not None and quiet_s < 0):
            raise ValueError(f"lease_s {lease_s} and quiet_s {quiet_s} must be >= 0")
        self.lease_s = lease_s
        self.quiet_s = QUIET_FACTOR * lease_s if quiet_s is None else quiet_s
        self.clock = clock
        self._held: dict[str, _Lease] = {}
        self._quiet_until: dict[str, float] = {}
        self._last_writer: dict[str, int] = {}
        self.waits = 0  # writes that waited for another client's lease

    def _hold_off(self, table: str, now: float) -> float:
        """Stops grants on `table` for quiet_s; returns how long the lease held now still runs."""
        self._quiet_until[table] = max(self._quiet_until.get(table, 0.0), now + self.quiet_s)
        lease = self._held.get(table)
        if lease is None:
            return 0.0
        if lease.until <= now:
            del self._held[table]
            return 0.0
        return lease.until - now

    def wait_to_write(self, table: str, client: int) -> float:
        """Seconds a write by `client` must wait (0: it may write now). A write by another
        client than the lease holder, or by ANONYMOUS, also stops renewals."""
        lease = self._held.get(table)
        if lease is None or (lease.client == client and client != ANONYMOUS):
            return 0.0
        wait = self._hold_off(table, self.clock())
        if wait > 0:
            self.waits += 1
        return wait

    def wrote(self, table: str, client: int) -> None:
        """A write by `client` landed: a writer other than the last one (or the first) is
        granted nothing for quiet_s: the table may be shared."""
        if self._last_writer.get(table) != client:
            self._quiet_until[table] = max(self._quiet_until.get(table, 0.0), self.clock() + self.quiet_s)
        self._last_writer[table] = client

    def grant(self, table: str, client: int) -> float:
        """The lease (seconds, 0: none) for the reply to `client`'s push that just landed."""
        if self.lease_s <= 0 or client == ANONYMOUS or self._last_writer.get(table) != client:
            return 0.0
        now = self.clock()
        if now < self._quiet_until.get(table, 0.0):
            return 0.0
        lease = self._held.get(table)
        if lease is not None and lease.client != client and lease.until > now:
            return 0.0
        self._held[table] = _Lease(client, now + self.lease_s)
        return self.lease_s

    def clear(self) -> None:
        """A restore: the clients of the trainer generation before are refused from now on,
        so their leases promise nothing any more."""
        self._held.clear()
        self._quiet_until.clear()
        self._last_writer.clear()
