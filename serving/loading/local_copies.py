"""Serving's private copies of the repository's files, which it memory-maps.

A file in the repository can be damaged while a version built on it is served (truncated
by a full disk or an operator): a mapped file that shrinks kills the process with SIGBUS.
Serving therefore maps only its own copies, each checked against the manifest's sha256 as
it is copied; a copy made for one version is reused by the next (a delta costs its own
files), and copies no loaded version uses are removed. A copy's folder is named after the
repository, the model, the version and the digest of the manifest's file list, so a
repository rebuilt with other contents under the same version numbers never meets its old
copies; and a file found on disk that this process did not copy or check (a --copies-dir
kept from an earlier process) is checked against its sha256 before it is used.

A folder given (--copies-dir) may be shared by several serving processes (`serve
--processes N` gives its processes one, so a version's files sit once in the page cache):
each process lists the copies it uses in a file of its own (`.using-NS-PID-ID`), copies and
removes only under a lock on the folder, and removes a copy only when no live process
lists it.

Without a folder given, the copies go to a temporary one named after the process (its pid
and its pid namespace). A server killed with SIGKILL (or by the OOM killer) cannot remove
its folder, which holds a whole model; the next server to start in the same pid namespace
removes every such folder whose process is gone. A folder from another namespace (a /tmp
shared between containers) is never touched: its pid means nothing here.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ctr.format import modelfile
from ctr.repository.versions import version_name
from ctr.runtime import daemon

PREFIX = "boundless-serving-"
_OWNED_NAME = re.compile(re.escape(PREFIX) + r"(\d+)-(\d+)-")
LOCK = ".lock"
USING = ".using-"  # + pid namespace - pid - instance: the copy folders one LocalCopies uses
_USING_NAME = re.compile(re.escape(USING) + r"(\d+)-(\d+)-[0-9a-f]+$")


def pid_namespace() -> int:
    """The inode of this process's pid namespace (0 where /proc does not say)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def owned_prefix() -> str:
    """The start of this process's temporary folder name: prefix, pid namespace, pid."""
    return f"{PREFIX}{pid_namespace()}-{os.getpid()}-"


def remove_orphans(parent: Path) -> list[Path]:
    """Removes the temporary copy folders in `parent` made in this pid namespace whose
    server process has exited; returns them. A reused pid keeps its folder until that
    process exits too."""
    removed = []
    here = pid_namespace()
    for p in parent.glob(PREFIX + "*"):
        m = _OWNED_NAME.match(p.name)
        if m and int(m.group(1)) == here and p.is_dir() and not daemon.process_alive(int(m.group(2))):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


def copy_key(source: Path, version: int, manifest: dict[str, Any]) -> str:
    """The folder name of a version's copies: its number, then a digest of where it comes
    from (the repository folder, the model) and of every file it lists (name and sha256)."""
    files = sorted((str(f["name"]), str(f["sha256"])) for f in manifest["files"])
    origin = f"{source.parent.parent.resolve()}|{manifest.get('model', '')}|{version}|{files}"
    return f"{version_name(version)}-{hashlib.sha256(origin.encode()).hexdigest()[:16]}"


class LocalCopies:
    def __init__(self, root: Path | None = None) -> None:
        self._owned = root is None
        if root is None:
            remove_orphans(Path(tempfile.gettempdir()))
            root = Path(tempfile.mkdtemp(prefix=owned_prefix()))
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self._checked: set[tuple[Path, str]] = set()  # (copy, sha256) this process copied or checked
        self._dirs: dict[int, Path] = {}  # version -> its copies' folder
        self._using = self.root / f"{USING}{pid_namespace()}-{os.getpid()}-{os.urandom(4).hex()}"

    def version_dir(self, source: Path, version: int, manifest: dict[str, Any]) -> Path:
        """The version's files copied from `source` (ValueError when one does not match)."""
        d = self.root / copy_key(source, version, manifest)
        with self._locked():
            self._dirs[version] = d
            self._write_using()  # listed before it exists: no other process removes it meanwhile
            d.mkdir(parents=True, exist_ok=True)
            for f in manifest["files"]:
                dst, size, sha = d / f["name"], int(f["size"]), str(f["sha256"])
                if (dst, sha) in self._checked:
                    continue
                if dst.is_file() and dst.stat().st_size == size and modelfile.sha256_file(dst) == sha:
                    self._checked.add((dst, sha))  # a copy another process made: checked before it is used
                    continue
                modelfile.copy_checked(source / f["name"], dst, size, sha)
                self._checked.add((dst, sha))
        return d

    def keep_only(self, versions: set[int]) -> None:
        """Removes the copies of every version but these (and of other origins), unless
        another live process sharing the folder uses them."""
        keep = {self._dirs[v] for v in versions if v in self._dirs}
        self._dirs = {v: d for v, d in self._dirs.items() if d in keep}
        self._checked = {(f, sha) for f, sha in self._checked if f.parent in keep}
        with self._locked():
            self._write_using()
            used = {d.name for d in keep} | self._used_by_others()
            for p in self.root.iterdir():
                if p.is_dir() and p.name not in used and (p.name.isdigit() or p.name.split("-")[0].isdigit()):
                    shutil.rmtree(p, ignore_errors=True)

    def close(self) -> None:
        if self._owned:
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            self._using.unlink(missing_ok=True)  # its copies go with the next keep_only of a process still serving

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The folder's lock: copies appear and go under it (a temporary folder is this
        process's alone, and takes it at no cost)."""
        with open(self.root / LOCK, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _write_using(self) -> None:
        tmp = self._using.with_suffix(".tmp")
        tmp.write_text(json.dumps(sorted(d.name for d in self._dirs.values())))
        os.replace(tmp, self._using)

    def _used_by_others(self) -> set[str]:
        """The copy folders other processes list; the lists of exited processes of this
        pid namespace are removed (another namespace's pids mean nothing here: kept)."""
        used: set[str] = set()
        here = pid_namespace()
        for p in self.root.glob(USING + "*"):
            m = _USING_NAME.match(p.name)
            if m is None or p == self._using:
                continue
            if int(m.group(1)) == here and not daemon.process_alive(int(m.group(2))):
                p.unlink(missing_ok=True)
                continue
            try:
                used.update(json.loads(p.read_text()))
            except (OSError, ValueError):
                continue  # being replaced, or gone: its process writes it again at its next load
        return used
