"""SIGTERM stops a trainer whose PS shard is down at once: its calls to the shard stop
retrying (they would for --ps-retry-s, 120 s by default), it logs why, exits 0, and a
trainer started later on the restarted shard takes up from the last checkpoint cut."""

from __future__ import annotations

import signal
import subprocess
import sys

from boundless.processes import start
from tests.support import wait_for_text

LINES = 500


def test_sigterm_stops_a_trainer_whose_shard_is_down_at_once(data_dir, tmp_path):
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    stream = tmp_path / "in"
    stream.mkdir()
    (stream / "a.libfm").write_text("\n".join(lines[:LINES]) + "\n")
    ps = start("ps", ["ps", "--data-dir", str(tmp_path / "ps")], tmp_path)
    ps.wait_ready()
    port = str(ps.ready["grpc_port"])
    log = tmp_path / "trainer.log"
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--follow", "--ps", ps.address]
    cmd += ["--metrics-port", "-1", "--batch-size", "100", "--checkpoint-interval-s", "0.2", "--ps-retry-s", "3600"]
    with open(log, "w") as err:
        trainer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)
    try:
        wait_for_text(log, "committed", trainer)  # trained the first file and took a cut
        ps.kill()
        (stream / "b.libfm").write_text("\n".join(lines[LINES : 2 * LINES]) + "\n")  # work that needs the shard
        wait_for_text(log, "is unreachable; retrying", trainer)
        trainer.send_signal(signal.SIGTERM)
        # it stops instead of retrying for its hour (--ps-retry-s): an hour would outlast this wait
        assert trainer.wait(120) == 0, log.read_text()[-3000:]
        assert "stopped; the next start takes up from the last checkpoint cut" in log.read_text()
        # the shard back on its port: a new trainer goes back to the cut and trains both files
        ps = start("ps", ["ps", "--data-dir", str(tmp_path / "ps"), "--port", port], tmp_path)
        ps.wait_ready()
        again = subprocess.run([*cmd[:6], "--no-follow", *cmd[7:]], capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr[-3000:]
        assert "the stream takes up at" in again.stderr, again.stderr[-3000:]
    finally:
        if trainer.poll() is None:
            trainer.kill()
        ps.stop()
