"""A shard killed while the trainer holds a file's tail back (an export folder makes it the
last export's holdout) changes nothing: the batches read after the cut and not trained yet
are dropped with the rest and read again, so none is trained twice, and the model ends as
an uninterrupted run with the same settings leaves it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from boundless.processes import Daemon, start
from tests.integration.test_exactly_once import _model


def _train(stream: Path, shards: list, work: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--metrics-port", "-1", "--port", "-1"]
    cmd += ["--ps", ",".join(s.address for s in shards), "--batch-size", "1024", "--checkpoint-interval-s", "0.3"]
    cmd += ["--ps-retry-s", "60", "--export-dir", str(work / "exports"), "--export-interval-s", "1e9"]
    cmd += ["--holdout-samples", "5000"]
    cmd += ["--push-codec", "none"]  # lossless: the bits depend on the stream alone, not on when cuts fell
    with open(work / "trainer.log", "w") as err:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)


def _shard_exporting(i: int, work: Path, port: int = 0, name: str = "") -> Daemon:
    """A shard with a data folder, writing its exports under the trainer's folder."""
    args = ["ps", "--shard-index", str(i), "--shard-count", "2", "--data-dir", str(work / f"ps{i}"), "--port", str(port)]
    d = start(name or f"ps{i}", [*args, "--export-root", str(work / "exports")], work)
    d.wait_ready()
    return d


def _first_cut(proc: subprocess.Popen[str], log: Path, timeout: float = 120) -> None:
    until = time.monotonic() + timeout
    while "committed" not in log.read_text():
        assert proc.poll() is None and time.monotonic() < until, log.read_text()[-2000:]
        time.sleep(0.005)


def _run(stream: Path, work: Path, kill: bool) -> dict[str, object]:
    work.mkdir()
    shards = [_shard_exporting(i, work) for i in range(2)]
    proc = _train(stream, shards, work)
    try:
        if kill:
            # The trainer is paused from its first cut until the shard is back, so the kill
            # lands mid-stream however fast this machine trains the file.
            _first_cut(proc, work / "trainer.log")
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                assert "done:" not in (work / "trainer.log").read_text(), "the trainer ended before the kill"
                port = shards[1].ready["grpc_port"]
                shards[1].kill()
                shards[1] = _shard_exporting(1, work, port, "ps1b")
            finally:
                os.kill(proc.pid, signal.SIGCONT)
        proc.wait(240)
        text = (work / "trainer.log").read_text()
        assert proc.returncode == 0, text[-3000:]
        if kill:
            assert "going back to the last checkpoint cut" in text, text[-3000:]
        return _model(shards)
    finally:
        if proc.poll() is None:
            proc.kill()
        for s in shards:
            s.stop()


def test_a_shard_killed_while_the_tail_is_held_back_changes_nothing(data_dir: Path, tmp_path: Path):
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    stream = tmp_path / "stream.libfm"
    stream.write_text("\n".join(lines * 2) + "\n")  # about a second of training on a fast machine
    assert _run(stream, tmp_path / "killed", kill=True) == _run(stream, tmp_path / "once", kill=False)
