"""What serving gets from a lossy push codec (issue 32): with --export-drain (the default)
every export holds every update trained but bf16's rounding of the residuals, so one
worker's exports under 1-bit pushes are the uncompressed run's to that rounding; without it
they lack the residuals error feedback still holds back, which the worker's own view never
shows."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from boundless.processes import Daemon, start
from ctr.format import modelfile


def _shards(work: Path) -> list[Daemon]:
    out = []
    for i in range(2):
        args = ["ps", "--shard-index", str(i), "--shard-count", "2", "--export-root", str(work / "exports")]
        d = start(f"ps{i}", args, work)
        d.wait_ready()
        out.append(d)
    return out


def _exports(stream: Path, work: Path, *flags: str) -> tuple[list[dict[int, np.ndarray]], dict]:
    """Each export's sparse rows by key, in export order, and the summary JSON."""
    work.mkdir()
    shards = _shards(work)
    try:
        cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--no-follow", "--metrics-port", "-1"]
        cmd += ["--ps", ",".join(s.address for s in shards), "--export-dir", str(work / "exports"), "--port", "-1"]
        # an export whenever the last has its holdout: at the same sample counts in every run
        cmd += ["--export-interval-s", "0", "--holdout-samples", "1000", "--full-export-every", "1", "--batch-size", "1024"]
        cmd += ["--checkpoint-interval-s", "0", "--metrics-out", str(work / "m.json"), *flags]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
    finally:
        for s in shards:
            s.stop()
    out = []
    for folder in sorted((work / "exports").iterdir()):
        rows: dict[int, np.ndarray] = {}
        for f in json.loads((folder / "export.json").read_text())["files"]:
            if f["role"] == "sparse_full":
                image = modelfile.load_image(folder / f["name"], mmap=False)
                keys, slots = image.items()
                for k, r in zip(keys.tolist(), image.gather(slots), strict=True):
                    rows[k] = r
        out.append(rows)
    return out, json.loads((work / "m.json").read_text())


def _gap(a: dict[int, np.ndarray], b: dict[int, np.ndarray]) -> float:
    assert a.keys() == b.keys()
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


def test_exports_under_1bit_pushes_hold_every_update_only_when_drained(data_dir: Path, tmp_path: Path):
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:12000]
    stream = tmp_path / "stream.libfm"
    stream.write_text("\n".join(lines) + "\n")
    exact, _ = _exports(stream, tmp_path / "exact", "--push-codec", "none")  # auto would round (rounded-pushes.md)
    drained, got = _exports(stream, tmp_path / "drained", "--push-codec", "onebit")
    kept, _ = _exports(stream, tmp_path / "kept", "--push-codec", "onebit", "--no-export-drain")
    assert len(exact) == len(drained) == len(kept) >= 5
    # the residuals went out before each export but the last (the end's drain came first)
    assert got["wire"]["w"]["drain_export"]["sent"] > 0, got["wire"]
    # an export's drain sends the residuals in bf16: a version lacks at most that rounding
    gaps_drained = [_gap(e, d) for e, d in zip(exact[:-1], drained[:-1], strict=True)]
    gaps_kept = [_gap(e, k) for e, k in zip(exact[:-1], kept[:-1], strict=True)]
    assert max(gaps_kept) > 1e-3
    for g_drained, g_kept in zip(gaps_drained, gaps_kept, strict=True):
        assert g_drained <= g_kept / 20, (gaps_drained, gaps_kept)
    for last in (drained[-1], kept[-1]):  # the last export follows the end's exact drain either way
        assert _gap(exact[-1], last) < 1e-6
