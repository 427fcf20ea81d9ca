"""Bad input never crashes a daemon and never reaches serving."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from ctr.repository.versions import Repository
from protos import predict_pb2
from serving.client import PredictClient


def _train_small(platform, tmp_path: Path, data_dir: Path) -> Repository:
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:6000]  # a fifth held out: 1200
    src = tmp_path / "small.libfm"
    src.write_text("\n".join(lines) + "\n")
    proc = platform.train(src, "--metrics-out", str(tmp_path / "m.json"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    repo = Repository(platform.dir / "repo", "ctr")
    exports = json.loads((tmp_path / "m.json").read_text())["exports"]
    deadline = time.monotonic() + 20
    while len(repo.processed_exports()) < exports:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return repo


def test_bad_predict_requests_get_invalid_argument_and_server_keeps_serving(platform, tmp_path, data_dir):
    repo = _train_small(platform, tmp_path, data_dir)
    client = PredictClient(platform.serving.address)
    deadline = time.monotonic() + 60  # the first version is warmed (kernels compiled) before it serves
    while True:
        try:
            if client.status().version == repo.target():
                break
        except grpc.RpcError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.1)
    good = client.encoder.encode([{"0": "266"}, {"0": "317", "1": "1694"}])
    bad = [
        client.to_proto(good),
        client.to_proto(good),
        client.to_proto(good),
    ]
    bad[0].items = bad[0].items[:-1]  # truncated
    bad[1].dictionary = bad[1].dictionary[:-8]  # an index now points past the dictionary
    bad[2].item_count = 5  # inconsistent with the items bytes
    columnar = client.to_proto(client.encoder.encode_columns({"0": np.array([266, 317]), "1": np.array([1694, 1694])}))
    for mutate in (
        lambda r: setattr(r, "tokens", r.tokens[:-2]),  # a damaged zstd frame
        lambda r: setattr(r, "compression", 7),  # an unknown compression
        lambda r: setattr(r, "dictionary", b"\0" * 8),  # tokens and a dictionary at once
    ):
        req = predict_pb2.PredictRequest()
        req.CopyFrom(columnar)
        mutate(req)
        bad.append(req)
    raw = client.to_proto(client.encoder.encode_columns({"0": np.array([266])}, compress=False))
    raw.tokens = raw.tokens[:-1]  # a truncated token block
    bad.append(raw)
    for req in bad:
        with pytest.raises(grpc.RpcError) as err:
            client.stub.Predict(req, timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "Predict:" in err.value.details()
    # past the server's bounds (items, message size): RESOURCE_EXHAUSTED, memory stays bounded
    huge_count = client.to_proto(good)
    huge_count.item_count = 10**6
    huge_body = client.to_proto(good)
    huge_body.items = bytes(33 << 20)
    for req in (huge_count, huge_body):
        with pytest.raises(grpc.RpcError) as err:
            client.stub.Predict(req, timeout=20)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.value.details()
    assert client.predict_encoded(good).scores.shape == (2,)
    assert client.stub.Predict(columnar, timeout=5).scores[1] == pytest.approx(client.predict_encoded(good).scores[1], abs=1e-6)
    client.close()


def test_corrupted_export_is_rejected_and_never_served(platform, tmp_path, data_dir):
    repo = _train_small(platform, tmp_path, data_dir)
    exports = platform.dir / "exports"
    src = sorted(p for p in exports.iterdir() if json.loads((p / "export.json").read_text())["kind"] == "full")[-1]
    bad = exports / f"{int(src.name) + 10**15:020d}"  # sorts after every real export
    shutil.copytree(src, bad, ignore=shutil.ignore_patterns("READY"))  # READY last, as an exporter writes it
    manifest = json.loads((bad / "export.json").read_text())
    (bad / "export.json").write_text(json.dumps({**manifest, "id": bad.name}))
    image = next(bad.glob("*.image"))
    raw = bytearray(image.read_bytes())
    raw[len(raw) // 2] ^= 0x10  # one flipped byte
    image.write_bytes(bytes(raw))
    (bad / "READY").write_text(bad.name)
    before = repo.versions()
    deadline = time.monotonic() + 10
    while not repo.rejected():
        assert time.monotonic() < deadline, "the corrupted export was not rejected"
        time.sleep(0.1)
    rejected = repo.rejected()[0]
    assert rejected["export_id"] == bad.name
    assert "sha256" in rejected["reason"] or "crc32" in rejected["reason"]
    time.sleep(1.0)
    assert repo.versions() == before
    client = PredictClient(platform.serving.address)
    assert client.status().version == before[-1]
    client.close()


def _train_local(tmp_path: Path, data: Path, *flags: str):
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(data), "--no-follow", "--metrics-port", "-1", *flags]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--model", "ffm", "--k", "0"], "--k"),
        (["--model", "fm", "--opt-v", "adagrad lr=nan"], "--opt-v"),
        (["--model", "deepfm", "--hidden", "16,0"], "--hidden"),
        (["--model", "lr", "--opt-mlp", "adam"], "--opt-mlp"),
    ],
)
def test_a_model_that_does_not_fit_fails_at_start_naming_the_setting(tmp_path, data_dir, flags, needle):
    proc = _train_local(tmp_path, data_dir / "frappe/frappe.validation.libfm", *flags)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert needle in proc.stderr.splitlines()[-1]


def test_a_schema_that_does_not_fit_the_data_fails_at_start(tmp_path, data_dir):
    schema = tmp_path / "schema.yaml"
    schema.write_text("format: criteo\ncross: [[C1, C99]]\n")
    proc = _train_local(tmp_path, data_dir / "criteo_10k/train_rows1-10000.tsv", "--schema", str(schema), "--model", "ffm")
    assert proc.returncode == 2 and "schema.cross: unknown field 'C99'" in proc.stderr.splitlines()[-1], proc.stderr[-2000:]


def test_libffm_field_out_of_range_is_a_bad_line(tmp_path):
    data = tmp_path / "x.libffm"
    data.write_text("1 0:1:1 1:2:1\n0 0:3:1 1:4:1\n" * 1500 + "1 0:5:1 7:6:1\n")  # after the first lines it peeks at
    proc = _train_local(tmp_path, data, "--model", "ffm", "--format", "libffm", "--metrics-out", str(tmp_path / "m.json"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{data}:3001: feature 2: field 7 is out of range (the model has 2 fields)" in proc.stderr
    assert json.loads((tmp_path / "m.json").read_text())["bad_lines"] == 1


def test_an_export_whose_dense_file_does_not_fit_its_spec_is_rejected(tmp_path):
    import numpy as np
    from safetensors.numpy import save_file

    from ctr.format.modelfile import sha256_file, write_image
    from ctr.model.spec import ModelSpec
    from modelmgr.publish.verify import VerificationError, verify_export

    spec = ModelSpec("deepfm", k=2, fields=("a", "b"), hidden=(4,))
    write_image(tmp_path / "shard0-sparse.image", np.array([5], np.uint64), np.ones((1, 3), np.float32))
    wrong = {"bias": np.zeros(1, np.float32), "mlp.0.weight": np.zeros((4, 3), np.float32)}  # input is F*k = 4
    save_file(wrong, str(tmp_path / "dense.safetensors"))
    from ctr.repository.schemas import ExportManifest

    files = [
        {"name": n, "table": t, "role": r, "size": (tmp_path / n).stat().st_size, "sha256": sha256_file(tmp_path / n), "rows": 1}
        for n, t, r in (("shard0-sparse.image", "sparse", "sparse_full"), ("dense.safetensors", "dense", "dense"))
    ]
    manifest = {"id": "x1", "kind": "full", "shard_count": 1, "files": files, "model": {"name": "ctr", **spec.to_dict()}}
    with pytest.raises(VerificationError, match="mlp.0.weight is shaped \\(4, 3\\), the model spec needs \\(4, 4\\)"):
        verify_export(tmp_path, ExportManifest.model_validate({**manifest, "created": 0.0}))
