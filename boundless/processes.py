"""Starts daemons as OS processes, waits for their ready files, and stops them; a process
that dies is reported with the tail of its log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctr.runtime.parent_death import sigterm_when_parent_dies


class DaemonDied(RuntimeError):
    pass


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "<no log>"


@dataclass
class Daemon:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    ready_file: Path
    ready: dict[str, Any] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.ready['grpc_port']}"

    def check(self) -> None:
        code = self.proc.poll()
        if code is not None:
            raise DaemonDied(f"{self.name} exited with code {code}; last log lines:\n{log_tail(self.log)}")

    def wait_ready(self, timeout: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not self.ready_file.exists():
            self.check()
            if time.monotonic() > deadline:
                raise DaemonDied(f"{self.name} not ready after {timeout:.0f}s; last log lines:\n{log_tail(self.log)}")
            time.sleep(0.05)
        self.ready = json.loads(self.ready_file.read_text())
        return self.ready

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        """kill -9, as a crash would."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


PARENT_ENV = "BOUNDLESS_DIE_WITH_PARENT"  # the pid whose death ends a daemon start() ran


def die_with_parent() -> None:
    """Called as a `boundless` process starts: one that start() ran from its main thread
    asks the kernel for SIGTERM when that process dies, however it dies (kill -9 of a demo,
    a notebook's kernel, a test runner), so it stops as on any SIGTERM instead of living on
    with its ports and stores. The variable is removed, so the daemon's own children (a
    serving group's processes, local ranks) are not tied to a process that is not theirs."""
    raw = os.environ.pop(PARENT_ENV, None)
    if not raw or not sigterm_when_parent_dies():
        return  # not started so, or not granted: the daemon lives on as before
    if os.getppid() != int(raw):  # the parent died before the request took hold
        os.kill(os.getpid(), signal.SIGTERM)


def ends_with_this_process() -> Callable[[], bool] | None:
    """A preexec_fn that ends a child program (not a `boundless` one: those call
    die_with_parent themselves) when this process dies, for use from the main thread; None
    from another thread, whose exit would end the child early."""
    return sigterm_when_parent_dies if threading.current_thread() is threading.main_thread() else None


def start(name: str, args: list[str], run_dir: Path, env: dict[str, str] | None = None, module: str = "boundless") -> Daemon:
    """Runs `python -m MODULE ARGS --ready-file ...` with its output in run_dir/NAME.log.
    Started from the main thread, the daemon ends when this process does (die_with_parent:
    the kernel ties it to the thread that started it, and only the main thread lasts as long
    as the process)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    tie = {PARENT_ENV: str(os.getpid())} if threading.current_thread() is threading.main_thread() else {}
    ready = run_dir / f"{name}.ready.json"
    ready.unlink(missing_ok=True)
    log = run_dir / f"{name}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args, "--ready-file", str(ready)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **tie, **(env or {})},
            start_new_session=True,
        )
    return Daemon(name, proc, log, ready)
