"""Serving with no version to load says why, now and then, and names the models the
repository does hold (a --model-name typo is the usual cause)."""

from __future__ import annotations

import logging

from bench.serving_model import requests
from ctr.repository.versions import Repository
from serving.loading.watcher import ModelWatcher
from tests.support import two_fm_versions


def test_waiting_for_a_model_names_the_ones_the_repository_holds(tmp_path, caplog):
    two_fm_versions(tmp_path / "repo", requests(1, seed=1, items=4), keys=100)
    watcher = ModelWatcher(Repository(tmp_path / "repo", "ctrr"), poll_s=60)
    try:
        with caplog.at_level(logging.WARNING, logger="serving"):
            watcher.refresh()
        assert "no version of model 'ctrr'" in caplog.text and "the repository holds 'ctr'" in caplog.text
    finally:
        watcher.stop()
