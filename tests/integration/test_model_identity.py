"""One model is never published, served or trained over as another: a PS refuses a trainer
of another model (and a wrong shard list) with a message and no change to what it holds;
the manager refuses another model's export, with the reason in `model list`."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from boundless.processes import start
from ctr.format.modelfile import load_image
from ctr.repository.versions import Repository

CRITEO = "criteo_10k/train_rows1-10000.tsv"
AVAZU = "avazu_10k/train_rows1-9999.csv"


def _train(platform, source: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return platform.train(source, "--port", "-1", *extra)


def _stats(addresses: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-m", "boundless", "ps", "stats", addresses, "--json"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


@pytest.fixture
def avazu(data_dir: Path, tmp_path: Path) -> Path:
    lines = (data_dir / AVAZU).read_text().splitlines()
    path = tmp_path / "avazu.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_ps_refuses_another_models_trainer_and_a_wrong_shard_list(platform, data_dir: Path, avazu: Path, tmp_path: Path):
    first = _train(platform, avazu, "--model", "ffm", "--k", "4")
    assert first.returncode == 0, first.stderr[-3000:]
    before = _stats(platform.ps_addresses)

    other_name = _train(platform, data_dir / CRITEO, "--model", "ffm", "--k", "4", "--model-name", "criteo")
    _no_traceback(other_name)
    assert "holds model 'ctr' (ffm" in other_name.stderr and "declares 'criteo' (ffm" in other_name.stderr
    other_type = _train(platform, avazu, "--model", "fm")
    _no_traceback(other_type)
    assert "--replace-model" in other_type.stderr
    other_fields = _train(platform, data_dir / CRITEO, "--model", "ffm", "--k", "4")  # same name and type, 39 fields
    _no_traceback(other_fields)
    assert "fields" in other_fields.stderr
    other_k = _train(platform, avazu, "--model", "ffm", "--k", "8")
    _no_traceback(other_k)
    assert "table v: sparse dim" in other_k.stderr and "--replace-model" in other_k.stderr
    other_kind = _train(platform, avazu, "--model", "ffm", "--k", "4", "--opt-v", "adam lr=0.01")
    _no_traceback(other_kind)
    assert "(adagrad) held" in other_kind.stderr and "(adam) declared" in other_kind.stderr
    one_of_two = platform.train(avazu, "--port", "-1", "--model", "ffm", "--k", "4", "--ps", platform.shards[1].address)
    _no_traceback(one_of_two)
    assert "is shard 1 of 2" in one_of_two.stderr
    assert _stats(platform.ps_addresses) == before  # nothing restored, emptied or declared

    replaced = _train(platform, avazu, "--model", "fm", "--replace-model")
    assert replaced.returncode == 0, replaced.stderr[-3000:]


def test_the_manager_refuses_another_models_export(platform, data_dir: Path, avazu: Path):
    first = _train(platform, avazu, "--model", "lr")
    assert first.returncode == 0, first.stderr[-3000:]
    repo = Repository(platform.dir / "repo", "ctr")
    deadline = time.monotonic() + 60
    while not repo.versions():
        assert time.monotonic() < deadline, "no version published"
        time.sleep(0.2)
    # another trainer, on PS shards of its own, exports into the same folder
    ps_args = ["ps", "--shard-count", "2", "--export-root", str(platform.dir / "exports")]
    ps = [start(f"ps-b{i}", [*ps_args, "--shard-index", str(i)], platform.dir) for i in range(2)]
    try:
        for d in ps:
            d.wait_ready()
        other = platform.train(data_dir / CRITEO, "--port", "-1", "--model", "fm", "--ps", ",".join(d.address for d in ps))
        assert other.returncode == 0, other.stderr[-3000:]
        deadline = time.monotonic() + 60
        while not repo.rejected():
            assert time.monotonic() < deadline, "the other model's export was not refused"
            time.sleep(0.2)
    finally:
        for d in ps:
            d.stop()
    assert len(repo.versions()) == 1
    listing = platform.model_cli("list")
    assert "rejected export" in listing.stdout and "identity" in listing.stdout and "a fm model" in listing.stdout


def test_a_trainer_restarted_with_other_optimizer_settings_exports_what_it_trains(avazu: Path, tmp_path: Path):
    """FTRL derives a weight from its state by l1 and l2: a second run with another l1 must
    export (and so serve) weights by that l1, not by the one the shards were first given."""
    lines = avazu.read_text().splitlines()
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    first.write_text("\n".join(lines[:5001]) + "\n")
    second.write_text("\n".join([lines[0], *lines[5001:]]) + "\n")
    exports = tmp_path / "exports"
    ps_args = ["ps", "--shard-count", "2", "--export-root", str(exports)]
    ps = [
        start(f"ps{i}", [*ps_args, "--shard-index", str(i), "--data-dir", str(tmp_path / f"ps{i}")], tmp_path) for i in range(2)
    ]
    try:
        for d in ps:
            d.wait_ready()
        addresses = ",".join(d.address for d in ps)

        def train(source: Path, *extra: str) -> subprocess.CompletedProcess[str]:
            cmd = [sys.executable, "-m", "boundless", "train", "--source", str(source), "--ps", addresses, "--model", "lr"]
            cmd += ["--export-dir", str(exports), "--metrics-port", "-1", *extra]
            return subprocess.run(cmd, capture_output=True, text=True, timeout=300)

        assert train(first).returncode == 0
        before = set(exports.iterdir())
        sparse = train(second, "--opt-w", "ftrl lr=0.5 l1=1000 l2=1")
        assert sparse.returncode == 0, sparse.stderr[-3000:]
        assert "table w: the PS shards held it with other settings" in sparse.stderr and "l1 0.1 -> 1000" in sparse.stderr
    finally:
        for d in ps:
            d.stop()
    (export,) = set(exports.iterdir()) - before
    assert json.loads((export / "export.json").read_text())["model"]["optimizers"]["w"]["l1"] == 1000
    nonzero = 0
    for image in export.glob("shard*-sparse.image"):
        table = load_image(image, mmap=False)
        _, slots = table.items()
        nonzero += int(np.count_nonzero(table.gather(slots)[:, 0]))
    assert nonzero == 0  # no feature's |z| passes l1 = 1000 within 10k samples
