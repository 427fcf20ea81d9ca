"""Sharded serving: 200 x 500 requests through `serve --router` to 2 and 4 serving shards
(`serve --shard-index i --shard-count N`) of a 10M-key LR model with 4 shard files, one client; then 2 shards
of 2 replicas each, first as they are and then with one replica of shard 0 behind a proxy
that holds its answers 20 ms (bench/slow_proxy.py), so hedged requests must go around it.
Everything runs on this one machine (loopback), so the shards share its two cores.

Prints and writes bench/results/sharded.json (p50/p99/p999 ms, requests/s, hedged
requests); asserts nothing.

    .venv/bin/python bench/bench_sharded.py [--keys 10000000] [--requests 300]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_serving import load  # noqa: E402
from bench.serving_model import publish, requests, spec_for  # noqa: E402
from bench.slow_proxy import SlowProxy  # noqa: E402
from boundless.processes import Daemon, start  # noqa: E402
from ctr.repository.versions import Repository  # noqa: E402
from serving.client import PredictClient  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def ready(d: Daemon) -> None:
    d.wait_ready()
    PredictClient(d.address).wait_for_model(300)


def run(repo: str | Path, work: Path, shards: int, replicas: int, delay_s: float, total: int) -> dict[str, Any]:
    daemons: list[Daemon] = []
    proxy = None
    try:
        groups = []
        for i in range(shards):
            group = []
            for r in range(replicas):
                part = ["--shard-index", str(i), "--shard-count", str(shards)]
                d = start(f"s{shards}x{replicas}-{i}-{r}", ["serve", "--repo", str(repo), *part], work)
                daemons.append(d)
                group.append(d)
            groups.append(group)
        for d in daemons:
            ready(d)
        addresses = [[d.address for d in g] for g in groups]
        if delay_s:
            proxy = SlowProxy(addresses[0][0], delay_s)
            addresses[0][0] = proxy.address
        router = start(
            f"router-{shards}x{replicas}-{delay_s}",
            ["serve", "--repo", str(repo), "--router", "--shard-replicas", ",".join("|".join(g) for g in addresses)],
            work,
        )
        daemons.append(router)
        ready(router)
        reqs = requests(8)
        load(router.address, reqs, 1, 16)  # warm-up
        lat, wall = load(router.address, reqs, 1, total)
        ms = np.array(lat) * 1e3
        scrape = urllib.request.urlopen(f"http://127.0.0.1:{router.ready['metrics_port']}/metrics").read().decode()
        hedged = sum(float(x.split()[-1]) for x in scrape.splitlines() if x.startswith("boundless_serving_hedged_requests_total"))
        return {
            "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)),
            "p999_ms": float(np.percentile(ms, 99.9)),
            "requests_per_s": len(lat) / wall,
            "requests": len(lat),
            "hedged_requests": hedged,
        }
    finally:
        if proxy is not None:
            proxy.close()
        for d in daemons:
            d.stop()


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--requests", type=int, default=300)
    args = ap.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-sharded-") as tmp:
        work = Path(tmp)
        repo = Repository(work / "repo", "ctr")
        publish(repo, 1, spec_for("lr", 8, ()), requests(8), args.keys, shards=4)
        for name, shards, replicas, delay in (
            ("2_shards", 2, 1, 0.0),
            ("4_shards", 4, 1, 0.0),
            ("2_shards_2_replicas", 2, 2, 0.0),
            ("2_shards_2_replicas_one_delayed_20ms", 2, 2, 0.02),
        ):
            results[name] = run(repo.root, work, shards, replicas, delay, args.requests)
            print(name, json.dumps(results[name]), flush=True)
    out = ROOT / "bench" / "results" / "sharded.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
