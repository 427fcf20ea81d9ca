"""Several models in one serving process (`serve --models`): each scores as a server of that
model alone would; a request names its model; a version over the model's memory budget is
not loaded and ModelStatus says why, while the other models serve."""

from __future__ import annotations

import json
import urllib.request

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.serving_model import publish, requests, spec_for
from boundless.processes import start
from ctr.repository.versions import Repository
from modelmgr.publish.evaluate import load_published
from serving.client import PredictClient
from serving.request.encoding import decode, field_hash_ids


def _publish_two(tmp_path):
    reqs = requests(2, seed=3, items=20)
    root = tmp_path / "repo"
    specs = {"big": spec_for("fm", k=8, hidden=()), "small": spec_for("lr", k=4, hidden=())}
    keys = {"big": 60_000, "small": 5_000}
    for name, spec in specs.items():
        publish(Repository(root, name), 1, spec, reqs, keys=keys[name], shards=2, seed=len(name))
    expected = {
        name: [
            load_published(Repository(root, name), 1).score(decode(r, spec.field_count, field_hash_ids(tuple(spec.fields))))
            for r in reqs
        ]
        for name, spec in specs.items()
    }
    return root, reqs, expected


def test_two_models_in_one_process_score_as_each_alone(tmp_path):
    root, reqs, expected = _publish_two(tmp_path)
    assert Repository.models_in(root) == ["big", "small"]
    serving = start("serving", ["serve", "--repo", str(root), "--models", "all", "--rest-port", "0"], tmp_path)
    try:
        serving.wait_ready()
        for name in ("big", "small"):
            client = PredictClient(serving.address, model=name)
            status = client.wait_for_model()
            assert status.model == name and list(status.served) == ["big", "small"] and status.load_error == ""
            for r, want in zip(reqs, expected[name], strict=True):
                got = client.predict_encoded(r)
                assert got.model == name and np.allclose(got.scores, want, atol=1e-6)
            client.close()
        rest = f"http://127.0.0.1:{serving.ready['rest_port']}/v1/models/small"
        with urllib.request.urlopen(rest, timeout=10) as r:
            assert json.loads(r.read())["model_version_status"][0]["version"] == "1"
        with urllib.request.urlopen(rest.removesuffix("/small"), timeout=10) as r:  # every model served
            listed = json.loads(r.read())["models"]
        assert [(m["name"], m["versions"], m["load_error"]) for m in listed] == [
            (name, [{"version": "1", "labels": ["stable"]}], "") for name in ("big", "small")
        ]
        anonymous = PredictClient(serving.address, model="")
        with pytest.raises(grpc.RpcError) as e:
            anonymous.predict_encoded(reqs[0])
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "name the model" in str(e.value.details())
        with pytest.raises(grpc.RpcError) as e:
            PredictClient(serving.address, model="nope").predict_encoded(reqs[0])
        assert e.value.code() == grpc.StatusCode.NOT_FOUND and "'big', 'small'" in str(e.value.details())
    finally:
        serving.stop()


def test_a_version_over_the_budget_is_not_loaded_and_the_reason_is_reported(tmp_path):
    root, reqs, expected = _publish_two(tmp_path)
    args = ["serve", "--repo", str(root), "--models", "big,small", "--model-memory-mb", "0.5"]
    serving = start("serving", args, tmp_path)
    try:
        small = PredictClient(serving.address if serving.wait_ready() else "", model="small")
        small.wait_for_model()
        assert np.allclose(small.predict_encoded(reqs[0]).scores, expected["small"][0], atol=1e-6)
        big = PredictClient(serving.address, model="big")
        with pytest.raises(grpc.RpcError) as e:
            big.status()
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "above the model's budget of 0.5 MiB" in str(e.value.details()), e.value.details()
        health = health_pb2_grpc.HealthStub(grpc.insecure_channel(serving.address))
        service = "boundless.predict.Predictor"  # ready: the refused model is settled, the other serves
        assert health.Check(health_pb2.HealthCheckRequest(service=service)).status == health_pb2.HealthCheckResponse.SERVING
    finally:
        serving.stop()
