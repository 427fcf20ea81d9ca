"""2 PS shards + trainer + model manager + serving on loopback, trained on real Frappe rows."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import numpy as np
import pytest

from ctr.data.batch import build_batch
from ctr.data.fields import FieldIndex
from ctr.data.formats import make_parser
from ctr.data.schema import PRESETS
from ctr.repository.versions import Repository
from serving.client import PredictClient, encode_batch
from tests.integration.offline import offline_scores
from tests.support import wait_until


def _wait(predicate, timeout: float, what: str) -> float:
    return wait_until(what, predicate, timeout, retry_on=(grpc.RpcError,))  # RpcError: no version loaded yet


def _train_and_serve(platform, data_dir: Path, tmp_path: Path, rows: int, *flags: str):
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:rows]
    stream = tmp_path / "frappe.libfm"
    stream.write_text("\n".join(lines) + "\n")
    out = tmp_path / "trainer.json"
    proc = platform.train(stream, "--metrics-out", str(out), "--window", "5000", "--export-interval-s", "0.1", *flags)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["samples"] + result["held_out_samples"] == rows  # the tail is the last export's holdout
    repo = Repository(platform.dir / "repo", "ctr")
    _wait(lambda: len(repo.processed_exports()) >= result["exports"], 30, "publishing every export")
    versions = repo.versions()
    assert len(versions) >= 2 and not repo.rejected()
    client = PredictClient(platform.serving.address)
    _wait(lambda: client.status().version == versions[-1], 15, "serving the latest version")
    fields = FieldIndex(list(client.status().fields), frozen=True)
    parse = make_parser(PRESETS["libsvm"], fields)
    batch = build_batch([parse(line) for line in lines[-200:]], fields.ids())
    return result, repo, versions, client, batch


MODELS = [
    ("fm", "--k", "8"),
    ("ffm", "--k", "4"),
    ("wdl", "--k", "8", "--hidden", "32,16"),
    ("deepfm", "--k", "8", "--hidden", "32,16"),
]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m[0])
def test_every_model_trains_publishes_and_serves_offline_scores(platform, data_dir: Path, tmp_path: Path, model):
    result, repo, versions, client, batch = _train_and_serve(platform, data_dir, tmp_path, 20000, "--model", *model)
    assert result["model"]["type"] == model[0] and result["push_bytes"] > 0 and result["pull_bytes"] > 0
    assert result["window_auc"] >= 0.85, result  # benchmarks reach 0.93-0.96; this is a floor
    pred = client.predict_encoded(encode_batch(batch))
    assert pred.version == versions[-1] and pred.scores.shape == (200,)
    np.testing.assert_allclose(pred.scores, offline_scores(repo, versions[-1], batch), atol=1e-5)
    # the columnar client sends raw ids in a zstd token dictionary; serving hashes them
    tail = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:20000][-200:]
    columns = {str(p): np.array([int(line.split()[1 + p].split(":")[0]) for line in tail]) for p in range(10)}
    encoded = client.encoder.encode_columns(columns)
    assert encoded.tokens and encoded.compression == 1 and not encoded.dictionary
    np.testing.assert_allclose(client.predict_encoded(encoded).scores, pred.scores, atol=1e-6)
    client.close()


def test_frappe_train_publish_serve_rollback(platform, data_dir: Path, tmp_path: Path):
    result, repo, versions, client, batch = _train_and_serve(platform, data_dir, tmp_path, 40000)
    assert result["window_auc"] >= 0.85, result
    latest = versions[-1]
    # serving's scores equal scores computed offline from the published files
    pred = client.predict_encoded(encode_batch(batch))
    assert pred.version == latest and pred.scores.shape == (200,)
    np.testing.assert_allclose(pred.scores, offline_scores(repo, latest, batch), atol=1e-5)

    # rollback from the CLI is obeyed within 5 s
    previous = versions[-2]
    cli = platform.model_cli("rollback")
    assert cli.returncode == 0, cli.stdout + cli.stderr
    _wait(lambda: client.predict_encoded(encode_batch(batch)).version == previous, 5, "rollback")
    assert repo.policy().describe() == f"pinned {previous}"
    listing = platform.model_cli("list", "--json")
    assert json.loads(listing.stdout)["policy"] == f"pinned {previous}"
    assert platform.model_cli("unpin").returncode == 0
    _wait(lambda: client.status().version == latest, 5, "unpin back to latest")

    # the same through the manager daemon's admin service
    manager = ("--manager", platform.manager.address)
    cli = platform.model_cli("rollback", *manager, "--reason", "remote test", "--serving", platform.serving.address)
    assert cli.returncode == 0 and "every replica serves" in cli.stdout, cli.stdout + cli.stderr
    assert client.status().version == previous and repo.policy().reason == "remote test"
    cli = platform.model_cli("pin", str(latest + 100), *manager)
    assert cli.returncode == 2 and "NOT_FOUND" in cli.stdout, cli.stdout
    cli = platform.model_cli("gc", "--keep-full", "1", "--dry-run", "--json", *manager)
    assert cli.returncode == 0 and json.loads(cli.stdout)["dry_run"], cli.stdout
    assert platform.model_cli("unpin", *manager, "--serving", platform.serving.address).returncode == 0
    assert client.status().version == latest
    published = platform.model_cli("publish", repo.manifest_model(latest).export_id, *manager)
    assert published.returncode == 0 and f"is version {latest}" in published.stdout, published.stdout
    for name, code in (("no-such-export", "NOT_FOUND"), ("../exports", "INVALID_ARGUMENT")):
        cli = platform.model_cli("publish", name, *manager)
        assert cli.returncode == 2 and code in cli.stdout, cli.stdout
    client.close()
