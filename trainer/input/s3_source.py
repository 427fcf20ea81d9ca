"""An `s3://bucket/prefix/` source: the objects under a prefix read as a folder's files are
(trainer.input.source), in key order, each to its end. Text objects stream through ranged
GETs from the offset a checkpoint recorded; `.parquet` objects are read a row group at a
time through pyarrow's S3 file system and rendered as text (ctr.data.parquet_text).

The prefix's contract mirrors the folder's (docs/design/folder-source.md): the objects whose
base names match `--source-pattern` and none of `--source-ignore`, in key order; a rank of a
group reads its share of them (trainer.input.file_split: by key hash where followed, else
objects i, i+W, ... of that order). An object is known by its key and ETag: S3 objects
do not grow, so an object is finished once read to its end, and a key that comes back with
another ETag (overwritten) is read as the new object it is. With --follow the prefix is
listed again every poll for new keys. A checkpoint's position is the object's URI and the
offset in it; keys before that URI count as read on a restart, as a folder's names do. A
cut taken by another number of ranks is taken up through its positions' prior, as a
folder's is (trainer.input.rescaled).

Endpoint and credentials come from boto3's and Arrow's common environment
(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, or a
profile); boto3 is the `[s3]` extra, pyarrow the `[parquet]` one."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from ctr.data.compressed import DecompressedText, compression_of
from ctr.data.parquet_text import ParquetText, is_parquet
from ctr.runtime.extras import require
from ctr.runtime.repeated_error import RepeatedError
from trainer import metrics
from trainer.input import rescaled
from trainer.input.file_split import owner_of, share
from trainer.input.source import BLOCK_BYTES, LATE_SLACK_S, Block, Position, StreamSource, StreamStopped

log = logging.getLogger("trainer")
T = TypeVar("T")
REMOVED = (
    "from the prefix before it was read: its samples are not trained (a lifecycle rule or a clean-up that removes"
    " objects the trainer has not read yet)"
)
MIN_LIST_S = 1.0  # a followed prefix is listed at most this often: a LIST is a billed request
RETRY_MAX_S = 15.0  # a failed LIST (or read) is tried again after 2, 4, ... s, at most this long
GIVE_UP_S = 600.0  # a prefix read once (not followed) gives up after S3 failed this long


@dataclass(frozen=True)
class S3Object:
    uri: str
    key: str
    etag: str
    size: int
    modified: float = 0.0  # LastModified, seconds since the epoch


def parse_uri(uri: str) -> tuple[str, str]:
    """(bucket, key prefix) of s3://bucket/prefix; ValueError when there is no bucket."""
    rest = uri[len("s3://") :]
    bucket, _, prefix = rest.partition("/")
    if not uri.startswith("s3://") or not bucket:
        raise ValueError(f"{uri!r} is not s3://BUCKET/PREFIX")
    return bucket, prefix


def s3_client() -> Any:
    return require("boto3").client("s3")


def check_prefix(uri: str) -> int:
    """Lists the prefix once, so a wrong bucket, endpoint or credentials fail at start with
    what S3 said; returns how many objects it holds (a first page's worth at most)."""
    bucket, prefix = parse_uri(uri)
    botocore = require("botocore.exceptions")
    try:
        page = s3_client().list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1000)
    except (botocore.ClientError, botocore.BotoCoreError) as e:
        raise ValueError(f"cannot list {uri}: {e}") from None
    return int(page.get("KeyCount", 0))


class S3PrefixSource(StreamSource):
    """The folder source's reading (`_read`: blocks of whole lines, over-long lines) over
    the objects under a prefix."""

    def __init__(
        self,
        source: str,
        follow: bool,
        poll_s: float = 0.2,
        stop: Callable[[], bool] = lambda: False,
        start: Position | None = None,
        part: tuple[int, int] = (0, 1),
        pattern: str = "*",
        ignore: tuple[str, ...] = (),
        start_at: float = 0.0,
    ) -> None:
        super().__init__(source, follow, poll_s, stop, start, part, pattern, ignore)
        self.start_at = start_at  # the cut's wall time, to tell objects that changed after it
        self.bucket, self.prefix = parse_uri(source)
        self.s3 = s3_client()
        self._done: dict[str, str] = {}  # key -> ETag of the objects read to their end
        self._objects: tuple[float, list[S3Object]] = (-MIN_LIST_S, [])  # when last listed (< 0: never), what
        self._next_list = 0.0  # time.monotonic() of the next LIST: MIN_LIST_S after one, later after failures
        self._failing = RepeatedError(log, level=logging.WARNING)  # listings failing
        self._object_places: tuple[list[S3Object] | None, dict[str, int]] = (None, {})  # _prior_owner's

    def _rebased(self, start: Position) -> Position:
        """The checkpoint's position, its prior's too (a cut taken by another number of ranks),
        when every object it names is under this prefix; from the start, said, when the source
        changed since the cut (StreamSource._rebased)."""
        bucket, prefix = parse_uri(self.source)
        named = [start.file, *(str(pos.get("file") or "") for pos in rescaled.positions(start.prior))]
        other = next((f for f in named if f and not f.startswith(f"s3://{bucket}/{prefix}")), None)
        if other is None and start.partitions is None:
            return start
        log.warning(
            "the checkpoint's stream position is in %s, which is not under --source %s: the source changed since"
            " the cut; it is read from its start",
            other or start.file,
            self.source,
        )
        return Position()

    def _prior_owner(self, name: str, ranks: int) -> int:
        """The rank of `ranks` that read the object under the prefix's dealing (file_split):
        by its key's hash when followed, else by its place in the last listing (blocks lists
        before it asks; the training thread's backlog must not wait on a LIST)."""
        if self.follow:
            return owner_of(name[len(f"s3://{self.bucket}/") :], ranks)
        objects = self._objects[1]
        if self._object_places[0] is not objects:  # the listing's places, once a listing
            self._object_places = (objects, {o.uri: i for i, o in enumerate(objects)})
        place = self._object_places[1].get(name)
        return place % ranks if place is not None else 0

    def _all_objects(self) -> list[S3Object]:
        """The prefix's objects the contract reads, in key order (a listing reused for
        MIN_LIST_S: a followed prefix is not listed every few ms). A LIST that fails (S3 or
        the network down, past botocore's own retries) leaves the last listing standing, and
        is tried again later (_list_failed): an outage pauses the stream, as a broker's
        pauses a topic's, instead of ending the run."""
        now = time.monotonic()
        if now < self._next_list:
            return self._objects[1]
        try:
            found = self._listing()
        except Exception as e:  # noqa: BLE001 - botocore and urllib3 raise several kinds
            self._list_failed(e, now)
            return self._objects[1]
        self._failing.passed(f"{self.source}: listed again")
        self._objects, self._next_list = (now, found), now + MIN_LIST_S
        return found

    def _list_failed(self, e: Exception, now: float) -> None:
        """A failed LIST: counted, said (again once a minute while it lasts), tried again
        after a wait that doubles up to RETRY_MAX_S. A prefix read once gives up after
        GIVE_UP_S, naming the error (a followed one waits for S3 as it waits for data)."""
        metrics.SOURCE_S3_FAILURES.inc()
        lasted = self._failing.failed(f"{self.source}: cannot be listed ({e}); the stream waits and tries again")
        if not self.follow and lasted >= GIVE_UP_S:
            raise ValueError(f"{self.source}: cannot be listed for {lasted:.0f} s ({self._failing.count} tries): {e}") from e
        self._next_list = now + min(RETRY_MAX_S, MIN_LIST_S * 2 ** min(self._failing.count, 5))
        # not idle until the next try: whether objects landed cannot be told (--idle-exit-s waits for S3)
        self.idle_since = max(self.idle_since, self._next_list)

    def _listing(self) -> list[S3Object]:
        """One LIST of the prefix (every page): the objects the contract reads, in key order."""
        found = []
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix):
            for o in page.get("Contents", []):
                key = o["Key"]
                folders = key[len(self.prefix) :].split("/")[:-1]  # under the prefix: `_temporary/0/` is skipped
                if not key.endswith("/") and self._takes(key.rsplit("/", 1)[-1]) and not any(map(self._ignored, folders)):
                    modified = o["LastModified"].timestamp() if "LastModified" in o else 0.0
                    found.append(S3Object(f"s3://{self.bucket}/{key}", key, str(o.get("ETag", "")), int(o["Size"]), modified))
        found.sort(key=lambda o: o.key)
        return found

    def _mine(self, as_listed: bool = False) -> list[S3Object]:
        """This rank's objects; as_listed: of the last listing (no call to S3: the training
        thread's backlog does not wait on a LIST the reading thread makes anyway)."""
        objects = self._objects[1] if as_listed else self._all_objects()
        return share(objects, [o.key for o in objects], self.part, self.follow)

    def peek(self, max_lines: int = 2000, max_bytes: int = 4 << 20, timeout_s: float = 0.0) -> list[str]:
        """The first object's first lines, waiting up to timeout_s for one to land: the
        prefix's first, whichever rank's share it is (as a folder's, StreamSource.peek).
        While S3 fails (the prefix never listed yet, the object not read) it waits for S3 as
        the stream does (_list_failed, _waited): an outage at start-up is not an empty prefix."""
        deadline = time.monotonic() + (timeout_s if self.follow else 0.0)
        while True:
            objects = [o for o in self._all_objects() if o.size > 0]
            if objects:
                first = objects[0]
                try:
                    head = self._patiently(first.uri, lambda: self._head_of(first, max_bytes))  # noqa: B023
                except StreamStopped:  # stopped while S3 was away: nothing peeked, as a stop while waiting for data
                    return []
                except Exception as e:
                    if not _gone_code(e):
                        raise
                    self._next_list = 0.0  # removed since the listing: the next object is the first
                    continue
                text = head.decode("utf-8", errors="replace").splitlines()
                return text[: max_lines if len(head) < max_bytes else max(0, min(max_lines, len(text) - 1))]
            listed = self._objects[0] >= 0
            if listed and time.monotonic() >= deadline or self.stop():
                return []
            time.sleep(max(self.poll_s, MIN_LIST_S) if listed else self._retry_wait())

    def _head_of(self, o: S3Object, max_bytes: int) -> bytes:
        if is_parquet(o.key):
            with ParquetText(o.uri, self._waited) as rendered:
                return bytes(rendered.read(max_bytes))
        return self._text_head(o.key, max_bytes)

    def _patiently(self, what: str, call: Callable[[], T]) -> T:
        """call(), made again after the waits _waited makes while S3 (or the network to it)
        fails, said once a minute; an error that says the object is gone, or S3's failure
        past what _waited allows, is raised, the latter as a ValueError naming it
        (StreamStopped once the stream stops)."""
        since, outage = time.monotonic(), RepeatedError(log, level=logging.WARNING)
        for attempt in itertools.count():
            try:
                return call()
            except StreamStopped:
                raise
            except Exception as e:  # noqa: BLE001 - botocore, urllib3 and pyarrow raise several kinds
                if _gone_code(e) or isinstance(e, ValueError):  # gone, or a damaged file (ArrowInvalid)
                    raise
                lasted = outage.failed(f"{what}: cannot be read ({e}); read again once S3 answers")
                if not self._waited(since, attempt):
                    raise ValueError(f"{what}: cannot be read for {lasted:.0f} s ({attempt + 1} tries): {e}") from e
        raise AssertionError("unreachable")

    def _range(self, key: str, start: int, length: int) -> bytes:
        got = self.s3.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{start + length - 1}")
        return bytes(got["Body"].read())

    def first_line(self, uri: str) -> str:
        """The first line of a text object (its csv header), for a reader resumed inside it;
        read again while S3 fails (_patiently)."""
        head = self._patiently(uri, lambda: self._text_head(uri[len(f"s3://{self.bucket}/") :], 1 << 20))
        return head.split(b"\n", 1)[0].decode("utf-8", errors="replace")

    def first_lines(self) -> Iterator[str]:
        """The first line of each text object, every rank's, in key order (a header to read a
        headerless object with: trainer.input.reader)."""
        for o in self._all_objects():
            if o.size > 0 and not is_parquet(o.key):
                yield self.first_line(o.uri)

    def backlog(self, position: Position) -> tuple[str, int] | None:
        """Bytes of this worker's objects past `position`, as last listed (None: not listed
        yet); a compressed or Parquet object's position is in its text (on_disk)."""
        if self._objects[0] < 0:
            return None
        total = 0
        for o in self._mine(as_listed=True):
            if position.file and o.uri < position.file or self._done.get(o.key) == o.etag:
                continue
            if o.uri != position.file and self._prior_state(o.uri).done:  # read by a rank of another number
                continue
            total += max(0, o.size - (self.on_disk(position) if o.uri == position.file else 0))
        return "bytes", total

    def blocks(self, max_line_bytes: int, block_bytes: int = BLOCK_BYTES) -> Iterator[Block | None]:
        """Blocks in key order; yields None while waiting for new objects (or for S3)."""
        start = self.start
        while self._objects[0] < 0 and not self.stop():  # what stands and what is late is told by a listing
            self._all_objects()
            if self._objects[0] < 0:
                yield None
                time.sleep(self._retry_wait())
        if start.file and all(o.uri != start.file for o in self._mine()):
            self._lost(start.file, f"where the checkpoint stands (line {start.line}, byte {start.offset}), is gone {REMOVED}")
        if self.start_at > 0 and (start.file or self.prior):  # objects read before the cut: one written since is not
            late: dict[str, list[str]] = {}  # the position's object that counts them as read -> the late ones
            for o in self._mine():
                by = self._counted_read_by(o.uri, start)
                if by and o.modified > self.start_at + LATE_SLACK_S:
                    late.setdefault(by, []).append(o.uri)
            for by, uris in late.items():
                self._say_taken_as_read(uris, by)
        if self.prior is not None and self.part[0] == 0:  # the objects the prior's ranks stood in, said once for the group
            listed = {o.uri for o in self._all_objects()}
            for uri, (offset, line) in rescaled.stands(self.prior).items():
                if uri not in listed:
                    self._lost(uri, f"where the checkpoint stands (line {line}, byte {offset}), is gone {REMOVED}")
        while not self.stop():
            pending = [o for o in self._mine() if self._done.get(o.key) != o.etag]
            if start.file:  # objects before the start's: read before the cut, on every pass
                for o in pending:
                    if o.uri < start.file:
                        self._done[o.key] = o.etag
                pending = [o for o in pending if o.uri >= start.file]
            if self.prior is not None:  # read whole by the ranks of a cut taken by another number
                for o in pending:
                    if o.uri != start.file and self._prior_state(o.uri).done:
                        self._done[o.key] = o.etag
                pending = [o for o in pending if self._done.get(o.key) != o.etag]
            if not pending:
                if not self.follow:
                    return
                yield None
                time.sleep(self._nap())
                continue
            for o in pending:
                offset = start.offset if o.uri == start.file else 0
                line_no = start.line if o.uri == start.file else 0
                if o.uri != start.file and self.prior is not None:  # read in part by a rank of another number
                    state = self._prior_state(o.uri)
                    offset, line_no = state.offset, state.line
                try:
                    finished = yield from self._object(o, offset, line_no, max_line_bytes, block_bytes)
                except StreamStopped:  # stopped while waiting for S3 mid-object: the blocks read so far stand
                    return
                if finished:
                    self._done[o.key] = o.etag
                    yield Block(o.uri, 0, 0, b"", eof=True)
                    start = Position()
                if self.stop():
                    return
                if not finished:  # it could not be opened: the next listing retries it, from the same offset
                    yield None
                    time.sleep(self._retry_wait())
                    break

    def _waited(self, since: float, attempt: int) -> bool:
        """A read that has failed since `since` (time.monotonic()) `attempt` times before,
        counted: False where it gives up (after GIVE_UP_S, where the prefix is read once),
        else True after a wait that doubles from 0.5 s up to RETRY_MAX_S; StreamStopped once
        the stream stops meanwhile. The wait is not idleness: --idle-exit-s waits for S3."""
        metrics.SOURCE_S3_FAILURES.inc()
        wait_s = min(RETRY_MAX_S, 0.5 * 2 ** min(attempt, 5))
        now = time.monotonic()
        if not self.follow and now - since >= GIVE_UP_S:
            return False
        self.idle_since = max(self.idle_since, now + wait_s)
        while not self.stop():
            left = now + wait_s - time.monotonic()
            if left <= 0:
                return True
            time.sleep(min(left, 0.2))
        raise StreamStopped

    def _retry_wait(self) -> float:
        """How long an object that could not be read (or a first listing that failed) waits
        before it is tried again: until the next listing, which says whether it is there."""
        return max(self.poll_s, MIN_LIST_S, self._next_list - time.monotonic())

    def _nap(self) -> float:
        """The wait for new objects; while listings fail, until the next try."""
        nap = super()._nap()
        return max(nap, self._next_list - time.monotonic()) if self._failing.failing else nap

    def _lost(self, uri: str, what: str) -> None:
        """An object of the stream whose samples are not trained (`what` says why): said and counted."""
        self.lost.append(uri)
        metrics.SOURCE_FILES_LOST.inc()
        log.error("%s, %s", uri, what)

    def _gone(self, o: S3Object, e: Exception) -> bool:
        """Whether `e`, raised reading `o`, says the object no longer exists (then it is lost,
        said); any other error is S3's or the network's, and the object is read again later."""
        if _gone_code(e):
            self._lost(o.uri, f"removed {REMOVED}")
            return True
        metrics.SOURCE_S3_FAILURES.inc()
        self.idle_since = max(self.idle_since, time.monotonic() + self._retry_wait())  # waiting for S3 is not idleness
        log.warning("%s: cannot be read (%s); taken up at the next listing", o.uri, e)
        return False

    def _object(
        self, o: S3Object, offset: int, line_no: int, max_line: int, block_bytes: int
    ) -> Generator[Block | None, None, bool]:
        """One object's blocks from `offset`; True once read to its end (or lost)."""
        if is_parquet(o.key):
            try:
                text = ParquetText(o.uri, self._waited)
            except OSError as e:  # removed (FileNotFoundError), or S3 not reached: not a damaged file
                return self._gone(o, e)
            except Exception as e:  # noqa: BLE001 - a damaged object must not stop the stream
                log.error("%s: not a readable Parquet file (%s); skipped", o.uri, e)
                return True
            with text:
                text.seek(offset)
                return (yield from self._read(text, o.uri, offset, line_no, lambda: True, max_line, block_bytes))  # type: ignore[arg-type]
        try:
            kind = compression_of(self._range(o.key, 0, 6)) if o.size else None
        except Exception as e:  # noqa: BLE001 - removed since the listing, or S3 not reached
            return self._gone(o, e)
        if kind is not None:  # its text from the start, decompressed up to the offset (ctr.data.compressed)
            return (yield from self._compressed(o, kind, offset, line_no, max_line, block_bytes))
        if offset >= o.size and o.size:
            return True
        try:
            got = self.s3.get_object(Bucket=self.bucket, Key=o.key, Range=f"bytes={offset}-") if o.size else None
        except Exception as e:  # noqa: BLE001 - removed since the listing, or S3 not reached
            return self._gone(o, e)
        if got is None:
            return True
        body = _RangedBody(self.s3, self.bucket, o.key, offset, got["Body"], self._waited)
        try:
            return (yield from self._read(body, o.uri, offset, line_no, lambda: True, max_line, block_bytes))  # type: ignore[arg-type]
        finally:
            body.close()

    def _compressed(
        self, o: S3Object, kind: str, offset: int, line_no: int, max_line: int, block_bytes: int
    ) -> Generator[Block | None, None, bool]:
        """A compressed object's blocks of text from `offset`, its bytes read from the start."""
        try:
            got = self.s3.get_object(Bucket=self.bucket, Key=o.key)
        except Exception as e:  # noqa: BLE001 - removed since the listing, or S3 not reached
            return self._gone(o, e)
        with DecompressedText(o.uri, kind, _RangedBody(self.s3, self.bucket, o.key, 0, got["Body"], self._waited)) as text:
            text.seek(offset)
            return (yield from self._read(text, o.uri, offset, line_no, lambda: True, max_line, block_bytes))  # type: ignore[arg-type]

    def _text_head(self, key: str, length: int) -> bytes:
        """An object's first `length` bytes of text (decompressed where it is compressed)."""
        head = self._range(key, 0, length)
        kind = compression_of(head[:6])
        if kind is None:
            return head
        got = self.s3.get_object(Bucket=self.bucket, Key=key)
        body = _RangedBody(self.s3, self.bucket, key, 0, got["Body"], self._waited)
        with DecompressedText(f"s3://{self.bucket}/{key}", kind, body) as text:
            out = b""
            while len(out) < length:
                more = text.read1(length - len(out))
                if not more:
                    break
                out += more
            return out

    def _changed(self, fh: Any, name: str, offset: int) -> str | None:
        return None  # an object does not grow, shrink or rotate: it is read to its end


class _RangedBody:
    """An object's bytes from an offset; a connection lost mid-object (or S3 down) is taken
    up with a new ranged GET from the byte it reached, after the waits `retry(since, attempt)`
    makes, for as long as it says (S3PrefixSource._waited), instead of failing the run: the
    blocks read so far stand, and the object goes on from its byte."""

    def __init__(self, s3: Any, bucket: str, key: str, offset: int, body: Any, retry: Callable[[float, int], bool]) -> None:
        self.s3, self.bucket, self.key = s3, bucket, key
        self.offset = offset
        self.body: Any = body
        self.retry = retry

    def read(self, size: int = -1) -> bytes:
        since, outage = time.monotonic(), RepeatedError(log, level=logging.WARNING)
        for attempt in itertools.count():
            try:
                if self.body is None:  # the last GET failed
                    self.body = self.s3.get_object(Bucket=self.bucket, Key=self.key, Range=f"bytes={self.offset}-")["Body"]
                data = bytes(self.body.read(size if size >= 0 else None))
                self.offset += len(data)
                return data
            except Exception as e:  # noqa: BLE001 - urllib3/botocore raise several kinds
                if _gone_code(e):
                    raise
                where = f"s3://{self.bucket}/{self.key}"
                outage.failed(f"{where}: read failed at byte {self.offset} ({e}); reading on from there once S3 answers")
                if self.body is not None:
                    self.body.close()
                self.body = None
                if not self.retry(since, attempt):  # it waits, or raises StreamStopped
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.body is not None:  # None: the last GET failed
            self.body.close()


def _gone_code(e: Exception) -> bool:
    """Whether an S3 error says the object does not exist (any other is S3's or the network's)."""
    response = getattr(e, "response", None)  # botocore's ClientError has one; urllib3's errors may hold None
    code = str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""
    return code in ("NoSuchKey", "404", "NotFound") or isinstance(e, FileNotFoundError)
