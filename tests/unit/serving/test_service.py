"""The Predictor servicer in process (a real gRPC server on loopback in this process): scores
equal the servable model's own, and each bad request gets its status code, counted."""

from __future__ import annotations

import dataclasses

import grpc
import numpy as np
import pytest
from prometheus_client import REGISTRY

from bench.serving_model import publish, requests, spec_for
from ctr.repository.versions import Repository
from ctr.runtime import daemon
from ctr.runtime.server_config import ServerConfig
from protos import predict_pb2, predict_pb2_grpc
from serving.client import PredictClient
from serving.loading.watcher import ModelWatcher
from serving.request.encoding import decode, field_hash_ids
from serving.service import PredictorServicer

PREDICT = "/boundless.predict.Predictor/Predict"


def _served(watcher: ModelWatcher):
    def register(server: grpc.Server) -> None:
        predict_pb2_grpc.add_PredictorServicer_to_server(PredictorServicer(watcher, max_items=50), server)

    name = predict_pb2.DESCRIPTOR.services_by_name["Predictor"].full_name
    return daemon.serve(ServerConfig(), "serving-test", register, [name], {})


def _calls(code: str) -> float:
    labels = {"daemon": "serving-test", "method": PREDICT, "code": code}
    return REGISTRY.get_sample_value("boundless_rpc_calls_total", labels) or 0.0


@pytest.mark.parametrize("model", ["lr", "ffm"])
def test_predict_scores_as_the_loaded_version_and_refuses_bad_requests(tmp_path, model):
    spec = spec_for(model, k=4, hidden=())
    reqs = requests(2, seed=5, items=20)
    repo = Repository(tmp_path / "repo", "ctr")
    watcher = ModelWatcher(repo, 60.0)
    served = _served(watcher)
    client = PredictClient(f"127.0.0.1:{served.port}")
    try:
        with pytest.raises(grpc.RpcError) as e:
            client.predict_encoded(reqs[0])
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE  # no version yet
        publish(repo, 1, spec, reqs, keys=2_000, shards=2)
        watcher.refresh()
        assert watcher.current is not None and watcher.current.version == 1
        got = client.predict_encoded(reqs[1])
        want = watcher.current.score(decode(reqs[1], spec.field_count, field_hash_ids(tuple(spec.fields))))
        assert got.version == 1
        np.testing.assert_allclose(np.asarray(got.scores), want, rtol=1e-6)

        too_many = requests(1, seed=6, items=60)[0]  # this servicer takes at most 50 items
        invalid_before = _calls("INVALID_ARGUMENT")
        damaged = dataclasses.replace(reqs[0], dictionary=b"\xff" * 7)  # varints that never end
        for bad, code in [(too_many, grpc.StatusCode.RESOURCE_EXHAUSTED), (damaged, grpc.StatusCode.INVALID_ARGUMENT)]:
            with pytest.raises(grpc.RpcError) as e:
                client.predict_encoded(bad)
            assert e.value.code() == code
        stub = predict_pb2_grpc.PredictorStub(grpc.insecure_channel(f"127.0.0.1:{served.port}"))
        with pytest.raises(grpc.RpcError) as e:
            stub.Predict(predict_pb2.PredictRequest(item_count=2, dictionary=b"\x01\x02\x03", values=b"\x00"))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert _calls("INVALID_ARGUMENT") > invalid_before  # the shell counts what the servicer refuses
    finally:
        client.close()
        watcher.stop()
        served.stop(grace_s=0)
