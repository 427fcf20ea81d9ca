"""Freshness: from a sample landing in the stream to serving scoring with it.

A trainer (in-process shards) follows a folder that a writer fills with Frappe lines at a
steady rate; it exports every --export-interval-s; the model manager publishes and tells
serving at once (`--notify`). Each probe is a file of lines carrying a feature never seen
before; its latency is the time from the file's rename into the folder to the first
Predict whose score for an item with only that feature differs from an empty item's.

    .venv/bin/python bench/bench_freshness.py [--probes 20] [--export-interval-s 1]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from boundless.processes import start
from serving.client import PredictClient

DATA = Path(__file__).resolve().parents[2] / "shared/data/frappe/frappe.validation.libfm"


def _drop(folder: Path, name: str, lines: list[str]) -> None:
    tmp = folder / f".{name}"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.rename(folder / name)  # the trainer sees the whole file at once


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--probes", type=int, default=20)
    ap.add_argument("--export-interval-s", type=float, default=1.0)
    ap.add_argument("--rate", type=int, default=10000, help="background lines per second")
    ap.add_argument("--holdout", type=int, default=1000)
    ap.add_argument("--work", help="keep the run's folders and logs here (default: a temporary folder)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a killed run still stops its daemons (finally below)
    lines = DATA.read_text().splitlines()
    with tempfile.TemporaryDirectory(prefix="bench-freshness-") as tmp:
        work = Path(args.work or tmp)
        work.mkdir(parents=True, exist_ok=True)
        folder, exports, repo = work / "stream", work / "exports", work / "repo"
        folder.mkdir()
        serving = start("serving", ["serve", "--repo", str(repo)], work)  # default --poll-s 0.5
        serving.wait_ready()
        manager = start(
            "modelmgr",
            ["model", "watch", "--exports", str(exports), "--repo", str(repo), "--notify", serving.address]
            + ["--min-samples", str(args.holdout), "--max-auc-drop", "1"],
            work,
        )
        manager.wait_ready()
        seq = [0]

        def name() -> str:
            seq[0] += 1
            return f"{seq[0]:09d}.libfm"

        _drop(folder, name(), lines[:5000])
        trainer = subprocess.Popen(
            [sys.executable, "-m", "boundless", "train", "--source", str(folder), "--ps", "local", "--metrics-port", "-1"]
            + ["--export-dir", str(exports), "--export-interval-s", str(args.export_interval_s)]
            + ["--holdout-samples", str(args.holdout), "--batch-size", "1024"],
            stdout=subprocess.DEVNULL,
            stderr=open(work / "trainer.log", "wb"),  # noqa: SIM115 - lives as long as the run
        )
        stop = threading.Event()
        lock = threading.Lock()

        def background() -> None:
            at = 5000
            while not stop.is_set():
                chunk = [lines[(at + j) % len(lines)] for j in range(args.rate // 5)]
                at += len(chunk)
                with lock:
                    _drop(folder, name(), chunk)
                time.sleep(0.2)

        writer = threading.Thread(target=background, daemon=True)
        writer.start()
        client = PredictClient(serving.address)
        latencies = []
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    client.status()
                    break
                except Exception:  # noqa: BLE001 - nothing served yet
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            rng = random.Random(0)
            for i in range(args.probes):
                token = str(900000 + i)
                with lock:  # the probe feature alone, 50 times: FTRL's L1 cannot keep its weight at 0
                    _drop(folder, name(), [f"1 {token}:1"] * 50)
                    landed = time.monotonic()
                while True:
                    s = client.predict([{"0": token}, {}]).scores
                    if abs(float(s[0]) - float(s[1])) > 1e-5:
                        latencies.append(time.monotonic() - landed)
                        break
                    if time.monotonic() - landed > 60:
                        raise TimeoutError(f"probe {i} never became servable: scores {s}, {client.status()}")
                    time.sleep(0.005)
                time.sleep(rng.uniform(0.2, 1.0))
        finally:
            stop.set()
            client.close()
            trainer.terminate()
            trainer.wait(timeout=60)
            manager.stop()
            serving.stop()
    ordered = sorted(latencies)
    result = {
        "probes": len(latencies),
        "export_interval_s": args.export_interval_s,
        "rate_lines_per_s": args.rate,
        "p50_s": statistics.median(ordered),
        "p99_s": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "min_s": ordered[0],
        "max_s": ordered[-1],
        "each_s": [round(x, 3) for x in latencies],
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
