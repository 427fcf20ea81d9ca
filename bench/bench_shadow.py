"""What shadow scoring costs the live answer: one `boundless serve` of an FM model (200 x
500 requests, bench_serving's), one client, p50/p99 of the live Predict with no label, then
with version 2 labelled as a shadow of every request (`boundless model label shadow 2
--shadow 1`), alternating --reps times; also the server's core-ms per request and how many
shadow copies were scored or dropped. Asserts nothing; writes bench/results/shadow.json.

    .venv/bin/python bench/bench_shadow.py [--model fm] [--requests 300] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_serving import cpu_of, server_pids  # noqa: E402
from bench.serving_model import publish, requests, spec_for  # noqa: E402
from boundless.processes import start  # noqa: E402
from ctr.repository.versions import Policy, Repository  # noqa: E402
from serving.client import PredictClient  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def shadow_counts(metrics_port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    out = {"scored": 0.0, "dropped": 0.0}
    for line in text.splitlines():
        if line.startswith("boundless_serving_shadow_score_difference_count{"):
            out["scored"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("boundless_serving_shadow_dropped_total{"):
            out["dropped"] += float(line.rsplit(" ", 1)[1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--model", default="fm")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    reqs = requests(8)
    with tempfile.TemporaryDirectory(prefix="bench-shadow-") as tmp:
        repo = Repository(Path(tmp) / "repo", "ctr")
        spec = spec_for(args.model, k=8, hidden=(256, 128))
        for v in (1, 2):
            publish(repo, v, spec, reqs, keys=2_000_000, shards=2, seed=v)
        repo.set_policy(Policy("pinned", 1))
        serving = start("serving", ["serve", "--repo", str(repo.root), "--poll-s", "0.1"], Path(tmp))
        try:
            serving.wait_ready()
            client = PredictClient(serving.address)
            client.wait_for_model(300)
            protos = [client.to_proto(r) for r in reqs]
            pids = server_pids(serving)
            rounds: dict[str, list[dict[str, float]]] = {"no shadow": [], "shadow of every request": []}
            for _ in range(args.reps):
                for mode in rounds:
                    if mode == "no shadow":
                        if "shadow" in repo.routing():
                            repo.remove_label("shadow")
                    else:
                        repo.set_label("shadow", 2, shadow=1.0)
                    time.sleep(1.0)  # a poll or two: the label is (un)loaded
                    for p in protos[:4]:
                        client.stub.Predict(p, timeout=30)
                    before, cpu0 = shadow_counts(serving.ready["metrics_port"]), cpu_of(pids)
                    lat = []
                    for i in range(args.requests):
                        t = time.perf_counter()
                        client.stub.Predict(protos[i % len(protos)], timeout=30)
                        lat.append(time.perf_counter() - t)
                    time.sleep(0.5)  # the last copies scored
                    after = shadow_counts(serving.ready["metrics_port"])
                    ms = np.array(lat) * 1e3
                    rounds[mode].append(
                        {
                            "p50_ms": float(np.percentile(ms, 50)),
                            "p99_ms": float(np.percentile(ms, 99)),
                            "core_ms_per_request": 1e3 * (cpu_of(pids) - cpu0) / args.requests,
                            "shadow_scored": after["scored"] - before["scored"],
                            "shadow_dropped": after["dropped"] - before["dropped"],
                        }
                    )
            out: dict[str, Any] = {}
            for mode, rs in rounds.items():
                out[mode] = {k: float(np.median([r[k] for r in rs])) for k in rs[0]} | {"rounds": rs}
                print(mode, {k: round(v, 2) for k, v in out[mode].items() if k != "rounds"}, flush=True)
            client.close()
        finally:
            serving.stop()
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "shadow.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
