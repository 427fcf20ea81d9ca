"""The daemon shell in process: a served daemon is NOT_SERVING until it says it is ready, every
call is counted by method and status code, and a stop turns health NOT_SERVING first."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import REGISTRY

from ctr.runtime import daemon
from ctr.runtime.server_config import ServerConfig

CHECK = "/grpc.health.v1.Health/Check"


def _calls(method: str, code: str) -> float:
    return REGISTRY.get_sample_value("boundless_rpc_calls_total", {"daemon": "test", "method": method, "code": code}) or 0.0


def test_health_starts_not_serving_and_calls_are_counted():
    served = daemon.serve(ServerConfig(), "test", lambda s: None, ["x.Service"], {})
    try:
        stub = health_pb2_grpc.HealthStub(grpc.insecure_channel(f"127.0.0.1:{served.port}"))
        ok_before, missing_before = _calls(CHECK, "OK"), _calls(CHECK, "NOT_FOUND")
        status = health_pb2.HealthCheckResponse
        assert stub.Check(health_pb2.HealthCheckRequest(service="x.Service")).status == status.NOT_SERVING
        assert stub.Check(health_pb2.HealthCheckRequest(service="")).status == status.NOT_SERVING
        served.ready("")
        assert stub.Check(health_pb2.HealthCheckRequest(service="")).status == status.SERVING
        assert stub.Check(health_pb2.HealthCheckRequest(service="x.Service")).status == status.NOT_SERVING
        served.ready()
        assert stub.Check(health_pb2.HealthCheckRequest(service="x.Service")).status == status.SERVING
        with pytest.raises(grpc.RpcError) as e:
            stub.Check(health_pb2.HealthCheckRequest(service="no.Such"))
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert _calls(CHECK, "OK") - ok_before == 5
        assert _calls(CHECK, "NOT_FOUND") - missing_before == 1
        timed = REGISTRY.get_sample_value("boundless_rpc_seconds_count", {"daemon": "test", "method": CHECK})
        assert timed is not None and timed >= 6
        served.health.enter_graceful_shutdown()
        assert stub.Check(health_pb2.HealthCheckRequest(service="")).status == status.NOT_SERVING
    finally:
        served.stop(grace_s=0)
