"""Version labels (`boundless model label`): a canary takes its share of routing keys, each
key always meeting one version; a shadow scores copies of live requests off the request
path and records its latency and score difference per label; unlabelling returns every key
to the stable version."""

from __future__ import annotations

import subprocess
import sys
import urllib.request

import numpy as np

from bench.serving_model import requests
from boundless.processes import start
from ctr.repository.versions import Policy, Repository
from serving.client import PredictClient
from tests.support import two_fm_versions, wait_until


def _model(repo: Repository, *args: str) -> str:
    cmd = [sys.executable, "-m", "boundless", "model", *args, "--repo", str(repo.root), "--model-name", repo.model]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def _metric(port_or_text: int | str, name: str, **labels: str) -> float:
    """A series' value (summed over other labels), from a scrape or from the port."""
    text = port_or_text if isinstance(port_or_text, str) else _scrape(port_or_text)
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_canary_takes_its_share_of_keys_and_a_shadow_scores_off_the_path(tmp_path):
    reqs = requests(2, seed=11, items=20)
    repo, scores = two_fm_versions(tmp_path / "repo", reqs, keys=20_000)
    expected = {v: scores[v][0] for v in (1, 2)}
    repo.set_policy(Policy("pinned", 1))
    assert "canary=2 (share 0.3" in _model(repo, "label", "canary", "2", "--share", "0.3")
    serving = start("serving", ["serve", "--repo", str(repo.root), "--poll-s", "0.05"], tmp_path)
    try:
        serving.wait_ready()
        client = PredictClient(serving.address)
        client.wait_for_model()
        wait_until("the canary loaded", lambda: any(client.predict_encoded(reqs[0], f"u{i}").version == 2 for i in range(50)))
        seen: dict[str, tuple[str, int]] = {}
        for _ in range(3):
            for i in range(200):
                got = client.predict_encoded(reqs[0], f"user-{i}")
                assert np.allclose(got.scores, expected[got.version], atol=1e-5)
                assert (got.label, got.version) in (("stable", 1), ("canary", 2))
                assert seen.setdefault(f"user-{i}", (got.label, got.version)) == (got.label, got.version)  # one key, one version
        share = sum(1 for label, _ in seen.values() if label == "canary") / len(seen)
        assert 0.15 < share < 0.45, share
        assert client.predict_encoded(reqs[0]).label == "stable"  # no key: the stable version

        _model(repo, "unlabel", "canary")
        _model(repo, "label", "shadow", "2", "--shadow", "1")
        port = serving.ready["metrics_port"]

        def shadowed() -> bool:
            client.predict_encoded(reqs[0], "again")
            return _metric(port, "boundless_serving_shadow_score_difference_count", label="shadow") >= 10

        wait_until("shadow scores recorded", shadowed, 60)
        for i in range(30):
            got = client.predict_encoded(reqs[0], f"user-{i}")
            assert got.label == "stable" and got.version == 1  # the shadow never answers
            assert np.allclose(got.scores, expected[1], atol=1e-5)
        text = _scrape(port)  # sum and count of one moment: the shadow thread may still be scoring
        diff_sum = _metric(text, "boundless_serving_shadow_score_difference_sum", label="shadow")
        diff_count = _metric(text, "boundless_serving_shadow_score_difference_count", label="shadow")
        want = float(np.mean(np.abs(expected[2] - expected[1])))
        # every copy differs by the same amount: the sum is that many of it (a scrape may land
        # between an observation's sum and its count: one off at most)
        copies = diff_sum / want
        assert abs(copies - round(copies)) < 1e-3 and abs(copies - diff_count) <= 1, (diff_sum, diff_count, want)
        assert _metric(port, "boundless_serving_version_predict_seconds_count", label="shadow", path="shadow") >= 10
        live = {
            label: _metric(port, "boundless_serving_version_predict_seconds_count", label=label, path="live")
            for label in ("stable", "canary")
        }
        assert live["stable"] >= 300 and live["canary"] >= 60, live  # each label's own latency histogram
    finally:
        serving.stop()
