"""A full disk under the model repository: the manager keeps running, publishes nothing
half-written, rejects nothing for it, and publishes every export once space returns. The
disk is a 16 MiB tmpfs where mounting is allowed; elsewhere a file-size limit (RLIMIT_FSIZE,
EFBIG) stands in for it, lifted by a restart of the manager."""

from __future__ import annotations

import contextlib
import errno
import resource
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from boundless.processes import Daemon, start
from ctr.repository.versions import Repository
from tests.support import wait_until


def _scrape(d: Daemon, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{d.ready['metrics_port']}/metrics", timeout=10).read().decode()
    return next((float(line.split()[1]) for line in text.splitlines() if line.startswith(name + " ")), 0.0)


@contextlib.contextmanager
def _small_disk(path: Path) -> Iterator[bool]:
    """A 16 MiB tmpfs at path; yields False (and a plain folder) where mounting is refused."""
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(path)], capture_output=True).returncode == 0
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(path: Path) -> Path:
    filler = path / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC
    for size in (1 << 16, 4096, 1):  # whatever is left
        with contextlib.suppress(OSError), open(path / f"filler-{size}", "wb") as f:
            while True:
                f.write(b"\0" * size)
                f.flush()
    return filler


def _exports(data_dir: Path, work: Path) -> int:
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:8000]
    (work / "train.libfm").write_text("\n".join(lines) + "\n")
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(work / "train.libfm"), "--ps", "local"]
    cmd += ["--no-follow", "--metrics-port", "-1", "--export-dir", str(work / "exports"), "--export-interval-s", "0"]
    cmd += ["--batch-size", "2000"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return sum(1 for p in (work / "exports").iterdir() if (p / "READY").exists())


def _manager(work: Path, repo: Path, limit: int | None = None) -> Daemon:
    args = ["model", "watch", "--exports", str(work / "exports"), "--repo", str(repo), "--poll-s", "0.2"]
    args += ["--min-samples", "100", "--max-auc-drop", "1"]
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if limit is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))  # inherited by the manager only
    try:
        return start("modelmgr", args, work)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


def test_a_full_repository_disk_delays_versions_and_loses_none(data_dir, tmp_path):
    exports = _exports(data_dir, tmp_path)
    assert exports >= 3
    with _small_disk(tmp_path / "disk") as mounted:
        repo_dir = tmp_path / "disk" / "repo"
        repo = Repository(repo_dir, "ctr")
        filler = _fill(tmp_path / "disk") if mounted else None
        manager = _manager(tmp_path, repo_dir, limit=None if mounted else 4096)
        try:
            manager.wait_ready()
            wait_until("a storage failure counted", lambda: _scrape(manager, "boundless_modelmgr_storage_failures_total") >= 2)
            manager.check()  # alive
            assert repo.versions() == [] and repo.rejected() == []  # nothing half-written, nothing rejected for it
            if filler is not None:
                for p in (tmp_path / "disk").glob("filler*"):
                    p.unlink()  # space returns
            else:
                manager.stop()
                manager = _manager(tmp_path, repo_dir)  # the limit lifted
                manager.wait_ready()
            wait_until("every export published", lambda: len(repo.processed_exports()) >= exports, timeout=120)
            assert repo.rejected() == [], repo.rejected()
            versions = repo.versions()
            assert all(repo.broken(v) is None for v in versions), [repo.broken(v) for v in versions]
            ready = {p.name for p in (tmp_path / "exports").iterdir() if (p / "READY").exists()}
            assert {repo.manifest_model(v).export_id for v in versions} == ready
            manager.check()
        finally:
            manager.stop()
