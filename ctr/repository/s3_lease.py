"""The one writer of a model in an S3 repository, across hosts: a lease object.

A flock (ctr.repository.writer_lock) keeps two managers on one host apart; on S3 their local
folders differ from host to host, so nothing kept a second cluster, or a staging copy
pointed at production's bucket, from publishing into the same model. The lease is the
object `<model>/.writer.lease`, which says who holds it:

- taken with a conditional PUT (`If-None-Match: *`), then read back after a moment: a
  server that lets two concurrent conditional PUTs through (seaweedfs#8800) keeps the
  last one's body, so the other sees a stranger's and backs off;
- renewed every third of its term by a PUT conditional on its last ETag (`If-Match`): one
  that fails because the object changed means another manager took it, and this one stops;
- taken over from a holder that stopped renewing it: a contender watches the object, and
  only an ETag unchanged for a whole term, by the contender's own clock (hosts' clocks
  differ), counts as abandoned; one that changes meanwhile names a live holder, refused;
- given up by its holder once two thirds of a term passed without a renewal that landed,
  before any contender can take it over, so two never write at once; a lease given up so
  (S3 away) is taken again as a new one once S3 answers (`retake`), unless another manager
  took it meanwhile;
- deleted by a holder that stops cleanly, so its successor takes it at once.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from typing import Any

from ctr.repository.writer_lock import WriterBusy
from ctr.repository.writer_lock import describe as said
from ctr.runtime.extras import require

LEASE = ".writer.lease"
TERM_S = 30.0  # a holder renews every third of it; a contender takes over after a whole one unchanged
READ_BACK_S = 0.5  # a new holder reads the lease back after this, for servers that let two conditional PUTs through

log = logging.getLogger("modelmgr")


class S3Lease:
    def __init__(self, s3: Any, bucket: str, key: str, what: str, term_s: float = TERM_S) -> None:
        self.s3, self.bucket, self.key = s3, bucket, key
        self.what = what
        self.term_s = term_s
        self._etag = ""
        self._holder: dict[str, Any] = {}
        self._renewals = 0  # in the body: an ETag is its body's MD5, so an unchanged body would look unrenewed
        self._renewed = 0.0  # monotonic time of the last write that landed
        self._lost: str | None = None
        self._lapsed = False  # lost for want of a renewal (S3 away), not to another manager
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def take(self, holder: dict[str, Any]) -> None:
        """Holds the lease, or raises WriterBusy naming the holder that renews it. An existing
        lease is watched for up to a term: unchanged that long, it was abandoned (its holder
        died) and is taken over. OSError naming the lease where S3 cannot be reached."""
        try:
            self._take(holder)
        except require("botocore.exceptions").BotoCoreError as e:  # no endpoint, no credentials
            raise OSError(f"{self.url}: the writer's lease cannot be taken: {e}") from None

    def _take(self, holder: dict[str, Any]) -> None:
        self._holder = dict(holder)
        body = self._body()
        if not self._put_if(body, none_match=True):
            self._take_over(body)
        time.sleep(READ_BACK_S)
        etag, found = self._read()
        if found != body:
            who = describe(found)
            raise WriterBusy(f"{self.what} is written by another manager, which took its lease at the same moment: {who}")
        self._etag, self._renewed = etag, time.monotonic()
        self._thread = threading.Thread(target=self._renew_loop, name="writer-lease", daemon=True)
        self._thread.start()

    def _take_over(self, body: bytes) -> None:
        etag, found = self._read()
        if not etag:  # gone since (its holder stopped): take it as new
            if self._put_if(body, none_match=True):
                return
            etag, found = self._read()
        h = _decode(found)
        # a pid of this host that is gone, or this process's own (a container restarted: its
        # main process has the same pid each time), held it before: taken over at once
        if h.get("host") == socket.gethostname() and h.get("pid") == os.getpid():
            log.info("%s: this process held it before; taking it again", self.url)
        elif h.get("host") == socket.gethostname() and not _alive(h.get("pid")):
            log.info("%s: its holder, pid %s on this host, is gone; taking it over", self.url, h.get("pid"))
        else:
            log.warning(  # a warning: a command (gc) shows it while it waits
                "%s is held (%s): watching it for up to %.0f s to tell whether its holder renews it",
                self.url,
                describe(found),
                self.term_s,
            )
            deadline = time.monotonic() + self.term_s
            while time.monotonic() < deadline:
                time.sleep(min(1.0, self.term_s / 10))
                now, found_now = self._read()
                if now != etag:
                    raise WriterBusy(f"{self.what} is written by another manager, which renews its lease: {describe(found_now)}")
            who = describe(found)
            log.warning("%s: not renewed for %.0f s, its holder stopped (%s); taking it over", self.url, self.term_s, who)
        if not self._put_if(body, match=etag):
            _, found = self._read()
            raise WriterBusy(f"{self.what}: another manager took the lease first: {describe(found)}")

    def update(self, holder: dict[str, Any]) -> None:
        """Says who holds it anew (its admin address, once bound), as a renewal."""
        with self._lock:
            self._holder = dict(holder)
        self.renew()

    def renew(self) -> None:
        with self._lock:
            if self._lost is not None or not self._etag:
                return
            self._renewals += 1
            try:
                ok = self._put_if(self._body(), match=self._etag)
            except Exception as e:  # noqa: BLE001 - S3 unreachable: tried again; held() gives it up in time
                log.warning("%s: not renewed (%s); tried again in %.0f s", self.url, e, self.term_s / 3)
                return
            if ok:
                self._renewed = time.monotonic()
                return
            _, found = self._read()
            self._lost = f"another manager took the lease {self.url}: {describe(found)}"
        log.error("%s", self._lost)

    def held(self) -> str | None:
        """None while this process holds the lease, else why not: another took it, or no
        renewal landed for two thirds of a term (a contender may take it after a whole one)."""
        if self._lost is None and time.monotonic() - self._renewed > self.term_s * 2 / 3:
            self._lost = f"the lease {self.url} was not renewed for {self.term_s * 2 / 3:.0f} s (S3 unreachable?)"
            self._lapsed = True
        return self._lost

    @property
    def lapsed(self) -> bool:
        """Lost because no renewal landed in time (S3 away), not taken by another manager."""
        return self._lapsed

    def retake(self) -> None:
        """Takes a lapsed lease again, as `take` does: at once where it is still this process's
        (its own pid in it), WriterBusy where another manager holds it now, OSError while S3
        cannot be reached."""
        assert self._lapsed, "only a lease given up for want of a renewal is taken again"
        if self._thread is not None:
            self._thread.join(timeout=5)  # the renewals stopped with the loss
        self._lost, self._lapsed, self._etag, self._thread = None, False, "", None
        try:
            self.take(self._holder)
        except BaseException:
            self._lost, self._lapsed = f"the lease {self.url} is not held again yet", True
            raise

    def release(self) -> None:
        """Stops renewing, and deletes the lease if it is still this process's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            if self._lost is None and self._etag:
                try:
                    etag, _ = self._read()
                    if etag == self._etag:
                        self.s3.delete_object(Bucket=self.bucket, Key=self.key)
                except Exception as e:  # noqa: BLE001 - S3 unreachable at exit: the lease lapses after its term
                    log.warning("%s: not released (%s); it lapses in %.0f s", self.url, e, self.term_s)
            self._etag = ""

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.term_s / 3):
            self.renew()
            if self._lost is not None:
                return

    def _body(self) -> bytes:
        return json.dumps({**self._holder, "term_s": self.term_s, "renewals": self._renewals}).encode()

    def _put_if(self, body: bytes, none_match: bool = False, match: str = "") -> bool:
        """A conditional PUT; False where its condition failed. Sets the ETag it wrote."""
        cond = {"IfNoneMatch": "*"} if none_match else {"IfMatch": match}
        try:
            r = self.s3.put_object(Bucket=self.bucket, Key=self.key, Body=body, **cond)
        except self.s3.exceptions.ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                return False
            raise
        self._etag = str(r["ETag"])
        return True

    def _read(self) -> tuple[str, bytes]:
        """(ETag, body) of the lease; ("", b"") where there is none."""
        try:
            r = self.s3.get_object(Bucket=self.bucket, Key=self.key)
        except self.s3.exceptions.NoSuchKey:
            return "", b""
        return str(r["ETag"]), bytes(r["Body"].read())


def _decode(body: bytes) -> dict[str, Any]:
    try:
        h = json.loads(body)
    except ValueError:
        return {}
    return h if isinstance(h, dict) else {}


def _alive(pid: Any) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, TypeError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def describe(body: bytes) -> str:
    """The holder, as a sentence an operator can act on (writer_lock.describe's words)."""
    return said(body.decode("utf-8", errors="replace"))
