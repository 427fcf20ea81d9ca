"""Serving's temporary copy folders: one left by a killed server is removed by the next."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from serving.loading.local_copies import PREFIX, LocalCopies, pid_namespace, remove_orphans


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
        "import os, signal\nfrom serving.loading.local_copies import LocalCopies\n"
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


def _version(repo: Path, version: int, payload: bytes) -> tuple[Path, dict]:
    import hashlib

    d = repo / "ctr" / f"{version:08d}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "shard0.image").write_bytes(payload)
    files = [{"name": "shard0.image", "size": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}]
    return d, {"model": "ctr", "version": version, "files": files}


def test_a_rebuilt_repository_never_meets_its_old_copies(tmp_path):
    copies = LocalCopies(tmp_path / "copies")
    old_dir, old = _version(tmp_path / "repo", 1, b"old model " * 100)
    assert (copies.version_dir(old_dir, 1, old) / "shard0.image").read_bytes() == b"old model " * 100
    shutil.rmtree(tmp_path / "repo")  # the repository is rebuilt: version 1 again, other weights of the same size
    new_dir, new = _version(tmp_path / "repo", 1, b"new model " * 100)
    again = LocalCopies(tmp_path / "copies")  # a later process on the same --copies-dir
    assert (again.version_dir(new_dir, 1, new) / "shard0.image").read_bytes() == b"new model " * 100


def test_a_copy_left_on_disk_is_checked_before_it_is_used(tmp_path):
    src_dir, m = _version(tmp_path / "repo", 3, b"weights " * 100)
    first = LocalCopies(tmp_path / "copies").version_dir(src_dir, 3, m)
    (first / "shard0.image").write_bytes(b"WEIGHTS " * 100)  # damaged while no process ran, same size
    d = LocalCopies(tmp_path / "copies").version_dir(src_dir, 3, m)
    assert (d / "shard0.image").read_bytes() == b"weights " * 100


def test_processes_sharing_a_folder_keep_the_copies_any_of_them_uses(tmp_path):
    """`serve --processes N`: one folder of copies; a process that moved on removes only
    the copies no live process lists, and an exited process's list stops counting."""
    one_dir, one = _version(tmp_path / "repo", 1, b"one " * 100)
    two_dir, two = _version(tmp_path / "repo", 2, b"two " * 100)
    a, b = LocalCopies(tmp_path / "copies"), LocalCopies(tmp_path / "copies")
    d1 = a.version_dir(one_dir, 1, one)
    assert b.version_dir(one_dir, 1, one) == d1  # the same files: once on disk, once in the page cache
    d2 = a.version_dir(two_dir, 2, two)
    a.keep_only({2})
    assert d1.is_dir() and d2.is_dir()  # b still serves version 1
    b.version_dir(two_dir, 2, two)
    b.keep_only({2})
    assert not d1.exists() and d2.is_dir()
    b.close()  # b gone: its list with it; a's copy of 2 stays
    a.keep_only({2})
    assert d2.is_dir()
    stale = tmp_path / "copies" / f".using-{pid_namespace()}-{_dead_pid()}-0a"
    stale.write_text(json.dumps([d2.name]))
    a.keep_only(set())  # a process that is gone protects nothing, and its list is removed
    assert not d2.exists() and not stale.exists()
