"""`boundless train` makes torch's idle OpenMP threads sleep rather than spin, unless the
user chose otherwise (docs/design/hybrid-training.md)."""

from __future__ import annotations

import os

import pytest

from boundless.cli import build_parser
from ctr.runtime.config import ConfigError
from trainer import cli


def _run_until_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    args = build_parser("train").parse_args(["train", "--source", "/nonexistent/stream", "--model", "nosuchmodel"])
    with pytest.raises((ConfigError, SystemExit, ValueError)):
        cli.run(args)


def test_the_trainer_sets_passive_openmp_waits_before_torch_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    _run_until_refused(monkeypatch)
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


def test_a_users_openmp_wait_policy_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    _run_until_refused(monkeypatch)
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
