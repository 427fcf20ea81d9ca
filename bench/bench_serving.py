"""Serving at scale: 200 items x 500 features over gRPC loopback against a `boundless serve`
process, for LR, FM, FFM and DeepFM, with 1 and 4 concurrent clients (each with its own
channel), cycling through 8 distinct requests whose keys the model holds. First the
transport floor ("floor", bench.grpc_floor): the same requests against a Predictor served
as `boundless serve` serves but scoring nothing, so what gRPC costs reads apart from what
decoding, lookups and scoring cost.

Reports p50/p99/p999 latency (ms, the client's round trip, encoding excluded: it is
measured in bench_client.py), requests/s, and the server's CPU use (cores busy, from
/proc), each over --reps rounds of --requests (a tenth for FFM) against the same server:
the median round's figure, and the min and max across rounds, since this machine is
noisy (p999 needs 1,000 requests a round to mean more than the slowest). Writes
bench/results/serving.json; asserts nothing about speed.

    .venv/bin/python bench/bench_serving.py [--models floor,lr,fm,ffm,deepfm] [--keys 10000000]
        [--requests 1000] [--reps 3] [--clients 1,4] [--score-threads 0]
        [--serve-args=--no-dnn-cuda-graphs] [--out serving.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.grpc_floor import MAX_CONCURRENT  # noqa: E402
from bench.serving_model import publish, requests, spec_for  # noqa: E402
from boundless.processes import start  # noqa: E402
from ctr.repository.versions import Repository  # noqa: E402
from serving.client import PredictClient  # noqa: E402
from serving.request.encoding import EncodedRequest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KEYS_FOR = {"lr": 10_000_000, "fm": 10_000_000, "ffm": 1_000_000, "deepfm": 10_000_000}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(address: str, reqs: list[EncodedRequest], clients: int, total: int) -> tuple[list[float], float]:
    """Latencies (s) of `total` requests spread over `clients` threads, and the wall time."""
    per = total // clients
    lat: list[list[float]] = [[] for _ in range(clients)]
    go = threading.Barrier(clients + 1)

    def run(i: int) -> None:
        client = PredictClient(address)
        protos = [client.to_proto(r) for r in reqs]
        for p in protos[:2]:
            client.stub.Predict(p, timeout=30)
        go.wait()
        for j in range(per):
            t = time.perf_counter()
            client.stub.Predict(protos[(i + j) % len(protos)], timeout=30)
            lat[i].append(time.perf_counter() - t)
        client.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    go.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return [x for part in lat for x in part], time.perf_counter() - t0


FIGURES = ("p50_ms", "p99_ms", "p999_ms", "requests_per_s", "server_cores_busy")


def one_round(address: str, pid: int, reqs: list[EncodedRequest], clients: int, total: int) -> dict[str, float]:
    cpu0 = cpu_seconds(pid)
    lat, wall = load(address, reqs, clients, total)
    busy = (cpu_seconds(pid) - cpu0) / wall
    ms = np.array(lat) * 1e3
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "p999_ms": float(np.percentile(ms, 99.9)),
        "requests_per_s": len(lat) / wall,
        "server_cores_busy": busy,
        "requests": len(lat),
    }


def summary(rounds: list[dict[str, float]]) -> dict[str, Any]:
    """Each figure's median over the rounds, with its min and max, and the rounds."""
    out: dict[str, Any] = {}
    for f in FIGURES:
        values = [r[f] for r in rounds]
        out[f] = float(np.median(values))
        out[f"{f}_min"], out[f"{f}_max"] = min(values), max(values)
    out["requests_per_round"] = int(rounds[0]["requests"])
    out["rounds"] = rounds
    return out


def rounds_by_clients(
    name: str, address: str, pid: int, reqs: list[EncodedRequest], clients: list[int], n: int, reps: int
) -> dict[str, Any]:
    """`reps` rounds of n requests for each client count, summarized (and printed)."""
    out: dict[str, Any] = {}
    for c in clients:
        load(address, reqs, c, 4 * c)  # warm-up
        rounds = [one_round(address, pid, reqs, c, n) for _ in range(reps)]
        out[f"clients_{c}"] = row = summary(rounds)
        print(
            f"{name} clients={c} ({reps} x {n} requests; median [min-max]): "
            + ", ".join(f"{f} {row[f]:.2f} [{row[f + '_min']:.2f}-{row[f + '_max']:.2f}]" for f in FIGURES),
            flush=True,
        )
    return out


def bench_floor(clients: list[int], total: int, reps: int, work: Path) -> dict[str, Any]:
    """The same requests against a Predictor that scores nothing (bench.grpc_floor): what
    gRPC, the loopback and protobuf cost before any decoding, lookup or scoring."""
    reqs = requests(8)
    floor = start("grpc-floor", [], work, env={"PYTHONPATH": str(ROOT)}, module="bench.grpc_floor")
    try:
        floor.wait_ready()
        out: dict[str, Any] = {"request_bytes": int(np.mean([r.nbytes for r in reqs]))}
        out.update(rounds_by_clients("floor", floor.address, floor.proc.pid, reqs, clients, total, reps))
        return out
    finally:
        floor.stop()


def bench_model(
    model: str, keys: int, clients: list[int], total: int, reps: int, score_threads: int, work: Path, extra: list[str]
) -> dict[str, Any]:
    spec = spec_for(model, k=8 if model != "ffm" else 4, hidden=(256, 128))
    reqs = requests(8)
    repo = Repository(work / model, "ctr")
    held = publish(repo, 1, spec, reqs, keys, shards=2)
    serving = start(
        f"serving-{model}",
        ["serve", "--repo", str(repo.root), "--score-threads", str(score_threads), "--max-concurrent", str(MAX_CONCURRENT)]
        + extra,
        work,
    )
    try:
        serving.wait_ready()
        client = PredictClient(serving.address)
        client.wait_for_model(300)
        client.close()
        out: dict[str, Any] = {"keys": held, "request_bytes": int(np.mean([r.nbytes for r in reqs]))}
        n = total if model != "ffm" else max(40, total // 10)
        out.update(rounds_by_clients(model, serving.address, serving.proc.pid, reqs, clients, n, reps))
        return out
    finally:
        serving.stop()


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--models", default="floor,lr,fm,ffm,deepfm", help="floor: gRPC alone (bench.grpc_floor)")
    ap.add_argument("--keys", type=int, default=0, help="keys per model (0: 10M, 1M for FFM's wide rows)")
    ap.add_argument("--requests", type=int, default=1000, help="requests a round (FFM: a tenth)")
    ap.add_argument("--reps", type=int, default=3, help="rounds per model and client count")
    ap.add_argument("--clients", default="1,4")
    ap.add_argument("--score-threads", type=int, default=0)
    ap.add_argument("--serve-args", default="", help="more `boundless serve` flags, space-separated")
    ap.add_argument("--out", default="serving.json", help="file name under bench/results")
    args = ap.parse_args()
    results: dict[str, Any] = {"cores": os.cpu_count(), "serve_args": args.serve_args}
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        for model in args.models.split(","):
            if model == "floor":
                results[model] = bench_floor([int(c) for c in args.clients.split(",")], args.requests, args.reps, Path(tmp))
                continue
            results[model] = bench_model(
                model,
                args.keys or KEYS_FOR[model],
                [int(c) for c in args.clients.split(",")],
                args.requests,
                args.reps,
                args.score_threads,
                Path(tmp),
                args.serve_args.split(),
            )
    out = ROOT / "bench" / "results" / args.out
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
