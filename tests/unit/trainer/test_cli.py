"""`boundless train` makes torch's idle OpenMP threads sleep rather than spin, unless the
user chose otherwise (docs/design/hybrid-training.md)."""

from __future__ import annotations

import os

import pytest

from boundless.cli import build_parser
from ctr.runtime.config import ConfigError
from trainer import cli


def _run_until_refused() -> None:
    """A run refused at its config (a missing source), after the policy is set."""
    args = build_parser("train").parse_args(["train", "--source", "/nonexistent/stream"])
    with pytest.raises(ConfigError, match="no such file or folder"):
        cli.run(args)


def test_the_trainer_sets_passive_openmp_waits_before_torch_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    _run_until_refused()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


def test_a_users_openmp_wait_policy_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    _run_until_refused()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
