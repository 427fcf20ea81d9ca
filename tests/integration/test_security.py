"""The whole path over mutual TLS with bearer tokens, real processes on loopback: a PS
shard, the trainer, the model manager and serving, with certificates from `boundless
certs`. The trainer trains and exports, the manager publishes and notifies serving, and
`boundless predict` scores with the predict token, and an admin pins a version through the
manager's admin service. Then every refusal: a client with no
certificate or no TLS, a missing or forged token, a role too weak for the method; each is
counted in boundless_auth_refusals_total. Health checks stay open to TLS clients."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from boundless.certs import make
from boundless.processes import Daemon, start
from ctr.runtime.security import Identity, open_channel
from protos import modelmgr_pb2, modelmgr_pb2_grpc, predict_pb2, predict_pb2_grpc, ps_pb2, ps_pb2_grpc
from serving.client import PredictClient


def _identity(paths: dict[str, Path], cert: str | None = "client", token: str | None = None) -> Identity:
    return Identity(
        paths[cert].read_bytes() if cert else None,
        paths[f"{cert}_key"].read_bytes() if cert else None,
        paths["ca"].read_bytes(),
        token=paths[f"{token}_token"].read_text().strip() if token else None,
    )


def _code(call) -> grpc.StatusCode:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.RpcError) as e:
        call()
    return e.value.code()  # type: ignore[no-any-return]


def _refusals(d: Daemon) -> dict[tuple[str, str], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{d.ready['metrics_port']}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("boundless_auth_refusals_total{"):
            labels, value = line[len("boundless_auth_refusals_total{") :].split("} ")
            parts = dict(p.split("=", 1) for p in labels.split(","))
            out[(parts["method"].strip('"'), parts["reason"].strip('"'))] = float(value)
    return out


def test_the_whole_path_runs_over_mutual_tls_with_tokens_and_refuses_the_rest(tmp_path, data_dir):
    paths = make(tmp_path / "certs", ["localhost", "127.0.0.1"])
    tls = ["--tls-cert", str(paths["node"]), "--tls-key", str(paths["node_key"]), "--tls-ca", str(paths["ca"])]
    guarded = [*tls, "--tls-client-auth", "--accepted-tokens-file", str(paths["tokens"])]
    exports, repo = tmp_path / "exports", tmp_path / "repo"
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:6000]
    (tmp_path / "train.libfm").write_text("\n".join(lines) + "\n")
    daemons: list[Daemon] = []
    try:
        ps = start("ps", ["ps", "--export-root", str(exports), *guarded], tmp_path)
        serving = start("serving", ["serve", "--repo", str(repo), "--poll-s", "0.2", *guarded], tmp_path)
        daemons += [ps, serving]
        for d in daemons:
            d.wait_ready()
        manager_args = ["model", "watch", "--exports", str(exports), "--repo", str(repo), "--poll-s", "0.2"]
        manager_args += ["--notify", serving.address, "--min-samples", "100", *guarded]
        manager_args += ["--token-file", str(paths["trainer_token"])]  # its identity for the notifications
        manager = start("modelmgr", manager_args, tmp_path)
        daemons.append(manager)
        manager.wait_ready()
        train = [sys.executable, "-m", "boundless", "train", "--source", str(tmp_path / "train.libfm"), "--ps", ps.address]
        train += ["--no-follow", "--export-dir", str(exports), "--export-interval-s", "0", "--metrics-port", "-1"]
        train += [*tls, "--token-file", str(paths["trainer_token"])]
        done = subprocess.run(train, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]

        PredictClient(serving.address, identity=_identity(paths, token="predict")).wait_for_model(60)
        env = {
            **os.environ,
            "BOUNDLESS_TLS_CA": str(paths["ca"]),
            "BOUNDLESS_TLS_CERT": str(paths["client"]),
            "BOUNDLESS_TLS_KEY": str(paths["client_key"]),
            "BOUNDLESS_TOKEN_FILE": str(paths["predict_token"]),
        }
        cmd = [
            sys.executable,
            "-m",
            "boundless",
            "predict",
            "--address",
            serving.address,
            "--data",
            str(tmp_path / "train.libfm"),
        ]
        scored = subprocess.run([*cmd, "--limit", "1000"], capture_output=True, text=True, timeout=120, env=env)
        assert scored.returncode == 0 and "scored 1000 samples" in scored.stderr, scored.stderr[-3000:]

        status = predict_pb2.ModelStatusRequest(model="ctr")

        def predictor(identity: Identity) -> predict_pb2_grpc.PredictorStub:
            return predict_pb2_grpc.PredictorStub(open_channel(serving.address, identity=identity))

        # no client certificate (TLS, and a good token), then no TLS at all: no handshake
        assert (
            _code(lambda: predictor(_identity(paths, None, "admin")).ModelStatus(status, timeout=10))
            == grpc.StatusCode.UNAVAILABLE
        )
        plain = predict_pb2_grpc.PredictorStub(grpc.insecure_channel(serving.address))
        assert _code(lambda: plain.ModelStatus(status, timeout=10)) == grpc.StatusCode.UNAVAILABLE
        # a certificate but no token, or a forged one
        assert _code(lambda: predictor(_identity(paths)).ModelStatus(status, timeout=10)) == grpc.StatusCode.UNAUTHENTICATED
        forged = dataclasses.replace(_identity(paths), token="x" * 43)
        assert _code(lambda: predictor(forged).ModelStatus(status, timeout=10)) == grpc.StatusCode.UNAUTHENTICATED
        # the predict role may not refresh serving, nor push to or checkpoint the PS
        weak = _identity(paths, token="predict")
        refresh = predict_pb2.RefreshRequest(model="ctr")
        assert _code(lambda: predictor(weak).Refresh(refresh, timeout=10)) == grpc.StatusCode.PERMISSION_DENIED
        ps_weak = ps_pb2_grpc.ParameterServerStub(open_channel(ps.address, identity=weak))
        forged_cut = ps_pb2.PrepareRequest(cut=99, stream_offsets=b"{}")
        assert _code(lambda: ps_weak.Prepare(forged_cut, timeout=10)) == grpc.StatusCode.PERMISSION_DENIED
        assert _code(lambda: ps_weak.Push(ps_pb2.PushRequest(table="w"), timeout=10)) == grpc.StatusCode.PERMISSION_DENIED
        ps_trainer = ps_pb2_grpc.ParameterServerStub(open_channel(ps.address, identity=_identity(paths, token="trainer")))
        assert ps_trainer.Stats(ps_pb2.StatsRequest(), timeout=10).tables  # the trainer's role may
        # an export names a folder under the shard's root, never a path
        away = ps_pb2.ExportRequest(kind=ps_pb2.EXPORT_FULL, directory=str(tmp_path / "elsewhere"))
        assert _code(lambda: ps_trainer.Export(away, timeout=30)) == grpc.StatusCode.INVALID_ARGUMENT
        assert not (tmp_path / "elsewhere").exists()
        # health stays open to a TLS client without a token (the kubelet's probes)
        health = health_pb2_grpc.HealthStub(open_channel(ps.address, identity=_identity(paths)))
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == health_pb2.HealthCheckResponse.SERVING

        # the manager's admin service: reads for predict, publishing for trainer, the rest for admin
        def admin(role: str) -> modelmgr_pb2_grpc.ModelAdminStub:
            return modelmgr_pb2_grpc.ModelAdminStub(open_channel(manager.address, identity=_identity(paths, token=role)))

        described = admin("predict").Describe(modelmgr_pb2.DescribeRequest(), timeout=10)
        assert described.HasField("target") and described.versions
        rollback = modelmgr_pb2.RollbackRequest(reason="forged")
        assert _code(lambda: admin("predict").Rollback(rollback, timeout=10)) == grpc.StatusCode.PERMISSION_DENIED
        assert _code(lambda: admin("trainer").Rollback(rollback, timeout=10)) == grpc.StatusCode.PERMISSION_DENIED
        gc = modelmgr_pb2.GcRequest(keep_full=1)
        assert _code(lambda: admin("trainer").Gc(gc, timeout=10)) == grpc.StatusCode.PERMISSION_DENIED
        assert not admin("trainer").Publish(modelmgr_pb2.PublishRequest(), timeout=30).published  # all published already
        model_cmd = [sys.executable, "-m", "boundless", "model", "pin", str(described.versions[0]), "--manager", manager.address]
        model_cmd += ["--serving", serving.address, "--reason", "test"]
        env["BOUNDLESS_TOKEN_FILE"] = str(paths["trainer_token"])
        as_trainer = subprocess.run(model_cmd, capture_output=True, text=True, timeout=60, env=env)
        assert as_trainer.returncode == 2 and "PERMISSION_DENIED" in as_trainer.stdout, as_trainer.stdout
        env["BOUNDLESS_TOKEN_FILE"] = str(paths["admin_token"])
        as_admin = subprocess.run(model_cmd, capture_output=True, text=True, timeout=60, env=env)
        assert as_admin.returncode == 0 and "every replica serves" in as_admin.stdout, as_admin.stdout + as_admin.stderr
        pinned = PredictClient(serving.address, identity=_identity(paths, token="predict")).status().version
        assert pinned == described.versions[0]

        managed = _refusals(manager)
        assert managed[("/boundless.modelmgr.ModelAdmin/Rollback", "role")] >= 2
        assert managed[("/boundless.modelmgr.ModelAdmin/Pin", "role")] >= 1
        served = _refusals(serving)
        assert served[("/boundless.predict.Predictor/ModelStatus", "missing")] >= 1
        assert served[("/boundless.predict.Predictor/ModelStatus", "unknown")] >= 1
        assert served[("/boundless.predict.Predictor/Refresh", "role")] >= 1
        assert _refusals(ps)[("/boundless.ps.ParameterServer/Prepare", "role")] >= 1
        for d in daemons:
            d.check()
    finally:
        for d in daemons:
            d.stop()
