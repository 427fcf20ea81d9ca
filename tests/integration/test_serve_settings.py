"""`boundless serve` refuses settings that cannot work, before it binds a port, with a
message naming the flags: a router without shards, shards without a router, a router that
is a shard too, a malformed shard list or part, an unknown batching mode."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--router"], "--router needs --shards"),
        (["--shards", "127.0.0.1:1"], "--shards is the router's list of shard replicas: add --router"),
        (["--router", "--shard", "0/2", "--shards", "127.0.0.1:1"], "--router and --shard exclude each other"),
        (["--router", "--shards", "127.0.0.1:1,|"], "names no replica for some shard"),
        (["--shard", "2/2"], "shard: '2/2' is not i/N with 0 <= i < N"),
        (["--dnn-batching", "sometimes"], "--dnn-batching 'sometimes': expected auto, on or off"),
    ],
)
def test_settings_that_cannot_work_are_refused(tmp_path, flags, message):
    cmd = [sys.executable, "-m", "boundless", "serve", "--repo", str(tmp_path / "repo"), *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
