"""Write leases on a shard (docs/design/write-leases.md), on a clock the test moves."""

from __future__ import annotations

import pytest

from ps.server.leases import WriteLeases
from ps.server.tables import ANONYMOUS

A, B = 11, 22


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _leases(lease_s: float = 1.0) -> tuple[WriteLeases, Clock]:
    clock = Clock()
    return WriteLeases(lease_s, clock=clock), clock


def test_a_lease_goes_only_to_the_tables_only_writer_of_the_last_quiet_time() -> None:
    leases, clock = _leases()
    assert leases.grant("w", A) == 0.0  # it has not written
    leases.wrote("w", A)
    assert leases.grant("w", A) == 0.0  # a second rank may be about to start
    clock.now += leases.quiet_s
    assert leases.grant("w", A) == 1.0
    assert leases.grant("w", ANONYMOUS) == 0.0
    assert leases.grant("v", A) == 0.0  # per table


def test_another_writer_waits_for_the_lease_and_stops_its_renewal() -> None:
    leases, clock = _leases()
    leases.wrote("w", A)
    clock.now += leases.quiet_s
    assert leases.grant("w", A) == 1.0
    clock.now += 0.25
    assert leases.wait_to_write("w", A) == 0.0  # the holder writes at once
    assert leases.wait_to_write("w", B) == pytest.approx(0.75)
    assert leases.grant("w", A) == 0.0  # B is waiting: no renewal
    assert leases.wait_to_write("w", ANONYMOUS) == pytest.approx(0.75)  # a writer without an id waits too
    clock.now += 0.75
    assert leases.wait_to_write("w", B) == 0.0
    leases.wrote("w", B)
    assert leases.grant("w", B) == 0.0  # the table is shared now
    assert leases.waits == 2


def test_grants_resume_after_a_quiet_time_without_another_writer() -> None:
    leases, clock = _leases()
    leases.wrote("w", A)
    leases.wrote("w", B)  # two writers
    leases.wrote("w", A)
    assert leases.grant("w", A) == 0.0
    clock.now += leases.quiet_s
    assert leases.grant("w", A) == 1.0


def test_a_restore_ends_every_lease_and_zero_turns_them_off() -> None:
    leases, clock = _leases()
    leases.wrote("w", A)
    clock.now += leases.quiet_s
    assert leases.grant("w", A) == 1.0
    leases.clear()
    assert leases.wait_to_write("w", B) == 0.0
    off, clock = _leases(0.0)
    off.wrote("w", A)
    clock.now += 10.0
    assert off.grant("w", A) == 0.0
    with pytest.raises(ValueError):
        WriteLeases(-1.0)
