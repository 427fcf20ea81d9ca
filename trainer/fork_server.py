"""The multiprocessing context that starts the `--workers` local ranks.

Ranks fork from a fresh single-threaded server that loaded the kernels once
(trainer.preload); forking the trainer itself would copy its gRPC and reader threads. The
command starts the server before it imports the trainer, so the server's warm-up runs
beside the trainer's own start-up. Only the standard library is imported here.
"""

from __future__ import annotations

import multiprocessing as mp
from multiprocessing import forkserver
from typing import Any


def start_fork_server() -> Any:
    """The context; starts its server if it is not running (idempotent)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["trainer.preload"])
    forkserver.ensure_running()
    return ctx
