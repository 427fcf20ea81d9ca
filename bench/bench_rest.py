"""REST/JSON against gRPC for one 200-item request of named features (20 context fields,
40 fields an item: 8,020 features), against one `boundless serve --rest-port 0` on
loopback. Rows: both sides start from the same Python dicts, gRPC through
PredictClient.predict (the client encodes them under the served transform), REST as an
"instances" JSON body on one kept-alive HTTP connection (the server encodes them).
Columns: numpy arrays through PredictClient.predict_columns, against an "inputs" JSON body
of the same values. Alternating rounds of --requests each; reports
p50/p99 ms of the whole call, encoding included, and the server's core-ms per request.
Asserts nothing; writes bench/results/rest.json.

    .venv/bin/python bench/bench_rest.py [--model fm] [--requests 200] [--reps 3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_serving import cpu_of, server_pids  # noqa: E402
from bench.serving_model import CTX_FIELDS, FIELDS, publish, requests, spec_for  # noqa: E402
from boundless.processes import start  # noqa: E402
from ctr.repository.versions import Repository  # noqa: E402
from serving.client import PredictClient  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ITEMS = 200


def dicts(rng: np.random.Generator) -> tuple[list[dict[str, int]], dict[str, int]]:
    items = [{f: int(rng.integers(1, 1 << 30)) for f in FIELDS[CTX_FIELDS:]} for _ in range(ITEMS)]
    return items, {f: int(rng.integers(1, 1 << 30)) for f in FIELDS[:CTX_FIELDS]}


def timed_round(call: Any, bodies: list[Any], n: int, pids: list[int]) -> dict[str, float]:
    lat = []
    cpu0 = cpu_of(pids)
    for i in range(n):
        t = time.perf_counter()
        call(bodies[i % len(bodies)])
        lat.append(time.perf_counter() - t)
    ms = np.array(lat) * 1e3
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "server_core_ms_per_request": 1e3 * (cpu_of(pids) - cpu0) / n,
    }


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--model", default="fm")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    payloads = [dicts(rng) for _ in range(4)]
    with tempfile.TemporaryDirectory(prefix="bench-rest-") as tmp:
        repo = Repository(Path(tmp) / "repo", "ctr")
        publish(repo, 1, spec_for(args.model, k=8, hidden=(256, 128)), requests(1), keys=1_000_000, shards=2)
        serving = start("serving", ["serve", "--repo", str(repo.root), "--rest-port", "0"], Path(tmp))
        try:
            serving.wait_ready()
            client = PredictClient(serving.address)
            client.wait_for_model(300)
            conn = http.client.HTTPConnection("127.0.0.1", serving.ready["rest_port"], timeout=30)
            bodies = [json.dumps({"instances": items, "context": ctx}).encode() for items, ctx in payloads]

            def rest(body: bytes) -> list[float]:
                conn.request("POST", "/v1/models/ctr:predict", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                doc = json.loads(r.read())
                assert r.status == 200, doc
                return doc["predictions"]  # type: ignore[no-any-return]

            def grpc_call(p: tuple[list[dict[str, int]], dict[str, int]]) -> Any:
                return client.predict(p[0], p[1])  # type: ignore[arg-type]

            arrays = [
                ({f: np.array([i[f] for i in items]) for f in items[0]}, {f: np.array([v]) for f, v in ctx.items()})
                for items, ctx in payloads
            ]
            column_bodies = [
                json.dumps({"inputs": {f: c.tolist() for f, c in cols.items()}, "context": ctx}).encode()
                for (cols, _), (_, ctx) in zip(arrays, payloads, strict=True)
            ]

            def grpc_columns(a: tuple[dict[str, Any], dict[str, Any]]) -> Any:
                return client.predict_columns(a[0], a[1])

            np.testing.assert_allclose(rest(bodies[0]), grpc_call(payloads[0]).scores, atol=1e-6)
            np.testing.assert_allclose(rest(column_bodies[0]), grpc_columns(arrays[0]).scores, atol=1e-6)
            pids = server_pids(serving)
            modes: dict[str, tuple[Any, list[Any]]] = {
                "grpc_rows": (grpc_call, payloads),
                "rest_rows": (rest, bodies),
                "grpc_columns": (grpc_columns, arrays),
                "rest_columns": (rest, column_bodies),
            }
            rounds: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
            for _ in range(args.reps):  # alternating: this machine is noisy
                for m, (call, inputs) in modes.items():
                    rounds[m].append(timed_round(call, inputs, args.requests, pids))
            out: dict[str, Any] = {"features_per_request": ITEMS * (len(FIELDS) - CTX_FIELDS) + CTX_FIELDS}
            for name, rs in rounds.items():
                out[name] = {k: float(np.median([r[k] for r in rs])) for k in rs[0]} | {"rounds": rs}
                print(name, {k: round(v, 2) for k, v in out[name].items() if k != "rounds"}, flush=True)
            out["json_bytes_rows"] = int(np.mean([len(b) for b in bodies]))
            out["json_bytes_columns"] = int(np.mean([len(b) for b in column_bodies]))
            conn.close()
            client.close()
        finally:
            serving.stop()
    path = ROOT / "bench" / "results" / "rest.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
