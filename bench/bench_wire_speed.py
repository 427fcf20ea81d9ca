"""Training speed against wire bytes (issue 32: compression must not cost training speed over
loopback): `boundless train` on 2 fresh PS shard processes over gRPC, the dataset repeated
to --rows rows, no cuts and no exports (bench_served.py measures those), for each setting:

- `none~nocache`: the uncompressed protocol (fp64 state deltas, every pull sends every key
  and gets every row back);
- `none`: the same pushes with the pull cache (the default);
- `onebit`: 1-bit state deltas with error feedback, pull cache.

Reports the training loop's examples/s (the summary's examples_per_s) and the wire bytes
per sample both ways; medians over --reps runs, settings alternating within a repetition.
Run: .venv/bin/python bench/bench_wire_speed.py [--datasets frappe,criteo10k,avazu10k]
     [--model lr] [--rows 1000000] [--reps 3]
Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.datasets import DATASETS  # noqa: E402
from boundless.processes import start  # noqa: E402
from ctr.data.schema import PRESETS  # noqa: E402

SETTINGS = {
    "none~nocache": ["--push-codec", "none", "--pull-cache", "off"],
    "none": ["--push-codec", "none"],
    "onebit": ["--push-codec", "onebit"],
}


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--datasets", default="frappe,criteo10k,avazu10k")
    ap.add_argument("--model", default="lr")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    print("| data | model | setting | ex/s (median) | runs | wire B/sample |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in args.datasets.split(","):
            ds = DATASETS[name]
            lines = ds.lines()
            header = lines[0] if PRESETS[ds.preset].format == "csv" else None
            body = lines[1:] if header else lines
            stream = work / f"{name}.txt"
            rows = (body * (args.rows // len(body) + 1))[: args.rows]
            stream.write_text("\n".join([header, *rows] if header else rows) + "\n")
            shards = []
            for i in range(2):
                argv = ["ps", "--shard-index", str(i), "--shard-count", "2", "--data-dir", str(work / f"{name}-ps{i}")]
                shards.append(start(f"{name}-ps{i}", argv, work))
            for s in shards:
                s.wait_ready()
            try:
                got: dict[str, list[tuple[float, float]]] = {k: [] for k in SETTINGS}
                for _ in range(args.reps):
                    for setting, flags in SETTINGS.items():
                        out = work / "m.json"
                        cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--format", ds.preset]
                        cmd += ["--no-follow", "--ps", ",".join(s.address for s in shards), "--model", args.model]
                        cmd += ["--metrics-port", "-1", "--port", "-1", "--metrics-out", str(out), "--replace-model"]
                        cmd += ["--from-start", "--checkpoint-interval-s", "0", *flags]  # no cuts, as the docstring says
                        subprocess.run(cmd, check=True, capture_output=True)
                        m = json.loads(out.read_text())
                        got[setting].append((float(m["examples_per_s"]), float(m["wire_bytes_per_sample"])))
                for setting, runs in got.items():
                    rate = statistics.median(r for r, _ in runs)
                    spread = ", ".join(f"{r:,.0f}" for r, _ in runs)
                    print(f"| {name} | {args.model} | {setting} | {rate:,.0f} | {spread} | {runs[0][1]:.2f} |", flush=True)
            finally:
                for s in shards:
                    s.stop()


if __name__ == "__main__":
    main()
