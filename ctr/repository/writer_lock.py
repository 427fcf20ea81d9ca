"""The one model manager that writes a model's versions.

A manager numbers versions from the repository's counter, stages each in `.tmp-EXPORT`,
and removes the unfinished folders it finds when it starts. Two managers on one model
(a second `boundless model watch` started by mistake, or a copy of a unit on another host
of a shared volume) removed each other's staged folders: one published every export and the
other recorded each of them as rejected ("internal: FileNotFoundError"), false evidence in
the repository. Each could also take the same version number.

So a manager holds an exclusive `flock` on `<model>/.writer.lock` for as long as it runs
(the kernel releases it when the process dies, even by SIGKILL), and writes who it is into
that file: its pid, its host and, once bound, its admin address. A second manager, or a
`boundless model gc` run on the repository directly, is refused with that holder named.
The lock lives in the model's local folder: the repository itself for a local (or mounted)
one, serving's local cache for an S3 one, so for S3 it guards one host only; there the
writer also holds a lease on S3 itself (ctr.repository.s3_lease), which guards every host.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ctr.repository.storage import S3Storage
from ctr.repository.versions import Repository, RepositoryError

if TYPE_CHECKING:
    from ctr.repository.s3_lease import S3Lease

WRITER_LOCK = ".writer.lock"

log = logging.getLogger("modelmgr")


class WriterBusy(RepositoryError):
    """Another process writes this model's versions."""


class WriterLock:
    def __init__(self, folder: Path, what: str, lease: S3Lease | None = None) -> None:
        """lease: an S3 repository's lease on the model, taken after the flock."""
        self.path = folder / WRITER_LOCK
        self.what = what  # "model 'ctr' in repo", for messages
        self.lease = lease
        self._file: BinaryIO | None = None
        self._since = 0.0

    def take(self, role: str) -> None:
        """Holds the lock (WriterBusy, naming the holder, if another process does)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "a+b", buffering=0)  # noqa: SIM115 - held open for as long as the lock is; unbuffered
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().decode("utf-8", errors="replace")
            f.close()
            raise WriterBusy(f"{self.what} is written by another process: {describe(holder)}") from None
        self._file = f
        self._since = time.time()
        self.announce(role)
        if self.lease is not None:
            try:
                self.lease.take(self._holder(role))  # WriterBusy where another host's manager holds it
            except BaseException:
                self.release()
                raise

    def _holder(self, role: str, admin: str = "") -> dict[str, Any]:
        holder: dict[str, Any] = {"role": role, "pid": os.getpid(), "host": socket.gethostname(), "since": self._since}
        if admin:
            holder["admin"] = admin
        return holder

    def lost(self) -> str | None:
        """None while this process is the model's writer; else why not (its S3 lease was
        taken over, or could not be renewed in time): it must stop writing."""
        return self.lease.held() if self.lease is not None else None

    def lapsed(self) -> bool:
        """The lock was lost because its S3 lease could not be renewed (S3 away), not because
        another manager took it: `retake` may get it back."""
        return self.lease is not None and self.lease.lapsed

    def retake(self) -> None:
        """Takes a lapsed S3 lease again (WriterBusy where another manager holds it now,
        OSError while S3 cannot be reached)."""
        assert self.lease is not None
        self.lease.retake()

    def announce(self, role: str, admin: str = "") -> None:
        """Says who holds the lock (and, once bound, where its admin service answers)."""
        if self._file is None:
            return
        holder = self._holder(role, admin)
        if self.lease is not None and admin:
            self.lease.update(holder)
        try:  # straight to the file (no buffer left to fail again at close)
            os.ftruncate(self._file.fileno(), 0)
            os.pwrite(self._file.fileno(), json.dumps(holder).encode(), 0)
        except OSError as e:  # a full disk: the lock is held all the same; only its description is missing
            log.warning("%s: cannot write who holds it (%s); the lock is held", self.path, e.strerror or e)

    def release(self) -> None:
        if self.lease is not None and self._file is not None:
            self.lease.release()
        if self._file is not None:
            self._file.close()  # closing the description drops the flock
            self._file = None

    @contextmanager
    def held(self, role: str) -> Iterator[None]:
        self.take(role)
        try:
            yield
        finally:
            self.release()


def writer_lock(repo: Repository, what: str, lease_term_s: float) -> WriterLock:
    """The lock of the model's writer: its flock and, for an S3 repository, its lease there."""
    lease = None
    if isinstance(repo.storage, S3Storage):
        from ctr.repository.s3_lease import LEASE, S3Lease

        storage = repo.storage
        lease = S3Lease(storage.s3, storage.bucket, storage.object_key(f"{repo.model}/{LEASE}"), what, lease_term_s)
    return WriterLock(repo.dir, what, lease)


def describe(holder_json: str) -> str:
    """The holder, as a sentence an operator can act on."""
    try:
        h = json.loads(holder_json)
    except ValueError:
        h = None
    if not isinstance(h, dict):
        return "it is starting (it has not said who it is yet)"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(h.get("since", 0))))
    text = f"{h.get('role', 'a process')} pid {h.get('pid')} on {h.get('host')}, since {since}"
    if h.get("admin"):
        text += f"; send commands to it with --manager {h['admin']}"
    return text
