"""2 PS shards + trainer + model manager + serving on loopback, trained on real Frappe rows."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from ctr.batch import build_batch
from ctr.formats import make_parser
from ctr.schema import PRESETS
from modelmgr.repository import Repository
from serving.client import PredictClient, encode_batch


def _offline_weights(repo: Repository, version: int) -> tuple[dict[int, float], float]:
    """Key -> weight and bias of a version, read straight from its files with numpy."""
    m = repo.manifest(version)
    base = repo.manifest(m["base_version"])
    weights: dict[int, float] = {}
    for f in base["files"]:
        if f["role"] == "sparse_full":
            raw = (repo.path(base["version"]) / f["name"]).read_bytes()
            slots = np.frombuffer(raw[64:], dtype=np.uint32).reshape(-1, 3)
            keys = slots[:, 0].astype(np.uint64) | (slots[:, 1].astype(np.uint64) << np.uint64(32))
            vals = slots[:, 2].view(np.float32)
            weights.update({int(k): float(v) for k, v in zip(keys, vals, strict=True) if k})
    for v in m["delta_chain"]:
        for f in repo.manifest(v)["files"]:
            if f["role"] == "sparse_delta":
                raw = (repo.path(v) / f["name"]).read_bytes()
                count = int.from_bytes(raw[12:20], "little")
                keys = np.frombuffer(raw[64 : 64 + 8 * count], dtype=np.uint64)
                vals = np.frombuffer(raw[64 + 8 * count : 64 + 12 * count], dtype=np.float32)
                weights.update({int(k): float(x) for k, x in zip(keys, vals, strict=True)})
    bias = 0.0
    for f in m["files"]:
        if f["role"] == "dense":
            raw = (repo.path(version) / f["name"]).read_bytes()
            if int.from_bytes(raw[20:28], "little") == 0 and len(raw) > 64:
                bias = float(np.frombuffer(raw[64:68], dtype=np.float32)[0])
    return weights, bias


def _wait(predicate, timeout: float, what: str) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what} not within {timeout}s")
        time.sleep(0.05)
    return time.monotonic() - start


def test_frappe_train_publish_serve_rollback(platform, data_dir: Path, tmp_path: Path):
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:40000]
    stream = tmp_path / "frappe40k.libfm"
    stream.write_text("\n".join(lines) + "\n")
    out = tmp_path / "trainer.json"
    proc = platform.train(stream, "--metrics-out", str(out), "--window", "10000", "--export-interval-s", "0.5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["samples"] == 40000
    assert result["window_auc"] >= 0.85, result

    repo = Repository(platform.dir / "repo", "ctr")
    _wait(lambda: len(repo.processed_exports()) >= result["exports"], 30, "publishing every export")
    versions = repo.versions()
    assert len(versions) >= 3 and not repo.rejected()
    latest = versions[-1]
    client = PredictClient(platform.serving.address)
    _wait(lambda: client.status().version == latest, 10, "serving the latest version")

    # serving's scores equal scores computed offline from the published files
    parse = make_parser(PRESETS["libsvm"])
    batch = build_batch([parse(line) for line in lines[-200:]])
    pred = client.predict_encoded(encode_batch(batch))
    assert pred.version == latest and pred.scores.shape == (200,)
    weights, bias = _offline_weights(repo, latest)
    z = np.array(
        [
            bias + sum(weights.get(int(k), 0.0) * float(x) for k, x in zip(batch.keys[a:b], batch.values[a:b], strict=True))
            for a, b in zip(batch.offsets[:-1], batch.offsets[1:], strict=True)
        ]
    )
    np.testing.assert_allclose(pred.scores, 1 / (1 + np.exp(-z)), atol=1e-6)

    # rollback from the CLI is obeyed within 5 s
    previous = versions[-2]
    cli = platform.model_cli("rollback")
    assert cli.returncode == 0, cli.stdout + cli.stderr
    took = _wait(lambda: client.predict_encoded(encode_batch(batch)).version == previous, 5, "rollback")
    assert took <= 5
    assert repo.policy().describe() == f"pinned {previous}"
    listing = platform.model_cli("list", "--json")
    assert json.loads(listing.stdout)["policy"] == f"pinned {previous}"
    assert platform.model_cli("unpin").returncode == 0
    _wait(lambda: client.status().version == latest, 5, "unpin back to latest")
    client.close()
