"""`boundless train` and the Python API's training runs bound how long torch's idle OpenMP
threads spin before they sleep, unless the user chose a spin count or a wait policy
(trainer.openmp, docs/design/hybrid-training.md)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from boundless.cli import build_parser
from ctr.runtime import config as cfg
from ctr.runtime.config import ConfigError
from trainer import cli
from trainer.api import TrainerConfig, run_training
from trainer.openmp import SPIN_ROUNDS


def _run_until_refused() -> None:
    """A run refused at its config (a missing source), after the spin is set."""
    args = build_parser("train").parse_args(["train", "--source", "/nonexistent/stream"])
    with pytest.raises(ConfigError, match="no such file or folder"):
        cli.run(args)


@pytest.fixture(autouse=True)
def _no_openmp_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither variable set, and both as they were after the test (setenv first records them)."""
    for name in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def test_the_trainer_bounds_openmp_spins_before_torch_loads() -> None:
    _run_until_refused()
    assert os.environ["GOMP_SPINCOUNT"] == SPIN_ROUNDS
    assert "OMP_WAIT_POLICY" not in os.environ


@pytest.mark.parametrize("name,value", [("OMP_WAIT_POLICY", "PASSIVE"), ("OMP_WAIT_POLICY", "ACTIVE"), ("GOMP_SPINCOUNT", "0")])
def test_a_users_openmp_setting_stays(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    _run_until_refused()
    assert os.environ[name] == value
    # a user's wait policy keeps libgomp's spin for that policy: no count of ours overrides it
    assert "GOMP_SPINCOUNT" not in os.environ or name == "GOMP_SPINCOUNT"


def test_a_training_run_of_the_python_api_bounds_the_spin_too(tmp_path: Path) -> None:
    source = tmp_path / "clicks.txt"
    source.write_text("1 3:1 7:1\n0 4:1 7:1\n" * 50)
    settings = {"source": str(source), "model": "lr", "ps": "local", "format": "libsvm", "metrics_port": -1, "port": -1}
    summary = run_training(cfg.from_settings(TrainerConfig, settings, "test"), threading.Event())
    assert summary["samples"] == 100
    assert os.environ["GOMP_SPINCOUNT"] == SPIN_ROUNDS
