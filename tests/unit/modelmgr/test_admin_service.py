"""The ModelAdmin servicer in process (a real gRPC server on loopback in this process): the
version commands change the policy, and each bad call gets its status code."""

from __future__ import annotations

import grpc
import pytest

from bench.serving_model import publish, requests, spec_for
from ctr.repository.versions import Repository
from ctr.runtime import daemon
from ctr.runtime.server_config import ServerConfig
from modelmgr.admin_service import ModelAdminServicer
from modelmgr.manager import Manager
from modelmgr.notify import Notifier
from modelmgr.publish.gate import QualityGate
from modelmgr.publish.publisher import Publisher
from protos import modelmgr_pb2, modelmgr_pb2_grpc


def test_pin_rollback_unpin_and_refusals(tmp_path):
    repo = Repository(tmp_path / "repo", "ctr")
    spec, reqs = spec_for("lr", k=4, hidden=()), requests(1, items=5)
    for v in (1, 2, 3):
        publish(repo, v, spec, reqs, keys=200, shards=1, seed=v)
    (tmp_path / "exports").mkdir()
    manager = Manager(repo, Publisher(repo, tmp_path / "exports", QualityGate()), Notifier("", "ctr"))

    def register(server: grpc.Server) -> None:
        modelmgr_pb2_grpc.add_ModelAdminServicer_to_server(ModelAdminServicer(manager), server)

    served = daemon.serve(ServerConfig(), "modelmgr-test", register, ["boundless.modelmgr.ModelAdmin"], {})
    stub = modelmgr_pb2_grpc.ModelAdminStub(grpc.insecure_channel(f"127.0.0.1:{served.port}"))
    try:
        state = stub.Describe(modelmgr_pb2.DescribeRequest())
        assert (state.target, list(state.versions)) == (3, [1, 2, 3])
        assert stub.Pin(modelmgr_pb2.PinRequest(version=2, reason="canary")).target == 2
        assert repo.policy().reason == "canary"
        assert stub.Unpin(modelmgr_pb2.UnpinRequest()).target == 3
        assert stub.Rollback(modelmgr_pb2.RollbackRequest(reason="bad")).target == 2  # the one before the live one
        for call, request, code in [
            (stub.Pin, modelmgr_pb2.PinRequest(version=9), grpc.StatusCode.NOT_FOUND),
            (stub.Describe, modelmgr_pb2.DescribeRequest(model="other"), grpc.StatusCode.NOT_FOUND),
            (stub.Gc, modelmgr_pb2.GcRequest(keep_full=0), grpc.StatusCode.INVALID_ARGUMENT),
            (stub.Publish, modelmgr_pb2.PublishRequest(export_id="../x"), grpc.StatusCode.INVALID_ARGUMENT),
        ]:
            with pytest.raises(grpc.RpcError) as e:
                call(request)
            assert e.value.code() == code, request
        assert repo.target() == 2  # refused calls changed nothing
    finally:
        served.stop(grace_s=0)
