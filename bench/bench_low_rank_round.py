"""A low-rank round of the ranks' MLP gradients (trainer.step.low_rank_sync, issue 32), alone:
two gloo ranks in separate processes on this host run --rounds PowerSGD rounds (rank 4,
after 2 whole ones) on DeepFM's MLP shapes (Frappe's 10 fields x k 8 into 400x400x400),
with --threads torch threads each. Per setting: wall and CPU ms a round (the slower rank's
wall, the mean CPU of the two); settings alternate within each of --reps repetitions,
medians printed. Asserts nothing.

Run: .venv/bin/python bench/bench_low_rank_round.py [--threads 1,2] [--rounds 400] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainer.local_ranks import free_port  # noqa: E402

SHAPES = [(400, 80), (400,), (400, 400), (400,), (400, 400), (400,), (1, 400), (1,)]
WORDS = 5  # the rounds' control words (trainer.run.group)


def _rank(rank: int, port: int, threads: int, rounds: int, out: Any) -> None:
    from trainer.step.low_rank_sync import LowRankSync

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        gen = torch.Generator().manual_seed(rank)
        grads = [torch.randn(*s, generator=gen) for s in SHAPES]
        words = torch.cat([torch.zeros(WORDS), torch.tensor([256.0])])
        sync = LowRankSync(4, 2, None)
        for _ in range(20):
            sync.round(words, grads)
        dist.barrier()
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(rounds):
            sync.round(words, grads)
        out.put((rank, (time.perf_counter() - wall) * 1e3 / rounds, (time.process_time() - cpu) * 1e3 / rounds))
    finally:
        dist.destroy_process_group()


def one_run(threads: int, rounds: int) -> tuple[float, float]:
    """(wall ms, CPU ms) a round for two ranks of `threads` torch threads each."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, threads, rounds, out)) for r in range(2)]
    for p in procs:
        p.start()
    got = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    return max(w for _, w, _ in got), statistics.mean(c for _, _, c in got)


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    settings = [int(t) for t in args.threads.split(",")]
    runs: dict[int, list[tuple[float, float]]] = {t: [] for t in settings}
    for _ in range(args.reps):
        for t in settings:
            runs[t].append(one_run(t, args.rounds))
    print("| torch threads a rank | ms a round (wall) | CPU ms a round a rank |")
    print("|---|---|---|")
    for t, rs in runs.items():
        print(f"| {t} | {statistics.median(w for w, _ in rs):.2f} | {statistics.median(c for _, c in rs):.2f} |")


if __name__ == "__main__":
    main()
