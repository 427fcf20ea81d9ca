"""A Kafka topic against a file of the same rows: Criteo 10k repeated, produced into a
local Tansu broker (--partitions, one message a line) and written as a TSV file, each
trained by `boundless train --ps local --no-follow` (LR, defaults: a progress line every
5 s), whole process, alternating --reps times; reports examples/s in the trainer and the
whole process's seconds, medians, and checks every run trained every row. Writes
bench/results/kafka.json; asserts nothing about speed.

    .venv/bin/python bench/bench_kafka.py [--repeat 50] [--partitions 4] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.datasets import DATA  # noqa: E402
from bench.whole_runs import alternating  # noqa: E402
from boundless.kafka_broker import KafkaBroker, produce_lines  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    lines = (DATA / "criteo_10k/train_rows1-10000.tsv").read_text().splitlines() * args.repeat
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as tmp, KafkaBroker(Path(tmp) / "broker.log") as broker:
        path = Path(tmp) / "criteo.tsv"
        path.write_text("\n".join(lines) + "\n")
        topic = broker.create_topic("criteo", args.partitions)
        produce_lines(broker.producer(), "criteo", lines, args.partitions)
        sources: dict[str, Path | str] = {"file": path, "kafka": topic}
        result: dict[str, Any] = {"rows": len(lines), "partitions": args.partitions}
        result |= alternating(sources, ["--format", "criteo", "--no-follow"], args.reps, Path(tmp))
    for name in sources:
        r = result[name]
        assert all(x["samples"] == len(lines) for x in r["runs"]), (name, [x["samples"] for x in r["runs"]])
        spread = ", ".join(f"{x['examples_per_s'] / 1e3:.0f}k" for x in r["runs"])
        print(f"| {name} | {r['examples_per_s']:,.0f} ({spread}) | {r['whole_s']:.1f} |", flush=True)
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "kafka.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
