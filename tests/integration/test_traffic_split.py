"""Version labels (`boundless model label`): a canary takes its share of routing keys, each
key always meeting one version; a shadow scores copies of live requests off the request
path and records its latency and score difference per label; unlabelling returns every key
to the stable version; `boundless model promote` makes a shadow stable only when every
replica's evidence passes its gate."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest

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


def _promote(repo: Repository, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "boundless", "model", "promote", *args, "--repo", str(repo.root), "--model-name", repo.model]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_a_shadow_is_promoted_only_on_evidence_every_replica_gives(tmp_path):
    reqs = requests(2, seed=12, items=20)
    repo, scores = two_fm_versions(tmp_path / "repo", reqs, keys=20_000)
    want = float(np.mean(np.abs(scores[2][0] - scores[1][0])))
    repo.set_policy(Policy("pinned", 1))
    _model(repo, "label", "candidate", "2", "--shadow", "1")
    replicas = [start(f"serving{i}", ["serve", "--repo", str(repo.root), "--poll-s", "0.05"], tmp_path) for i in range(2)]
    try:
        for r in replicas:
            r.wait_ready()
        addresses = ",".join(r.address for r in replicas)
        clients = [PredictClient(r.address) for r in replicas]
        for c in clients:
            c.wait_for_model()
        too_early = _promote(repo, "candidate", "--serving", addresses, "--min-shadow", "20", "--max-mean-abs-diff", "1")
        assert too_early.returncode == 2 and "fewer than the 20 asked" in too_early.stdout, too_early.stdout + too_early.stderr

        def evidence() -> int:
            for c in clients:
                c.predict_encoded(reqs[0])
            return min(sum(e.scored for e in c.status().shadows if e.label == "candidate") for c in clients)

        wait_until("15 shadow copies scored on each replica", lambda: evidence() >= 15, 60)
        for c in clients:
            (seen,) = [e for e in c.status().shadows if e.label == "candidate"]
            assert seen.version == 2 and seen.failed == 0
            assert abs(seen.mean_abs_diff - want) < 1e-5, (seen.mean_abs_diff, want)  # the versions' real difference

        strict = _promote(repo, "candidate", "--serving", addresses, "--min-shadow", "20", "--max-mean-abs-diff", "1e-9")
        assert strict.returncode == 2 and "(--max-mean-abs-diff)" in strict.stdout, strict.stdout + strict.stderr
        assert repo.policy().version == 1 and "candidate" in repo.routing()  # nothing changed
        dry = _promote(repo, "candidate", "--serving", addresses, "--min-shadow", "20", "--max-mean-abs-diff", "1", "--dry-run")
        assert dry.returncode == 0 and "dry run" in dry.stdout and repo.policy().version == 1, dry.stdout

        done = _promote(repo, "candidate", "--serving", addresses, "--min-shadow", "20", "--max-mean-abs-diff", "1")
        assert done.returncode == 0 and "every replica serves version 2" in done.stdout, done.stdout + done.stderr
        assert repo.policy().version == 2 and "promoted candidate on shadow evidence" in repo.policy().reason
        assert "candidate" not in repo.routing()
        for c in clients:
            got = c.predict_encoded(reqs[0])
            assert got.version == 2 and got.label == "stable" and np.allclose(got.scores, scores[2][0], atol=1e-5)
            c.close()
        missing = _promote(repo, "candidate", "--serving", addresses)
        assert missing.returncode == 2 and "no label 'candidate'" in missing.stdout, missing.stdout
    finally:
        for r in replicas:
            r.stop()


def _rest(url: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_request_that_names_a_label_or_a_version_gets_it_over_grpc_and_tf_servings_rest_paths(tmp_path):
    """An operator scores the canary itself (gRPC's label and version, TF Serving's
    /labels/L and /versions/V), whatever a routing key would pick; a version not loaded is
    NOT_FOUND naming what is; REST lists every loaded version and its metadata, and takes
    TF Serving clients' signature_name."""
    reqs = requests(2, seed=11, items=20)
    repo, scores = two_fm_versions(tmp_path / "repo", reqs, keys=20_000)
    repo.set_policy(Policy("pinned", 1))
    _model(repo, "label", "canary", "2", "--share", "0.3")
    serving = start("serving", ["serve", "--repo", str(repo.root), "--poll-s", "0.05", "--rest-port", "0"], tmp_path)
    try:
        serving.wait_ready()
        client = PredictClient(serving.address)
        client.wait_for_model()
        wait_until("the canary loaded", lambda: any(client.predict_encoded(reqs[0], f"u{i}").version == 2 for i in range(50)))
        for i in range(20):
            canary = client.predict_encoded(reqs[0], f"user-{i}", label="canary")
            assert (canary.label, canary.version) == ("canary", 2)
            np.testing.assert_allclose(canary.scores, scores[2][0], atol=1e-5)
            stable = client.predict_encoded(reqs[0], f"user-{i}", version=1)
            assert (stable.label, stable.version) == ("stable", 1)
            np.testing.assert_allclose(stable.scores, scores[1][0], atol=1e-5)
        assert client.predict_encoded(reqs[0], label="stable", version=1).version == 1
        for label, version in (("", 3), ("beta", 0), ("canary", 1)):
            with pytest.raises(grpc.RpcError) as e:
                client.predict_encoded(reqs[0], label=label, version=version)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND  # type: ignore[attr-defined]
            assert "is not loaded here (loaded: stable 1, canary 2)" in e.value.details()  # type: ignore[attr-defined]

        base = f"http://127.0.0.1:{serving.ready['rest_port']}/v1/models/ctr"
        fields = list(client.status().fields)
        row = {fields[0]: "17", fields[1]: "3"}
        want = {v: client.predict([row], version=v).scores for v in (1, 2)}
        for path, version in (("/versions/2", 2), ("/labels/canary", 2), ("/labels/stable", 1), ("/versions/1", 1)):
            status, got = _rest(base + path + ":predict", {"signature_name": "serving_default", "instances": [row]})
            assert status == 200 and got["model_version"] == version, (path, got)
            np.testing.assert_allclose(got["predictions"], want[version], atol=1e-6)
        status, got = _rest(base + "/versions/3:predict", {"instances": [row]})
        assert status == 404 and "version 3 is not loaded here" in got["error"]
        status, got = _rest(base + ":predict", {"signature_name": "classify", "instances": [row]})
        assert status == 400 and "the one signature is 'serving_default'" in got["error"]
        status, got = _rest(base)
        assert status == 200
        assert [(s["version"], s["labels"]) for s in got["model_version_status"]] == [("1", ["stable"]), ("2", ["canary"])]
        status, got = _rest(base + "/labels/canary/metadata")
        assert status == 200 and got["model_spec"] == {"name": "ctr", "version": "2", "label": "canary"}
        assert got["metadata"]["model_type"] == "fm" and got["metadata"]["fields"] == fields
        labelled = client.status().labels
        assert [(x.label, x.version, round(x.share, 6)) for x in labelled] == [("canary", 2, 0.3)]
        rows = tmp_path / "rows.kv"  # labelled rows in the served transform's format (kv)
        rows.write_text("".join(f"{i % 2}\t{fields[0]}={i}\t{fields[1]}={i % 7}\n" for i in range(40)))
        cli = [sys.executable, "-m", "boundless", "predict", "--address", serving.address, "--data", str(rows)]
        for flags, says in ((["--version-label", "canary"], "version 2 (canary)"), (["--version", "1"], "version 1 (stable)")):
            scored = subprocess.run([*cli, *flags], capture_output=True, text=True, timeout=120)
            assert scored.returncode == 0 and f"scored 40 samples with ctr {says}" in scored.stderr, scored.stderr[-2000:]
        missing = subprocess.run([*cli, "--version", "7"], capture_output=True, text=True, timeout=120)
        assert missing.returncode == 2 and "NOT_FOUND: model 'ctr': version 7 is not loaded here" in missing.stderr
    finally:
        serving.stop()
