"""Starts daemons as OS processes, waits for their ready files, and stops them; a process
that dies is reported with the tail of its log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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


def start(name: str, args: list[str], run_dir: Path, env: dict[str, str] | None = None, module: str = "boundless") -> Daemon:
    """Runs `python -m MODULE ARGS --ready-file ...` with its output in run_dir/NAME.log."""
    run_dir.mkdir(parents=True, exist_ok=True)
    ready = run_dir / f"{name}.ready.json"
    ready.unlink(missing_ok=True)
    log = run_dir / f"{name}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args, "--ready-file", str(ready)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    return Daemon(name, proc, log, ready)
