"""Every daemon answers gRPC health checks, the trainer included; reflection, which lists
the services to any client, is off unless a daemon is started with --reflection."""

from __future__ import annotations

import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from bench.serving_model import publish, requests, spec_for
from boundless.processes import start
from ctr.repository.versions import Repository
from serving.client import PredictClient

PREDICTOR = "boundless.predict.Predictor"


def _health(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status  # type: ignore[no-any-return]


def _services(address: str) -> list[str]:
    with grpc.insecure_channel(address) as ch:
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        replies = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10)
        return [s.name for r in replies for s in r.list_services_response.service]


def test_the_trainer_has_a_health_service_and_reflection_is_opt_in(tmp_path, data_dir):
    (tmp_path / "in").mkdir()
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:2000]
    (tmp_path / "in" / "a.libfm").write_text("\n".join(lines) + "\n")
    trainer = start("trainer", ["train", "--source", str(tmp_path / "in"), "--ps", "local", "--port", "0"], tmp_path)
    ps = start("ps", ["ps"], tmp_path)
    ps_open = start("ps-open", ["ps", "--reflection"], tmp_path)
    try:
        for d in (trainer, ps, ps_open):
            d.wait_ready()
        assert _health(trainer.address) == health_pb2.HealthCheckResponse.SERVING
        assert _health(ps.address) == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as e:
            _services(ps.address)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "boundless.ps.ParameterServer" in _services(ps_open.address)
    finally:
        for d in (trainer, ps, ps_open):
            d.stop()


def test_serving_is_ready_to_score_once_a_warmed_version_serves(tmp_path):
    """The process is live ("" SERVING) from the start; its Predictor (the readiness probe of
    the chart) only once its first version is loaded and warmed."""
    repo = Repository(tmp_path / "repo", "ctr")
    serving = start("serving", ["serve", "--repo", str(repo.root), "--poll-s", "0.1"], tmp_path)
    try:
        serving.wait_ready()
        assert _health(serving.address) == health_pb2.HealthCheckResponse.SERVING
        assert _health(serving.address, PREDICTOR) == health_pb2.HealthCheckResponse.NOT_SERVING  # nothing to serve
        reqs = requests(1, seed=2, items=5)
        publish(repo, 1, spec_for("lr", k=4, hidden=()), reqs, keys=2_000, shards=2)
        client = PredictClient(serving.address)
        client.wait_for_model(60)
        until = time.monotonic() + 10  # health is set just after the version takes over
        while _health(serving.address, PREDICTOR) != health_pb2.HealthCheckResponse.SERVING:
            assert time.monotonic() < until, "the Predictor is not SERVING once a version serves"
            time.sleep(0.05)
        assert client.predict_encoded(reqs[0]).version == 1
    finally:
        serving.stop()
