"""Whole-process `boundless train --ps local` runs over several sources of the same rows,
alternating, with each source's medians: what bench_parquet.py, bench_json.py and
bench_compressed.py compare (examples/s in the trainer, the whole process's seconds, what
it trained)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def alternating(sources: Mapping[str, Path | str], flags: list[str], reps: int, work: Path) -> dict[str, dict[str, Any]]:
    """Per source: the median of each figure over `reps` runs, and the runs ("runs")."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in sources}
    for _ in range(reps):
        for name, path in sources.items():
            out = work / f"{name}.json"
            cmd = [sys.executable, "-m", "boundless", "train", "--source", str(path), "--ps", "local", *flags]
            t = time.perf_counter()
            subprocess.run([*cmd, "--metrics-port", "-1", "--metrics-out", str(out)], check=True, capture_output=True)
            m = json.loads(out.read_text())
            runs[name].append(
                {
                    "examples_per_s": m["examples_per_s"],
                    "whole_s": time.perf_counter() - t,
                    "samples": m["samples"],
                    "progressive_logloss": m["progressive_logloss"],
                }
            )
    return {n: {k: float(np.median([r[k] for r in rs])) for k in rs[0]} | {"runs": rs} for n, rs in runs.items()}


def kept(result: dict[str, Any], names: tuple[str, ...], file: str) -> None:
    """Checks the sources trained the same, prints each one's line and writes the result to
    bench/results/`file`."""
    losses = {result[name]["progressive_logloss"] for name in names}
    assert len(losses) == 1, losses  # the same training from every source
    for name in names:
        r = result[name]
        print(
            f"{name}: {r['examples_per_s']:,.0f} examples/s in the trainer, {r['whole_s']:.1f} s whole process,"
            f" {result['bytes'][name]:,} bytes"
        )
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / file).write_text(json.dumps(result, indent=1))
