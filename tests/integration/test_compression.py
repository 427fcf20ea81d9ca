"""Compressed pushes end to end: training converges with every codec, compressed pushes
cross gRPC with pull sessions and subsets, and a shard refuses a payload that does not
match its push with INVALID_ARGUMENT, changing nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grpc
import numpy as np
import pytest

from boundless.processes import start
from ctr.model.spec import ModelSpec
from ctr.routing import shard_of
from ps.api import SparsePush
from ps.client import PSClient
from ps.compression.compressor import Compressor, parse_codec
from ps.compression.payload import VALUE_CODECS

CODECS = ["fp32", "fp16", "bf16", "int8", "epgc8", "epgc9", "epgc11", "onebit", "topk:0.01+onebit", "topk:0.05+int8"]


def train(source: Path, out: Path, *args: str) -> dict[str, float]:
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(source), "--no-follow", "--metrics-port", "-1"]
    proc = subprocess.run([*cmd, "--metrics-out", str(out), *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def fp32_run(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, float]:
    out = tmp_path_factory.mktemp("fp32") / "m.json"
    return train(
        data_dir / "frappe/frappe.test.libfm", out, "--local-shards", "2", "--batch-size", "1024", "--push-codec", "fp32"
    )


@pytest.mark.parametrize("codec", [*CODECS[1:], "fp32|bf16", "onebit|int8"])
def test_training_converges_with_every_codec(codec, fp32_run, data_dir, tmp_path):
    """PUSH|PULL: the second codec is the pull replies'."""
    push, _, pull = codec.partition("|")
    flags = ["--local-shards", "2", "--batch-size", "1024", "--push-codec", push, "--pull-codec", pull or "auto"]
    got = train(data_dir / "frappe/frappe.test.libfm", tmp_path / "m.json", *flags)
    assert got["samples"] == fp32_run["samples"] and got["push_codec"] == push
    # the worker trains from pulled state plus its unsent residual: with exact pulls one
    # worker sees exactly the uncompressed state, so it predicts what the fp32 run predicts
    tol = 1e-6 if not pull else 0.01
    assert got["progressive_logloss"] <= fp32_run["progressive_logloss"] + tol, (got, fp32_run)
    assert got["window_auc"] >= fp32_run["window_auc"] - tol
    assert got["residual_rows_peak"] <= got["residual_rows_cap"]
    training_bytes = got["push_bytes"] - got["residual_drain_bytes"]
    assert training_bytes < fp32_run["push_bytes"] or push == "fp32"
    assert pull != "bf16" or got["pull_bytes"] < 0.6 * fp32_run["pull_bytes"]


def test_compressed_pushes_cross_grpc_and_bad_payloads_are_refused(tmp_path):
    shards = [start(f"ps{i}", ["ps", "--shard-index", str(i), "--shard-count", "2"], tmp_path) for i in range(2)]
    try:
        for s in shards:
            s.wait_ready()
        client = PSClient.connect([s.address for s in shards], push_codec="topk:0.1+onebit")
        client.control.declare(ModelSpec("lr").tables())
        keys = np.unique(np.random.default_rng(0).integers(1, 2**63, 2000, dtype=np.uint64))
        g = np.random.default_rng(1).normal(size=(keys.shape[0], 2)) * 0.01
        for _ in range(20):  # sessions: the subset travels as gaps over the session's keys
            state, session = client.pull("w", keys, state=True)
            client.push("w", keys, g, session, kind="delta")
        client.flush_residuals()
        state = client.pull("w", keys, state=True)[0]
        np.testing.assert_allclose(state[:, 0], 20 * g[:, 0], atol=1e-9)  # z: every update, exactly, once drained
        assert client.compression_stats()["residual_flushed_rows"] > 0

        exact = client.pull("w", keys, state=True)[0]
        for codec, tol in (("fp32", 2.0**-23), ("bf16", 2.0**-8), ("int8", None)):
            lossy = PSClient.connect([s.address for s in shards], pull_codec=codec)
            got, _ = lossy.pull("w", keys, state=True)
            if tol is None:  # per-column scale: within a step of each column's range
                span = exact.max(axis=0) - exact.min(axis=0)
                assert np.all(np.abs(got - exact) <= span / 255 * 1.001 + 1e-12)
            else:
                np.testing.assert_allclose(got, exact, rtol=tol, atol=1e-30)
            lossy.close()
        lossless = PSClient.connect([s.address for s in shards], pull_codec="fp64z")
        np.testing.assert_array_equal(lossless.pull("w", keys, state=True)[0].view(np.uint64), exact.view(np.uint64))
        lossless.close()
        with pytest.raises(grpc.RpcError) as err:
            client.transport.pull(0, "w", keys[shard_of(keys, 2) == 0], False, True, "fp8")  # type: ignore[call-arg]
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "unknown value codec" in str(err.value.details())

        transport = client.transport
        part = keys[shard_of(keys, 2) == 0][:3]
        before = client.pull("w", part, state=True)[0]
        good, _, _ = Compressor(parse_codec("epgc11"), 10).compress(part, np.ones((3, 2)))
        payload = good.payload(with_subset=False)
        for bad, what in (
            (payload[:-1], "body is"),
            (payload[:4] + bytes([5, 5, 2]) + payload[7:], "the push names 3"),
            (b"\x00" + payload[1:], "magic"),
            (payload[:2] + bytes([VALUE_CODECS["fp64z"].wire_id]) + payload[3:], "fp64z: "),
        ):
            with pytest.raises(grpc.RpcError) as err:
                transport.push(SparsePush(0, "w", part, (), bad, "delta"))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and what in str(err.value.details())
        np.testing.assert_array_equal(client.pull("w", part, state=True)[0], before)
        transport.push(SparsePush(0, "w", part, (), payload, "delta"))
        assert not np.array_equal(client.pull("w", part, state=True)[0], before)
        client.close()
    finally:
        for s in shards:
            s.stop()


def test_deepfm_with_onebit_adam_on_the_mlp_converges(data_dir, tmp_path):
    """1-bit and 0/1 Adam sync the MLP through the PS: fp32 gradients for 5 warm-up steps of
    79, then 1-bit momentum, so the dense pushes are a fraction of fp32 gradients every step
    (79 x 3,137 parameters x 4 bytes, ~1 MB; the MLP's initial state goes once as fp64
    deltas, ~100 KB), and the model learns about as well as the default, where the MLP trains
    on the worker (hybrid) and reaches the PS only at the end."""
    common = ["--model", "deepfm", "--hidden", "32,16", "--batch-size", "256", "--max-samples", "20000"]
    source = data_dir / "frappe/frappe.test.libfm"
    hybrid = train(source, tmp_path / "a.json", *common)
    fp32_every_step = 79 * 3137 * 4 + 3137 * 4 * 8  # and the initial state, w|m|v|t in fp64
    assert hybrid["dense_push_bytes"] < fp32_every_step / 4, hybrid  # the initial and the final MLP only
    for codec in ("onebit-adam:5", "zeroone-adam:5"):
        got = train(source, tmp_path / "b.json", *common, "--dense-codec", codec)
        assert got["dense_push_bytes"] < fp32_every_step / 4, (codec, got)
        assert got["window_auc"] >= hybrid["window_auc"] - 0.02 and got["window_auc"] > 0.85, (codec, got, hybrid)


def test_bad_codec_flags_name_the_flag(data_dir, tmp_path):
    for flags, msg in (
        (["--push-codec", "topk:3"], "--push-codec"),
        (["--dense-codec", "onebit-adam:0"], "--dense-codec"),
        (["--model", "lr", "--dense-codec", "onebit-adam"], "applies to the MLP"),
        (["--residual-rows", "0"], "--residual-rows"),
        (["--pull-cache", "sometimes"], "--pull-cache"),
        (["--pull-cache-rows", "0"], "--pull-cache-rows"),
    ):
        cmd = [sys.executable, "-m", "boundless", "train", "--source", str(data_dir / "frappe/frappe.test.libfm"), "--no-follow"]
        proc = subprocess.run([*cmd, "--metrics-port", "-1", *flags], capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and msg in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]


def test_a_state_difference_crosses_grpc_and_a_moved_base_is_refused_then_written_whole(tmp_path):
    """The MLP's cut write as its difference from the shards' base, over two shard
    processes: the shards end with the worker's state bit for bit, in fewer bytes than the
    whole state; when a shard's range is not that base any more, it refuses the difference
    (FAILED_PRECONDITION) and the state goes whole, still bit for bit."""
    import torch

    from ctr.model.mlp import DeepCTR
    from ctr.model.optim import OptimizerSpec
    from trainer.step.dense_replica import DenseReplica

    shards = [start(f"ps{i}", ["ps", "--shard-index", str(i), "--shard-count", "2"], tmp_path) for i in range(2)]
    try:
        for s in shards:
            s.wait_ready()
        spec = ModelSpec("deepfm", k=8, fields=("a", "b", "c", "d"), hidden=(64, 64))
        client = PSClient.connect([s.address for s in shards])  # auto: compressing against shard processes
        client.control.declare(spec.tables())
        r = DenseReplica(DeepCTR(spec, seed=1), OptimizerSpec("adam", lr=0.01))
        client.push_dense("mlp", r.state_rows(), kind="state")
        r.read_from(client)

        def mlp_bytes() -> int:
            return sum(sent for sent, _ in client.wire.snapshot().get("mlp", {}).values())

        def train_and_write() -> int:
            for _ in range(3):
                r.net.zero_grad(set_to_none=True)
                r.net(torch.randn(32, 4, 8)).backward(torch.randn(32))
                r.step(32)
            before = mlp_bytes()
            r.write_to(client)
            held = client.pull_dense("mlp", state=True)
            np.testing.assert_array_equal(held.view(np.uint64), r.state_rows().view(np.uint64))
            return mlp_bytes() - before

        diff = train_and_write()
        assert diff < 0.8 * r.state_rows().shape[0] * 16, diff
        other = PSClient.connect([s.address for s in shards])  # another writer moves the base
        moved = other.pull_dense("mlp", state=True)
        moved[:, 0] += 0.5
        other.push_dense("mlp", moved, kind="state")
        assert train_and_write() > diff  # the refused difference, then the whole state
        other.close()
        client.close()
    finally:
        for s in shards:
            s.stop()
