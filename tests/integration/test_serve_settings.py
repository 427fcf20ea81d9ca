"""`boundless serve` refuses settings that cannot work, before it binds a port, with a
message naming the flags: a router without shards, shards without a router, a router that
is a shard too, a malformed shard list or part, an unknown batching mode."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_a_repository_that_is_a_file_is_refused_at_start(tmp_path):
    (tmp_path / "repo").write_text("")  # it started and logged "Not a directory" every poll
    proc = subprocess.run(
        [sys.executable, "-m", "boundless", "serve", "--repo", str(tmp_path / "repo")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0 and "a file, where the model repository's folder is needed" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--router"], "--router needs --shard-replicas"),
        (["--shard-replicas", "127.0.0.1:1"], "--shard-replicas is the router's list of shard replicas: add --router"),
        (["--router", "--shard-count", "2", "--shard-replicas", "127.0.0.1:1"], "--router and --shard-count exclude each other"),
        (["--router", "--shard-replicas", "127.0.0.1:1,|"], "names no replica for some shard"),
        (["--shard-index", "2", "--shard-count", "2"], "--shard-index 2: must be 0..1 (--shard-count 2)"),
        (["--shard", "0/2"], "--shard is now --shard-index"),
        (["--shards", "127.0.0.1:1"], "--shards is now --shard-replicas"),
        (["--dnn-batching", "sometimes"], "--dnn-batching 'sometimes': expected auto, on or off"),
        (["--shard-count", "0"], "--shard-count 0: must be at least 1"),
    ],
)
def test_settings_that_cannot_work_are_refused(tmp_path, flags, message):
    cmd = [sys.executable, "-m", "boundless", "serve", "--repo", str(tmp_path / "repo"), *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
