"""A PS shard that stops answering for longer than a call's deadline (SIGSTOP: a hung or
swapping process) no longer kills the trainer with a DEADLINE_EXCEEDED traceback: reads
are retried within --ps-retry-s, a push that may have landed takes every shard back to the
last cut, the trainer says so while it waits, and the model ends exactly as an
uninterrupted run leaves it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.test_exactly_once import _model, _once, _shard, _training


def test_a_shard_that_hangs_past_the_call_deadline_is_waited_for_exactly_once(data_dir: Path, tmp_path: Path):
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:60000]
    stream = tmp_path / "stream.libfm"
    stream.write_text("\n".join(lines) + "\n")
    (tmp_path / "once").mkdir()
    expected = _once(stream, tmp_path / "once")
    shards = [_shard(i, tmp_path) for i in range(2)]
    try:
        cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--metrics-port", "-1", "--port", "-1"]
        cmd += ["--ps", ",".join(s.address for s in shards), "--batch-size", "1024", "--checkpoint-interval-s", "0.3"]
        cmd += ["--ps-retry-s", "60", "--ps-call-timeout-s", "1.5"]
        cmd += ["--push-codec", "none"]  # lossless: the bits depend on the stream alone, not on when cuts fell
        log = tmp_path / "trainer.log"
        with open(log, "w") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)
        _training(proc, log)
        os.kill(shards[1].proc.pid, signal.SIGSTOP)  # hung: its socket accepts, nothing answers
        time.sleep(4)
        os.kill(shards[1].proc.pid, signal.SIGCONT)
        proc.wait(240)
        text = log.read_text()
        assert proc.returncode == 0, text[-3000:]
        assert "Traceback" not in text and "did not answer" in text
        assert _model(shards) == expected
    finally:
        for s in shards:
            with __import__("contextlib").suppress(ProcessLookupError):
                os.kill(s.proc.pid, signal.SIGCONT)
            s.stop()
