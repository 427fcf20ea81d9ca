"""--curve-out: one JSON line per progress record; a file it cannot write (a full disk,
here a directory where the file should be) leaves a gap in the curve, said, and training
goes on, where the trainer stopped before."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from trainer.run.progress_log import ProgressLog


def test_a_curve_it_cannot_write_has_a_gap_and_training_goes_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    curve = tmp_path / "curve.jsonl"
    log = ProgressLog(str(curve))
    snap = {"samples": 10.0, "window_auc": 0.7, "window_logloss": 0.5, "progressive_logloss": 0.5}
    log.record(snap, trained=10)
    curve.unlink()
    curve.mkdir()  # the path cannot be opened for appending: OSError, as on a full disk
    caplog.set_level(logging.INFO, logger="trainer")
    log.record({**snap, "samples": 20.0}, trained=20)
    log.record({**snap, "samples": 30.0}, trained=30)
    assert "cannot write" in caplog.text and caplog.text.count("cannot write") == 1
    curve.rmdir()
    log.record({**snap, "samples": 40.0}, trained=40)
    assert "written again, after 2 records" in caplog.text
    assert [json.loads(line)["samples"] for line in curve.read_text().splitlines()] == [40.0]
