"""Checkpoint and recovery figures (issue: exactly-once), with a real PS shard process and
RocksDB on this machine:

- checkpoint: a shard holding K keys of an LR table (FTRL rows: z, n) has M of them changed;
  the time training stalls (Prepare: the snapshot under the shard lock, as the trainer
  sees it over gRPC) and the time until the cut is written and committed (Commit): the
  shard's first cut (every row), incremental cuts, and cuts the writer then rewrites whole
  (compaction, outside the lock);
- recovery: the shard, holding `--keys` keys in its committed cut, is killed with -9 and
  started again on its port; the time from the restart until the first training step (a
  restore to the cut, then a pull and a push of a 16,384-key batch) is done, split into
  the process's load of the cut and the rest.

Writes bench/results/recovery.json; asserts nothing.
Run: .venv/bin/python bench/bench_recovery.py [--keys 10000000] [--changed 1000000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from boundless.processes import Daemon, start  # noqa: E402
from ctr.model.spec import ModelSpec  # noqa: E402
from ps.api import DELTA  # noqa: E402
from ps.client import PSClient  # noqa: E402

SPEC = ModelSpec("lr")
CHUNK = 1 << 20


def fill(client: PSClient, keys: np.ndarray) -> None:
    for lo in range(0, keys.shape[0], CHUNK):
        part = keys[lo : lo + CHUNK]
        client.push("w", part, np.full((part.shape[0], 2), 0.01), kind=DELTA)


def shard(work: Path, port: int = 0, full_every: int = 1000) -> Daemon:
    args = ["ps", "--data-dir", str(work / "ps0"), "--port", str(port), "--full-checkpoint-every", str(full_every)]
    d = start("ps0", args, work)
    d.wait_ready(timeout=600)
    return d


def checkpoint_figures(work: Path, keys: int, changed: int, reps: int) -> dict[str, object]:
    """Cut 1 holds every row (the first cut of a shard); then `reps` cuts of `changed` rows
    each, every second of which the writer rewrites whole (--full-checkpoint-every 2)."""
    d = shard(work, full_every=2)
    client = PSClient.connect([d.address])
    client.control.declare(SPEC.tables())
    all_keys = np.unique(np.random.default_rng(0).integers(1, 2**63, keys, dtype=np.uint64))
    fill(client, all_keys)
    out: dict[str, list[float]] = {}
    rng = np.random.default_rng(1)
    for rep in range(reps + 1):
        cut = rep + 1
        kind = "first" if cut == 1 else "compacting" if cut % 2 == 1 else "incremental"
        if rep:
            fill(client, np.sort(rng.choice(all_keys, changed, replace=False)))
        t0 = time.perf_counter()
        rows = client.control.prepare(cut, b"{}")
        t1 = time.perf_counter()
        client.control.commit(cut)
        t2 = time.perf_counter()
        out.setdefault(f"{kind}_stall_s", []).append(t1 - t0)
        out.setdefault(f"{kind}_commit_s", []).append(t2 - t1)
        stall_ms = 1000 * (t1 - t0)
        print(f"cut {cut} ({kind}): {rows:,} rows, stall {stall_ms:.0f} ms, written and committed in {t2 - t1:.2f} s", flush=True)
    client.close()
    d.stop()
    return {
        "keys": keys,
        "changed": changed,
        **{k: {"min": min(v), "median": statistics.median(v)} for k, v in out.items()},
    }


def recovery_figures(work: Path, keys: int) -> dict[str, float]:
    d = shard(work)
    port = d.ready["grpc_port"]
    client = PSClient.connect([d.address], retry_s=600)
    client.control.declare(SPEC.tables())
    all_keys = np.unique(np.random.default_rng(2).integers(1, 2**63, keys, dtype=np.uint64))
    t0 = time.perf_counter()
    fill(client, all_keys)
    print(f"filled {all_keys.shape[0]:,} keys in {time.perf_counter() - t0:.1f} s", flush=True)
    client.control.prepare(1, b"{}")
    client.control.commit(1)
    d.kill()
    t0 = time.perf_counter()
    d = shard(work, port)
    ready = time.perf_counter()
    client.control.restore(1, generation=1)
    batch = np.sort(np.random.default_rng(3).choice(all_keys, 16384, replace=False))
    state, session = client.pull("w", batch, state=True)
    client.push("w", batch, np.full_like(state, 0.001), session, kind=DELTA)
    done = time.perf_counter()
    rows = sum(t.rows for t in client.control.status()[0].tables if t.kind == "sparse")
    client.close()
    d.stop()
    print(
        f"restart to ready (the cut loaded): {ready - t0:.1f} s; to the first step: {done - t0:.1f} s; {rows:,} rows", flush=True
    )
    return {"keys": float(rows), "restart_to_ready_s": ready - t0, "restart_to_first_step_s": done - t0}


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--keys", type=int, default=10_000_000, help="keys the shard holds for the recovery figure")
    ap.add_argument("--checkpoint-keys", type=int, default=4_000_000, help="keys the shard holds for the checkpoint figure")
    ap.add_argument("--changed", type=int, default=1_000_000, help="rows changed before each incremental cut")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "recovery.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = checkpoint_figures(Path(tmp) / "ckpt", args.checkpoint_keys, args.changed, args.reps)
    with tempfile.TemporaryDirectory() as tmp:
        rec = recovery_figures(Path(tmp) / "rec", args.keys)
    result = {"checkpoint": ckpt, "recovery": rec}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
