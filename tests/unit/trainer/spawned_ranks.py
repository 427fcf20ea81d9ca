"""Ranks of a real torch.distributed group for tests: processes started with `spawn` (no
state shared with the test), meeting on a free loopback port."""

from __future__ import annotations

import multiprocessing as mp
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(
    target: Callable[..., None], out: Path, suffix: str, world: int = 2, args: tuple[Any, ...] = (), timeout_s: float = 180
) -> list[Path]:
    """Runs target(rank, *args, port, path) in `world` processes, each writing its result to
    `path` (out/r{rank}{suffix}); returns the paths once every rank exited with 0."""
    ctx = mp.get_context("spawn")
    port = free_port()
    paths = [out / f"r{r}{suffix}" for r in range(world)]
    procs = [ctx.Process(target=target, args=(r, *args, port, str(paths[r]))) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=timeout_s)
        assert p.exitcode == 0, f"rank {procs.index(p)} exited with {p.exitcode}"
    return paths
