"""Serving's temporary copy folders: one left by a killed server is removed by the next."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from serving.local_copies import PREFIX, LocalCopies, pid_namespace, remove_orphans


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_folder_whose_process_is_gone_is_removed_and_a_live_one_kept(tmp_path: Path) -> None:
    ns, gone = pid_namespace(), _dead_pid()
    dead = tmp_path / f"{PREFIX}{ns}-{gone}-abc"
    live = tmp_path / f"{PREFIX}{ns}-{os.getpid()}-def"
    unnamed = tmp_path / f"{PREFIX}xyz"  # not named after a process: never touched
    elsewhere = tmp_path / f"{PREFIX}{ns + 1}-{gone}-ghi"  # another pid namespace's pid
    for d in (dead, live, unnamed, elsewhere):
        (d / "1").mkdir(parents=True)
        (d / "1" / "image").write_bytes(b"x" * 100)
    assert remove_orphans(tmp_path) == [dead]
    assert not dead.exists() and live.is_dir() and unnamed.is_dir() and elsewhere.is_dir()


def test_a_killed_server_leaves_a_folder_the_next_one_removes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = (
        "import os, signal\nfrom serving.local_copies import LocalCopies\n"
        "print(LocalCopies().root, flush=True)\nos.kill(os.getpid(), signal.SIGKILL)"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    left = Path(out.stdout.strip())
    assert left.parent == tmp_path and left.is_dir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    copies = LocalCopies()
    try:
        assert not left.exists() and copies.root.is_dir() and copies.root.parent == tmp_path
    finally:
        copies.close()
    assert not copies.root.exists()
