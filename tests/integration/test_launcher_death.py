"""Daemons a launcher started (boundless.processes.start: a demo, local_platform, a test)
end when the launcher dies, even by kill -9: before, they lived on in their own sessions
with their ports, stores and brokers, and a killed `boundless demo` left six processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support import wait_until

LAUNCHER = """
import sys, time
from pathlib import Path
from boundless.kafka_broker import KafkaBroker
from boundless.processes import start
run = Path(sys.argv[1])
shard = start("ps0", ["ps", "--shard-index", "0", "--shard-count", "1", "--port", "0", "--metrics-port", "-1"], run)
shard.wait_ready()
broker = KafkaBroker(run / "kafka.log")
print(shard.proc.pid, broker.proc.pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"  # reaped or not, a zombie runs nothing


def test_a_launcher_killed_takes_its_daemons_with_it(tmp_path: Path) -> None:
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert launcher.stdout is not None
        shard, broker = (int(x) for x in launcher.stdout.readline().split())
        assert _alive(shard) and _alive(broker)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        wait_until("the launcher's shard and broker gone", lambda: not _alive(shard) and not _alive(broker), 60)
        assert "stopped" in (tmp_path / "ps0.log").read_text()  # by SIGTERM: it stopped as it always does
    finally:
        launcher.kill()
