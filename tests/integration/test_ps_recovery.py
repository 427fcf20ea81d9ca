"""A PS shard killed with -9 comes back from RocksDB at its checkpoint cut."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from boundless.processes import start
from ctr.model.spec import ModelSpec
from ctr.routing import shard_of
from ps.api import ModelMismatch
from ps.client import PSClient
from tests.support import wait_for_text

SPEC = ModelSpec("fm", k=4)


def test_checkpointed_rows_survive_kill_9(tmp_path):
    db = tmp_path / "ps0-db"
    shard = start("ps0", ["ps", "--shard-index", "0", "--shard-count", "1", "--data-dir", str(db)], tmp_path)
    try:
        shard.wait_ready()
        client = PSClient.connect([shard.address])
        assert all(client.control.declare(SPEC.tables()).values())
        keys = np.unique(np.random.default_rng(0).integers(1, 2**64 - 1, 5000, dtype=np.uint64))
        assert (shard_of(keys, 1) == 0).all()
        grads = np.random.default_rng(1).normal(size=(keys.shape[0], 4)).astype(np.float32)
        _, session = client.pull("v", keys)
        client.push("v", keys, grads, session, samples=64)
        state, session = client.pull("w", keys, state=True)
        client.push("w", keys, np.full_like(state, 0.01), session, kind="delta", samples=64)
        client.push_dense("bias", np.array([0.7], np.float32), samples=64)
        client.control.prepare(1, json.dumps({"file": "a", "offset": 123, "line": 4}).encode())
        client.control.commit(1)
        digests_at_cut = {t.name: (t.digest, t.samples) for t in client.control.status()[0].tables}
        at_cut = {t: client.pull(t, keys, state=True)[0] for t in ("w", "v")}
        bias_at_cut = client.pull_dense("bias", state=True)
        client.push("v", keys[:100], grads[:100], samples=8)  # after the cut: must not survive the crash
        after_cut = {t.name: (t.digest, t.samples) for t in client.control.status()[0].tables}
        assert after_cut["v"][0] != digests_at_cut["v"][0] and after_cut["v"][1] == 72
        client.close()
        shard.kill()

        shard = start("ps0", ["ps", "--shard-index", "0", "--shard-count", "1", "--data-dir", str(db)], tmp_path)
        ready = shard.wait_ready()
        assert ready["checkpoint_seq"] > 0 and ready["committed_cut"] == 1
        client = PSClient.connect([shard.address])
        assert not any(client.control.declare(SPEC.tables()).values())  # restored, not created
        for t in ("w", "v"):
            np.testing.assert_array_equal(client.pull(t, keys, state=True)[0], at_cut[t])
        np.testing.assert_array_equal(client.pull_dense("bias", state=True), bias_at_cut)
        status = client.control.status()[0]
        assert json.loads(status.checkpoint_offsets) == {"file": "a", "offset": 123, "line": 4}
        assert {t.name: t.rows for t in status.tables}["v"] == keys.shape[0]
        assert {t.name: (t.digest, t.samples) for t in status.tables} == digests_at_cut
        assert digests_at_cut["v"][1] == 64 and digests_at_cut["v"][0] != 0
        client.close()
    finally:
        shard.stop()


def test_a_restored_table_declared_with_another_layout_is_refused(tmp_path):
    db = tmp_path / "db"
    shard = start("ps0", ["ps", "--shard-count", "1", "--data-dir", str(db)], tmp_path)
    try:
        shard.wait_ready()
        client = PSClient.connect([shard.address])
        client.control.declare(SPEC.tables())
        client.close()
        shard.stop()
        shard = start("ps0", ["ps", "--shard-count", "1", "--data-dir", str(db)], tmp_path)
        shard.wait_ready()
        client = PSClient.connect([shard.address])
        with pytest.raises(ModelMismatch, match=r"table v: sparse dim 4 \(adagrad\) held, sparse dim 8 \(adagrad\) declared"):
            client.control.declare(ModelSpec("fm", k=8).tables())
        client.close()
    finally:
        shard.stop()


def test_a_poisoned_push_gets_invalid_argument_and_changes_nothing(tmp_path):
    import grpc

    shard = start("ps0", ["ps", "--shard-count", "1"], tmp_path)
    try:
        shard.wait_ready()
        client = PSClient.connect([shard.address])
        client.control.declare(SPEC.tables())
        keys = np.array([11, 12, 13], dtype=np.uint64)
        client.push("w", keys, np.ones((3, 1), np.float32))
        before = client.pull("w", keys, state=True)[0]
        for bad in (3e38, np.nan, -np.inf):
            grads = np.ones((3, 1), np.float32)
            grads[1] = bad
            with pytest.raises(grpc.RpcError) as err:
                client.push("w", keys, grads)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        delta = np.zeros_like(before)
        delta[0, 0] = np.nan
        with pytest.raises(grpc.RpcError) as err:
            client.push("w", keys, delta, kind="delta")
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        np.testing.assert_array_equal(client.pull("w", keys, state=True)[0], before)
        client.close()
    finally:
        shard.stop()


def _train(source: Path, ps: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(source), "--format", "libsvm", "--no-follow"]
    cmd += ["--ps", ps, "--metrics-port", "-1", "--metrics-out", str(out), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_the_default_keeps_the_model_in_shards_given_a_data_directory(data_dir, tmp_path):
    """Before, cuts were off by default: shards started with --data-dir wrote nothing to it,
    and a shard killed after a run came back empty. Now the default takes cuts where every
    shard keeps a data directory (and one at the stream's end); a memory-only shard is
    never asked for one, and cuts asked of it are refused naming it."""
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:4000]
    source = tmp_path / "f.libsvm"
    source.write_text("\n".join(lines) + "\n")
    args = [["ps", "--shard-index", str(i), "--shard-count", "2", "--data-dir", str(tmp_path / f"ps{i}")] for i in range(2)]
    shards = [start(f"ps{i}", a, tmp_path) for i, a in enumerate(args)]
    try:
        ps = ",".join(s.address for s in shards if s.wait_ready())
        proc = _train(source, ps, tmp_path / "a.json")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "checkpoint cuts every 60 s (auto: every shard keeps a data directory)" in proc.stderr
        assert json.loads((tmp_path / "a.json").read_text())["checkpoint_interval_s"] == 60
        held = {t.name: t.rows for t in PSClient.connect([s.address for s in shards]).control.status()[1].tables}
        shards[1].kill()
        shards[1] = start("ps1", args[1], tmp_path)
        ready = shards[1].wait_ready()
        assert ready["committed_cut"] >= 1
        client = PSClient.connect([s.address for s in shards])
        assert {t.name: t.rows for t in client.control.status()[1].tables} == held and held["w"] > 0
        client.close()
        ps = ",".join(s.address for s in shards)  # the restarted shard listens on a new port
        again = _train(source, ps, tmp_path / "b.json")  # the stream taken up at its end: nothing left to train
        assert again.returncode == 0, again.stderr[-3000:]
        assert json.loads((tmp_path / "b.json").read_text())["samples"] == len(lines)
    finally:
        for s in shards:
            s.stop()
    memory = start("mem", ["ps", "--shard-index", "0", "--shard-count", "1"], tmp_path)
    try:
        memory.wait_ready()
        proc = _train(source, memory.address, tmp_path / "c.json")
        assert proc.returncode == 0 and "no checkpoint cuts (auto: the shards keep no data directory" in proc.stderr
        refused = _train(source, memory.address, tmp_path / "d.json", "--checkpoint-interval-s", "5")
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
        assert f"--checkpoint-interval-s 5: shard 0 ({memory.address}) keeps no data directory" in refused.stderr
    finally:
        memory.stop()


def test_a_trainer_superseded_by_another_on_its_shards_stops_naming_why(data_dir, tmp_path):
    """A second trainer (not a rank of the first's group) started on the same shards restores
    them under a newer generation, and the shards refuse the first one's calls. The first
    died at its next call with a gRPC traceback (ABORTED); now it stops with a message."""
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    for name, part in (("first", lines[:3000]), ("second", lines[3000:5000])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "part-0").write_text("\n".join(part) + "\n")
    shard = start("ps0", ["ps", "--data-dir", str(tmp_path / "ps0")], tmp_path)
    try:
        shard.wait_ready()
        cmd = [sys.executable, "-m", "boundless", "train", "--format", "libsvm", "--ps", shard.address, "--metrics-port", "-1"]
        log = tmp_path / "first.log"
        with open(log, "w") as out:
            first = subprocess.Popen(
                [*cmd, "--source", str(tmp_path / "first"), "--idle-exit-s", "6"], stdout=out, stderr=subprocess.STDOUT, text=True
            )
        try:
            wait_for_text(log, "checkpoint cuts every", first, timeout=120)
            second = subprocess.run(
                [*cmd, "--source", str(tmp_path / "second"), "--no-follow"], capture_output=True, text=True, timeout=120
            )
            assert second.returncode == 0, second.stderr[-3000:]
            assert first.wait(120) == 2
        finally:
            first.kill()
        text = log.read_text()
        assert "Traceback" not in text, text[-3000:]
        assert "this shard follows generation 2. Another trainer restored these shards after this one started" in text
    finally:
        shard.stop()
