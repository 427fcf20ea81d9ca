"""`boundless train` bounds how long torch's idle OpenMP threads spin before they sleep,
unless the user chose a spin count or a wait policy (docs/design/hybrid-training.md)."""

from __future__ import annotations

import os

import pytest

from boundless.cli import build_parser
from ctr.runtime.config import ConfigError
from trainer import cli


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
    assert os.environ["GOMP_SPINCOUNT"] == cli.OPENMP_SPIN[1]
    assert "OMP_WAIT_POLICY" not in os.environ


@pytest.mark.parametrize("name,value", [("OMP_WAIT_POLICY", "PASSIVE"), ("OMP_WAIT_POLICY", "ACTIVE"), ("GOMP_SPINCOUNT", "0")])
def test_a_users_openmp_setting_stays(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    _run_until_refused()
    assert os.environ[name] == value
    # a user's wait policy keeps libgomp's spin for that policy: no count of ours overrides it
    assert "GOMP_SPINCOUNT" not in os.environ or name == "GOMP_SPINCOUNT"
