"""An error met at every poll is said when it starts, once a minute, and once when it ends."""

from __future__ import annotations

import logging

import pytest

from ctr.runtime.repeated_error import RepeatedError


def test_an_error_at_every_poll_is_said_at_its_start_once_a_minute_and_at_its_end(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test-repeated")
    said = RepeatedError(log, say_s=3600.0)
    with caplog.at_level(logging.WARNING, logger="test-repeated"):
        said.passed("fine")  # nothing failed: nothing said
        for _ in range(50):
            said.failed("scan failed: S3 down")
        said.passed("scanned again")
        said.passed("scanned again")
        said.failed("scan failed: disk full")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["scan failed: S3 down", lines[1], "scan failed: disk full"], lines
    assert lines[1].startswith("scanned again after") and "failed 50 times" in lines[1]

    every = RepeatedError(log, say_s=0.0)  # a minute gone at every poll: each says its count
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="test-repeated"):
        every.failed("x")
        every.failed("x")
    assert [r.getMessage() for r in caplog.records] == ["x", "x (2 times in 0 s)"]


def test_a_run_of_failures_says_how_long_and_how_many_at_the_level_asked(caplog, monkeypatch) -> None:
    """What a source's give-up reads: how long the failures have lasted (from the first of
    this run, not from an earlier run) and how many there were; a source says it as a warning."""
    clock = iter([100.0, 130.0, 700.0, 701.0, 900.0])
    monkeypatch.setattr("ctr.runtime.repeated_error.time.monotonic", lambda: next(clock))
    log = logging.getLogger("test-repeated-level")
    outage = RepeatedError(log, level=logging.WARNING)
    with caplog.at_level(logging.WARNING, logger="test-repeated-level"):
        assert not outage.failing and outage.count == 0
        assert outage.failed("broker down") == 0.0
        assert outage.failed("broker down") == 30.0
        assert outage.failed("broker down") == 600.0 and outage.failing and outage.count == 3
        outage.passed("broker back")  # 701
        assert not outage.failing and outage.count == 0
        assert outage.failed("broker down") == 0.0  # a new run starts its own clock
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * 4
    assert [r.getMessage() for r in caplog.records][1] == "broker down (3 times in 600 s)"
