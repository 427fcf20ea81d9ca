"""Model-path figures on a 10M-key LR model (two shard images), with real processes:

- serving's time to apply a delta of 10k rows (VersionLoader.load from the version before);
- peak RSS of a serving process across a full swap, against its steady state;
- rollback latency: `boundless model rollback --serving ADDR` until it returns (serving
  confirmed the version), and the policy write until serving answers with the version.

    .venv/bin/python bench/bench_model_path.py [--keys 10000000] [--reps 5]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.serving_model import file_entry  # noqa: E402
from boundless.processes import start  # noqa: E402
from ctr.format import modelfile  # noqa: E402
from ctr.model.spec import ModelSpec  # noqa: E402
from ctr.repository.versions import DONE, MANIFEST, Policy, Repository  # noqa: E402
from ctr.routing import shard_of  # noqa: E402
from serving.client import PredictClient  # noqa: E402
from serving.loading.loader import VersionLoader  # noqa: E402
from serving.loading.local_copies import LocalCopies  # noqa: E402

SHARDS = 2


def _version(repo: Repository, v: int, kind: str, base: int, chain: list[int], files: list[dict[str, Any]]) -> None:
    d = repo.path(v)
    prev = None
    if kind == "delta":
        pv = chain[-2] if len(chain) > 1 else base
        prev = {"version": pv, "manifest_sha256": hashlib.sha256((repo.path(pv) / MANIFEST).read_bytes()).hexdigest()}
    m = {
        "model": "ctr",
        "version": v,
        "kind": kind,
        "base_version": base,
        "delta_chain": chain,
        "previous": prev,
        "export_id": f"{v:020d}",
        "spec": {"name": "ctr", **ModelSpec("lr").to_dict(), "fields": []},
        "shard_count": SHARDS,
        "files": files,
        "metrics": {},
        "created": time.time(),
    }
    (d / MANIFEST).write_text(json.dumps(m, indent=1))
    (d / DONE).write_text(str(v))


def full_version(repo: Repository, v: int, keys: np.ndarray, seed: int) -> None:
    d = repo.path(v)
    d.mkdir(parents=True)
    owner = shard_of(keys, SHARDS)
    files = []
    for s in range(SHARDS):
        k = keys[owner == s]
        w = np.random.default_rng(seed + s).normal(0, 0.1, size=(k.shape[0], 1)).astype(np.float32)
        path = d / f"shard{s}-sparse.image"
        modelfile.write_image(path, k, w)
        files.append(file_entry(path, "sparse_full", s, int(k.shape[0]), "w:1"))
    save_file({"bias": np.zeros(1, np.float32)}, str(d / "dense.safetensors"))
    files.append(file_entry(d / "dense.safetensors", "dense", None, 1, ""))
    _version(repo, v, "full", v, [], files)


def delta_version(repo: Repository, v: int, base: int, chain: list[int], keys: np.ndarray, rows: int) -> None:
    d = repo.path(v)
    d.mkdir(parents=True)
    rng = np.random.default_rng(v)
    picked = rng.choice(keys, size=rows, replace=False)
    owner = shard_of(picked, SHARDS)
    files = []
    for s in range(SHARDS):
        k = picked[owner == s]
        path = d / f"shard{s}-sparse.delta"
        modelfile.write_delta(path, k, rng.normal(0, 0.1, size=(k.shape[0], 1)).astype(np.float32), np.zeros(0, np.uint64))
        files.append(file_entry(path, "sparse_delta", s, int(k.shape[0]), "w:1"))
    save_file({"bias": np.zeros(1, np.float32)}, str(d / "dense.safetensors"))
    files.append(file_entry(d / "dense.safetensors", "dense", None, 1, ""))
    _version(repo, v, "delta", base, [*chain, v], files)


def delta_apply(repo: Repository, reps: int) -> list[float]:
    """Seconds for serving's watcher to go from version 1+chain to the next delta."""
    copies = LocalCopies()
    current = VersionLoader(repo, 1, copies).load()
    times = []
    for i in range(reps):
        v = 10 + i
        t = time.perf_counter()
        current = VersionLoader(repo, v, copies).load(current)
        times.append(time.perf_counter() - t)
    copies.close()
    return times


def _rss(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in bytes."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def swap_and_rollback(repo: Repository, work: Path, keys: np.ndarray, reps: int) -> dict[str, Any]:
    repo.set_policy(Policy("pinned", 1))
    serving = start("serving", ["serve", "--repo", str(repo.root), "--poll-s", "0.05"], work)
    serving.wait_ready()
    client = PredictClient(serving.address)
    try:
        _until(lambda: client.status().version == 1)
        probe = {"0": "1"}
        for _ in range(50):
            client.predict([probe] * 200)
        steady, _ = _rss(serving.proc.pid)
        Path(f"/proc/{serving.proc.pid}/clear_refs").write_text("5")  # the peak counts from here
        repo.set_policy(Policy("pinned", 2))  # another full version: a full swap
        _until(lambda: client.status().version == 2)
        for _ in range(50):
            client.predict([probe] * 200)
        after, peak = _rss(serving.proc.pid)
        cli, switch = [], []
        for i in range(reps):
            target = 1 if i % 2 == 0 else 2
            t = time.perf_counter()
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "boundless",
                    "model",
                    "pin",
                    str(target),
                    "--repo",
                    str(repo.root),
                    "--serving",
                    serving.address,
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            cli.append(time.perf_counter() - t)
            assert out.returncode == 0, out.stdout + out.stderr
            back = 2 if target == 1 else 1
            t = time.perf_counter()
            repo.set_policy(Policy("pinned", back))
            _until(lambda back=back: client.status().version == back)
            switch.append(time.perf_counter() - t)
        return {"steady_rss": steady, "peak_rss": peak, "after_rss": after, "cli_s": cli, "switch_s": switch}
    finally:
        client.close()
        serving.stop()


def _until(predicate: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except Exception:  # noqa: BLE001 - nothing loaded yet
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("serving did not get there")
        time.sleep(0.01)


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--delta-rows", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-model-path-") as tmp:
        work = Path(tmp)
        repo = Repository(work / "repo", "ctr")
        keys = np.unique(np.random.default_rng(0).integers(1, 2**63, size=args.keys, dtype=np.uint64))
        full_version(repo, 1, keys, 1)
        full_version(repo, 2, keys, 2)
        chain: list[int] = []
        for i in range(args.reps):
            v = 10 + i  # each delta follows version 1 directly: every rep applies one delta of delta_rows
            delta_version(repo, v, 1, chain, keys, args.delta_rows)
        apply = delta_apply(repo, args.reps)
        swap = swap_and_rollback(repo, work, keys, args.reps)
    result = {
        "keys": int(keys.shape[0]),
        "delta_rows": args.delta_rows,
        "delta_apply_s": {"min": min(apply), "median": statistics.median(apply)},
        "steady_rss_mb": swap["steady_rss"] / 1e6,
        "peak_rss_mb": swap["peak_rss"] / 1e6,
        "peak_over_steady": swap["peak_rss"] / swap["steady_rss"],
        "rollback_cli_s": {"min": min(swap["cli_s"]), "median": statistics.median(swap["cli_s"])},
        "policy_to_serving_s": {"min": min(swap["switch_s"]), "median": statistics.median(swap["switch_s"])},
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
