"""Table size against progressive logloss under the row lifecycle (issue: exactly-once,
row lifecycle): LR-FTRL on Frappe and on Criteo 10k, on 2 PS shard
processes over gRPC, with admission after 1, 2, 3 and 5 sightings (`--admit-after`), and
with eviction of rows left alone for 20 or 100 of a shard's updates (`--ttl-updates`).
Reports the rows the model ends with, the pushed rows dropped (not admitted) and evicted,
and the progressive logloss and window AUC. Writes bench/results/lifecycle.json; asserts
nothing. Run: .venv/bin/python bench/bench_lifecycle.py [--batch-size 512]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from datasets import DATASETS  # noqa: E402

from boundless.processes import start  # noqa: E402

REPEAT = {"frappe": 1, "criteo10k": 1}  # once: repeated files would see every key again
SETTINGS: list[tuple[str, list[str]]] = [
    ("admit 1 (none)", []),
    ("admit 2", ["--admit-after", "2"]),
    ("admit 3", ["--admit-after", "3"]),
    ("admit 5", ["--admit-after", "5"]),
    ("ttl 100 updates", ["--ttl-updates", "100"]),
    ("ttl 20 updates", ["--ttl-updates", "20"]),
]


def run(stream: Path, preset: str, flags: list[str], batch: int, work: Path) -> dict[str, Any]:
    shards = [start(f"ps{i}", ["ps", "--shard-index", str(i), "--shard-count", "2", *flags], work) for i in range(2)]
    try:
        for s in shards:
            s.wait_ready()
        addresses = ",".join(s.address for s in shards)
        out = work / "m.json"
        cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--format", preset, "--no-follow"]
        cmd += [
            "--ps",
            addresses,
            "--batch-size",
            str(batch),
            "--metrics-port",
            "-1",
            "--window",
            "20000",
            "--metrics-out",
            str(out),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if proc.returncode:
            raise SystemExit(proc.stderr[-3000:])
        m = json.loads(out.read_text())
        stats = subprocess.run(
            [sys.executable, "-m", "boundless", "ps", "stats", addresses, "--json"], capture_output=True, text=True, check=True
        )
        shard_tables = [t for s in json.loads(stats.stdout)["shards"] for t in s["tables"] if t["name"] == "w"]
    finally:
        for s in shards:
            s.stop()
    return {
        "rows": sum(t["rows"] for t in shard_tables),
        "not_admitted": sum(t["not_admitted"] for t in shard_tables),
        "evicted": sum(t["evicted"] for t in shard_tables),
        "progressive_logloss": m["progressive_logloss"],
        "window_auc": m["window_auc"],
        "samples": m["samples"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--datasets", default="frappe,criteo10k")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "lifecycle.json"))
    args = ap.parse_args()
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in args.datasets.split(","):
            ds = DATASETS[name]
            stream = work / f"{name}.txt"
            stream.write_text("\n".join(ds.lines() * REPEAT[name]) + "\n")
            for label, flags in SETTINGS:
                r = {"setting": label, **run(stream, ds.preset, flags, args.batch_size, work)}
                results.setdefault(name, []).append(r)
                print(name, json.dumps(r), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    for name, rows in results.items():
        print(
            f"\n{name}\n| setting | rows | not admitted | evicted | progressive logloss | window AUC |\n|---|---|---|---|---|---|"
        )
        for r in rows:
            print(
                f"| {r['setting']} | {r['rows']:,} | {r['not_admitted']:,} | {r['evicted']:,} |"
                f" {r['progressive_logloss']:.4f} | {r['window_auc']:.4f} |"
            )


if __name__ == "__main__":
    main()
