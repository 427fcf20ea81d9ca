"""REST/JSON beside gRPC (`serve --rest-port`): the same scores as the gRPC client's for
the same dicts, bad JSON refused with a 400 naming the field, the model status in TF
Serving's shape, tokens and TLS as gRPC has them, and one REST port shared by the
processes of `serve --processes 2`."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

import numpy as np

from bench.serving_model import FIELDS, publish, requests, spec_for
from boundless.certs import make
from boundless.processes import start
from ctr.repository.versions import Repository
from ctr.runtime.security import Identity
from serving.client import PredictClient


def _call(url: str, body: Any = None, headers: dict[str, str] | None = None, context: Any = None) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30, context=context) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _items(rng: np.random.Generator, n: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    items: list[dict[str, Any]] = [{f: int(rng.integers(1, 1000)) for f in FIELDS[20:]} for _ in range(n)]
    items[0][FIELDS[21]] = "a-string-token"
    items[1][FIELDS[22]] = [7, 0.5]  # a weighted feature
    return items, {f: int(rng.integers(1, 1000)) for f in FIELDS[:20]}


def test_rest_scores_as_grpc_does_and_refuses_bad_json_by_field(tmp_path):
    spec = spec_for("fm", k=4, hidden=())
    repo = Repository(tmp_path / "repo", "ctr")
    publish(repo, 1, spec, requests(2, items=10), keys=20_000, shards=2)
    serving = start("serving", ["serve", "--repo", str(repo.root), "--rest-port", "0", "--processes", "2"], tmp_path)
    try:
        serving.wait_ready()
        base = f"http://127.0.0.1:{serving.ready['rest_port']}/v1/models/ctr"
        client = PredictClient(serving.address)
        client.wait_for_model()
        items, context = _items(np.random.default_rng(3), 12)
        want = client.predict([{k: tuple(v) if isinstance(v, list) else v for k, v in i.items()} for i in items], context)
        for _ in range(6):  # new connections: both processes answer on the one port
            status, got = _call(base + ":predict", {"instances": items, "context": context})
            assert status == 200 and got["model_version"] == 1 and got["model"] == "ctr"
            np.testing.assert_allclose(got["predictions"], want.scores, atol=1e-6)
        columns = {f: [i.get(f) for i in items] for f in FIELDS[20:] if f not in (FIELDS[21], FIELDS[22])}
        plain = client.predict([{f: i[f] for f in columns} for i in items], context)
        status, got = _call(base + ":predict", {"inputs": columns, "context": context})  # TF Serving's columnar form
        assert status == 200
        np.testing.assert_allclose(got["predictions"], plain.scores, atol=1e-6)
        assert _call(base)[1]["model_version_status"][0] == {
            "version": "1",
            "state": "AVAILABLE",
            "status": {"error_code": "OK", "error_message": ""},
            "labels": ["stable"],
        }
        bad = [
            (b"{not json", 400, "body: not JSON"),
            ({"instances": []}, 400, "instances: expected a non-empty list"),
            ({"instances": [items[0], 5]}, 400, "instances[1]: expected an object"),
            ({"instances": [{FIELDS[20]: {"x": 1}}]}, 400, f"instances[0].{FIELDS[20]}: expected a string"),
            ({"instances": [{FIELDS[20]: [1, "x"]}]}, 400, f"instances[0].{FIELDS[20]}: its value 'x' is not a number"),
            ({"instances": [{"no_such_field": 1}]}, 400, "'no_such_field'"),  # strict, as the client library
            ({"instances": [items[0]], "extra": 1}, 400, "unknown key(s) 'extra'"),
            ({"instances": [items[0]], "inputs": columns}, 400, "either 'instances' (rows) or 'inputs'"),
            ({"inputs": {FIELDS[20]: [1, 2], FIELDS[21]: [1]}}, 400, f"inputs.{FIELDS[21]}: 1 values for 2 items"),
            ({"inputs": {FIELDS[20]: [1, {"x": 1}]}}, 400, f"inputs.{FIELDS[20]}: expected numbers or strings"),
        ]
        for body, code, text in bad:
            status, doc = _call(base + ":predict", body)
            assert status == code and text in doc["error"], (body, status, doc)
        status, doc = _call(base + ":predict", {"instances": [{"no_such_field": 1}], "strict": False})
        assert status == 200 and doc["unknown_features"] == 1
        assert _call(f"http://127.0.0.1:{serving.ready['rest_port']}/v1/models/other:predict", {"instances": [{}]})[0] == 404
        big = {"instances": [{FIELDS[20]: 1}] * 20_001}
        assert _call(base + ":predict", big)[0] == 413  # above --max-items, as gRPC refuses it
        assert _call(base + ":predict", {"instances": items, "context": context})[0] == 200  # still serving
    finally:
        serving.stop()


def test_rest_takes_the_tls_and_tokens_grpc_takes(tmp_path):
    paths = make(tmp_path / "certs", ["localhost", "127.0.0.1"])
    spec = spec_for("lr", k=4, hidden=())
    repo = Repository(tmp_path / "repo", "ctr")
    publish(repo, 1, spec, requests(1, items=5), keys=5_000, shards=2)
    tls = ["--tls-cert", str(paths["node"]), "--tls-key", str(paths["node_key"]), "--tls-ca", str(paths["ca"])]
    args = ["serve", "--repo", str(repo.root), "--rest-port", "0", *tls, "--accepted-tokens-file", str(paths["tokens"])]
    serving = start("serving", args, tmp_path)
    try:
        serving.wait_ready()
        identity = Identity(None, None, paths["ca"].read_bytes(), token=paths["predict_token"].read_text().strip())
        PredictClient(serving.address, identity=identity).wait_for_model()
        ctx = ssl.create_default_context(cafile=str(paths["ca"]))
        url = f"https://127.0.0.1:{serving.ready['rest_port']}/v1/models/ctr:predict"
        body = {"instances": [{FIELDS[20]: 3}]}
        assert _call(url, body, context=ctx)[0] == 401
        assert _call(url, body, {"Authorization": "Bearer " + "x" * 20}, context=ctx)[0] == 401
        token = paths["predict_token"].read_text().strip()
        status, doc = _call(url, body, {"Authorization": f"Bearer {token}"}, context=ctx)
        assert status == 200 and len(doc["predictions"]) == 1
        try:  # plain HTTP to the TLS port gets nothing
            urllib.request.urlopen(url.replace("https", "http"), data=json.dumps(body).encode(), timeout=10)
            raise AssertionError("plain HTTP was answered on the TLS port")
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
    finally:
        serving.stop()


def test_silent_and_idle_connections_are_closed_and_connections_past_the_cap_refused(tmp_path):
    """Each REST connection holds a thread of the serving process, whose thread limit the
    gRPC server and the scoring threads share. A client that connects and says nothing (or
    stops mid-request, or keeps an idle connection) held its thread for good, and enough of
    them used up the process's threads. Now such a connection is closed after --rest-idle-s,
    and connections past --rest-max-connections are answered 503 while the others serve."""
    import socket
    import time

    spec = spec_for("lr", k=4, hidden=())
    repo = Repository(tmp_path / "repo", "ctr")
    publish(repo, 1, spec, requests(2, items=10), keys=20_000, shards=2)
    args = ["serve", "--repo", str(repo.root), "--rest-port", "0", "--rest-idle-s", "1", "--rest-max-connections", "4"]
    serving = start("serving", args, tmp_path)
    held: list[socket.socket] = []
    try:
        serving.wait_ready()
        port = serving.ready["rest_port"]
        base = f"http://127.0.0.1:{port}/v1/models/ctr"
        PredictClient(serving.address).wait_for_model()
        items, context = _items(np.random.default_rng(3), 4)
        for _ in range(4):  # silent clients: connected, nothing sent
            held.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        time.sleep(0.3)
        extra = socket.create_connection(("127.0.0.1", port), timeout=10)
        reply = extra.recv(4096)  # the fifth: answered at once and closed
        assert reply.startswith(b"HTTP/1.1 503") and b"--rest-max-connections" in reply, reply
        extra.close()
        started = time.monotonic()
        for s in held:  # each silent connection closed by the server after --rest-idle-s
            assert s.recv(4096) == b""
        assert time.monotonic() - started < 5
        status, got = _call(base + ":predict", {"instances": items, "context": context})
        assert status == 200 and len(got["predictions"]) == 4  # their slots are free again
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{serving.ready['metrics_port']}/metrics", timeout=10).read()
        assert b"boundless_serving_rest_connections_refused_total 1.0" in metrics
    finally:
        for s in held:
            s.close()
        serving.stop()
