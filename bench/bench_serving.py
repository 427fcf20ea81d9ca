"""Serving at scale: 200 items x 500 features over gRPC loopback against a `boundless serve`
process, for LR, FM, FFM and DeepFM, with 1 and 4 concurrent clients (each with its own
channel), cycling through 8 distinct requests whose keys the model holds. First the
transport floor ("floor", bench.grpc_floor): the same requests against a Predictor served
as `boundless serve` serves but scoring nothing, so what gRPC costs reads apart from what
decoding, lookups and scoring cost.

Closed loop (the default): reports p50/p99/p999 latency (ms, the client's round trip,
encoding excluded: it is measured in bench_client.py), requests/s, and the server's CPU use
(cores busy and core-ms per request, from /proc, summed over the processes of `serve
--processes N`), each over --reps rounds of --requests (a tenth for FFM) against the same
server: the median round's figure, and the min and max across rounds, since this machine is
noisy (p999 needs 1,000 requests a round to mean more than the slowest).

Open loop (--open-loop): requests due at a fixed rate, sent when due by --senders threads (16) over
--channels connections (by default 4 per serving process, at least 8: the kernel spreads
connections, not requests, over the processes of `serve --processes N`), each latency taken from the
moment the request was due (a slow answer delays no other request's clock, so queueing
shows in p99). The rate steps up (--rates, or from 25/s by a quarter) until p99 passes --slo-ms or
requests fail; it reports each step and the knee, the highest rate that held p99 <=
--slo-ms, with the server's core-ms per request there (CPU of every server process, from
/proc, over the step), and the p99 of Predict inside the server's handler (the bucket bound
of its `boundless_serving_predict_seconds` histogram, scraped around the step), which
separates time in the handler from time around it. The client runs on the same machine
and takes CPU from the server.

Writes bench/results/serving.json; asserts nothing about speed.

    .venv/bin/python bench/bench_serving.py [--models floor,lr,fm,ffm,deepfm] [--keys 10000000]
        [--requests 1000] [--reps 3] [--clients 1,4] [--score-threads 0]
        [--serve-args=--no-dnn-cuda-graphs] [--out serving.json]
    .venv/bin/python bench/bench_serving.py --open-loop --models floor,lr [--serve-args=--processes=2]
        [--rates 100,200,300] [--step-s 5] [--slo-ms 10] [--senders 16] [--channels 0]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.grpc_floor import MAX_CONCURRENT  # noqa: E402
from bench.serving_model import publish, requests, spec_for  # noqa: E402
from boundless.processes import start  # noqa: E402
from ctr.repository.versions import Repository  # noqa: E402
from serving.client import PredictClient  # noqa: E402
from serving.request.encoding import EncodedRequest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OpenLoop = tuple[list[float], float, float, int, int]  # rates, seconds a step, p99 objective (ms), senders, channels
KEYS_FOR = {"lr": 10_000_000, "fm": 10_000_000, "ffm": 1_000_000, "deepfm": 10_000_000}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_pids(daemon: Any) -> list[int]:
    """The processes that serve: a supervisor's (`serve --processes N`) and the ones it runs."""
    return [daemon.proc.pid, *daemon.ready.get("pids", [])]


def cpu_of(pids: list[int]) -> float:
    return sum(cpu_seconds(p) for p in pids)


def client_cpu() -> float:
    """This process's CPU seconds: the load generator's share of the machine."""
    t = os.times()
    return t.user + t.system


# open loop, by default: connections, spread by the kernel over a server's processes. It spreads connections,
# not requests: with fewer connections than processes, or where several hash to one, some processes idle
CHANNELS_PER_PROCESS, MIN_CHANNELS = 4, 8
SENDERS = 16  # open loop, by default: threads sending requests when due (at most this many in flight)


def open_step(pids: list[int], protos: list[Any], stubs: list[Any], rate: float, step_s: float, senders: int) -> dict[str, float]:
    """`rate` requests/s for `step_s` seconds: request i is due at i / rate and sent then by
    the first of `senders` threads free (blocking calls: grpcio's futures cost the client a
    millisecond more per call); each latency runs from the moment its request was due, so
    a request that waited for a sender counts its wait."""
    n = max(1, int(rate * step_s))
    lat: list[float] = []
    failed = [0]
    turn = itertools.count()
    t0 = time.perf_counter() + 0.05

    def sender(k: int) -> None:
        stub = stubs[k % len(stubs)]
        while (i := next(turn)) < n:
            due = t0 + i / rate
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            try:
                stub.Predict(protos[i % len(protos)], timeout=5)
                lat.append(time.perf_counter() - due)
            except grpc.RpcError:
                failed[0] += 1

    cpu0, client0 = cpu_of(pids), client_cpu()
    threads = [threading.Thread(target=sender, args=(k,)) for k in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    cpu, client = cpu_of(pids) - cpu0, client_cpu() - client0
    ms = np.array(lat or [float("inf")]) * 1e3
    return {
        "rate": rate,
        "achieved_per_s": len(lat) / wall,
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "failed": failed[0],
        "server_cores_busy": cpu / wall,
        "client_cores_busy": client / wall,
        "core_ms_per_request": 1e3 * cpu / max(1, len(lat)),
    }


def predict_buckets(metrics_port: int | None) -> dict[float, float]:
    """The server's `boundless_serving_predict_seconds` histogram: cumulative counts by
    upper bound (s), summed over its series; empty without a metrics port."""
    if not metrics_port:
        return {}
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    out: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "boundless_serving_predict_seconds":
            for s in family.samples:
                if s.name.endswith("_bucket"):
                    le = float(s.labels["le"])
                    out[le] = out.get(le, 0.0) + s.value
    return out


def bucket_quantile_ms(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The upper bound (ms) of the histogram bucket that holds quantile q of the calls
    between two scrapes: the server-side figure is known to a bucket, not to the digit."""
    bounds = sorted(after)
    if not bounds:
        return float("nan")
    total = after[bounds[-1]] - before.get(bounds[-1], 0.0)
    for le in bounds:
        if total and after[le] - before.get(le, 0.0) >= q * total:
            return le * 1e3
    return float("nan")


def open_loop(
    name: str,
    address: str,
    pids: list[int],
    reqs: list[EncodedRequest],
    rates: list[float],
    step_s: float,
    slo_ms: float,
    senders: int,
    channels: int,
    metrics_port: int | None = None,
) -> dict[str, Any]:
    """Steps the rate up until p99 passes the objective; the knee is the last step that held
    it. With the server's metrics port, each step also reports the p99 of Predict inside the
    server (its histogram's bucket bound): the caller's p99 minus that is time outside the
    handler (gRPC's queues and threads, the loopback, the load generator)."""
    serving = max(1, len(pids) - 1)  # a supervisor's pid and its processes', or one server's
    channels = channels or max(MIN_CHANNELS, CHANNELS_PER_PROCESS * serving)
    client = PredictClient(address, connections=channels)
    print(f"{name} open loop: {senders} senders over {channels} connections", flush=True)
    protos = [client.to_proto(r) for r in reqs]
    stubs = client.stubs
    for stub in stubs:  # every channel connected before the clock starts
        stub.Predict(protos[0], timeout=30)
    steps: list[dict[str, float]] = []
    rate = rates[0] if rates else 25.0
    i = 0
    while True:
        before = predict_buckets(metrics_port)
        row = open_step(pids, protos, stubs, rate, step_s, senders)
        row["handler_p99_ms_at_most"] = bucket_quantile_ms(before, predict_buckets(metrics_port), 0.99)
        steps.append(row)
        print(
            f"{name} open loop {rate:.0f}/s: achieved {row['achieved_per_s']:.0f}/s, p50 {row['p50_ms']:.2f} ms,"
            f" p99 {row['p99_ms']:.2f} ms (inside the server's handler <= {row['handler_p99_ms_at_most']:g} ms),"
            f" failed {row['failed']}, server cores {row['server_cores_busy']:.2f},"
            f" client cores {row['client_cores_busy']:.2f},"
            f" {row['core_ms_per_request']:.2f} core-ms/request",
            flush=True,
        )
        if row["p99_ms"] > slo_ms or row["failed"] or row["achieved_per_s"] < 0.9 * rate:
            break
        i += 1
        if rates:
            if i >= len(rates):
                break
            rate = rates[i]
        else:
            rate = round(rate * 1.25)
    client.close()
    held = [r for r in steps if r["p99_ms"] <= slo_ms and not r["failed"] and r["achieved_per_s"] >= 0.9 * r["rate"]]
    knee = max(held, key=lambda r: r["rate"]) if held else None
    if knee is not None:
        print(
            f"{name} knee: {knee['rate']:.0f} requests/s at p99 {knee['p99_ms']:.2f} ms,"
            f" {knee['core_ms_per_request']:.2f} core-ms/request",
            flush=True,
        )
    return {"slo_ms": slo_ms, "step_s": step_s, "senders": senders, "channels": channels, "steps": steps, "knee": knee}


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


FIGURES = ("p50_ms", "p99_ms", "p999_ms", "requests_per_s", "server_cores_busy", "core_ms_per_request")


def one_round(address: str, pids: list[int], reqs: list[EncodedRequest], clients: int, total: int) -> dict[str, float]:
    cpu0 = cpu_of(pids)
    lat, wall = load(address, reqs, clients, total)
    busy = (cpu_of(pids) - cpu0) / wall
    ms = np.array(lat) * 1e3
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "p999_ms": float(np.percentile(ms, 99.9)),
        "requests_per_s": len(lat) / wall,
        "server_cores_busy": busy,
        "core_ms_per_request": 1e3 * busy * wall / len(lat),
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
    name: str, address: str, pids: list[int], reqs: list[EncodedRequest], clients: list[int], n: int, reps: int
) -> dict[str, Any]:
    """`reps` rounds of n requests for each client count, summarized (and printed)."""
    out: dict[str, Any] = {}
    for c in clients:
        load(address, reqs, c, 4 * c)  # warm-up
        rounds = [one_round(address, pids, reqs, c, n) for _ in range(reps)]
        out[f"clients_{c}"] = row = summary(rounds)
        print(
            f"{name} clients={c} ({reps} x {n} requests; median [min-max]): "
            + ", ".join(f"{f} {row[f]:.2f} [{row[f + '_min']:.2f}-{row[f + '_max']:.2f}]" for f in FIGURES),
            flush=True,
        )
    return out


def bench_floor(clients: list[int], total: int, reps: int, work: Path, loop: OpenLoop | None = None) -> dict[str, Any]:
    """The same requests against a Predictor that scores nothing (bench.grpc_floor): what
    gRPC, the loopback and protobuf cost before any decoding, lookup or scoring."""
    reqs = requests(8)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)  # the caller's too
    floor = start("grpc-floor", [], work, env={"PYTHONPATH": path}, module="bench.grpc_floor")
    try:
        floor.wait_ready()
        out: dict[str, Any] = {"request_bytes": int(np.mean([r.nbytes for r in reqs]))}
        if loop is not None:
            out["open_loop"] = open_loop("floor", floor.address, server_pids(floor), reqs, *loop)
            return out
        out.update(rounds_by_clients("floor", floor.address, server_pids(floor), reqs, clients, total, reps))
        return out
    finally:
        floor.stop()


def bench_model(
    model: str,
    keys: int,
    clients: list[int],
    total: int,
    reps: int,
    score_threads: int,
    work: Path,
    extra: list[str],
    loop: OpenLoop | None = None,
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
        if loop is not None:
            port = serving.ready.get("metrics_port")
            out["open_loop"] = open_loop(model, serving.address, server_pids(serving), reqs, *loop, metrics_port=port)
            return out
        n = total if model != "ffm" else max(40, total // 10)
        out.update(rounds_by_clients(model, serving.address, server_pids(serving), reqs, clients, n, reps))
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
    ap.add_argument("--open-loop", action="store_true", help="fixed-rate requests, stepped up to the knee")
    ap.add_argument("--rates", default="", help="open loop: the rates to step through (default: from 25/s by a quarter)")
    ap.add_argument("--step-s", type=float, default=5.0, help="open loop: seconds at each rate")
    ap.add_argument("--slo-ms", type=float, default=10.0, help="open loop: the p99 objective")
    ap.add_argument("--senders", type=int, default=SENDERS, help="open loop: sending threads (requests in flight at most)")
    ap.add_argument("--channels", type=int, default=0, help="open loop: gRPC connections the senders share (0: 4 a process)")
    args = ap.parse_args()
    loop: OpenLoop | None = None
    if args.open_loop:
        loop = ([float(r) for r in args.rates.split(",") if r], args.step_s, args.slo_ms, args.senders, args.channels)
    results: dict[str, Any] = {"cores": os.cpu_count(), "serve_args": args.serve_args, "open_loop": args.open_loop}
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        for model in args.models.split(","):
            if model == "floor":
                results[model] = bench_floor([int(c) for c in args.clients.split(",")], args.requests, args.reps, Path(tmp), loop)
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
                loop,
            )
    out = ROOT / "bench" / "results" / args.out
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
