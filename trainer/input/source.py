"""Sample sources: a file, a folder of rolling files (read as they grow), or stdin; a
Parquet file (`.parquet`) is read as the CSV text of its rows (ctr.data.parquet_text).

The source hands over blocks of whole lines with the file, byte offset and line number of
their start, so bad lines are reported as file:line and a checkpoint records exactly where
the stream stands. A line longer than the limit is skipped without being held in memory.

A folder's contract (docs/design/folder-source.md): it reads the files whose names match
`--source-pattern` (default: all) and none of `--source-ignore` (dot-files, Hadoop's and
Spark's `_` names, and the names producers write into before they rename: *.part, *.tmp,
*.temp, *.partial, *.swp, *~), in its subfolders too (a Hive or Spark layout), in the order
of their paths under it. A file is known by its inode and first bytes, not its name: a file
read and then renamed inside the folder is not read again, and a name that comes back with
another file is read as the new file it is. A file that shrinks below what was read
(truncated and rewritten in place, as copytruncate does) is reported and read from its
start; one renamed away while followed is read to its end and its successor taken up.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import sys
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np

from ctr.data.compressed import COMPRESSED_SUFFIXES, DecompressedText, compression_of_file, first_line
from ctr.data.parquet_text import ParquetText, is_parquet
from trainer import metrics
from trainer.config import DEFAULT_IGNORE
from trainer.input import rescaled
from trainer.input.file_split import owner_of, share

BLOCK_BYTES = 1 << 20
FLOWING_POLL_S = 0.01  # the wait for more data while a stream flows
HEAD_BYTES = 4096  # a file's first bytes, which with its inode tell a rename from a new file

log = logging.getLogger("trainer")
LATE_SLACK_S = 2.0  # a file's mtime past a cut's time by more than this changed after it (clocks, mtime ticks)
# a followed file read whole (compressed, Parquet) is read once its last write is this old:
# one written in place (gzip > folder/x.gz, logrotate's compress) would be read cut short
SETTLE_S = 1.0
LATE_SAID = 3  # late files named one by one; more are said in one line


def _same_path(a: Path, b: Path) -> bool:
    """The same folder however spelled (relative, absolute, through links), where both exist."""
    try:
        return a.resolve(strict=True) == b.resolve(strict=True)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _under(path: Path, folder: Path) -> Path | None:
    """path's place under folder (however either is spelled), or None when it is not under it."""
    for a, b in ((Path(os.path.abspath(path)), Path(os.path.abspath(folder))), (path.resolve(), folder.resolve())):
        try:
            return a.relative_to(b)
        except ValueError:
            continue
    return None


def _settling(mtime: float) -> bool:
    """Whether a file last written at `mtime` may still be being written: written less than
    SETTLE_S ago (an mtime ahead of this clock counts as settled, so skew cannot stall it)."""
    return 0.0 <= time.time() - mtime < SETTLE_S


def _head(fh: BinaryIO) -> bytes:
    """A digest of a file's first HEAD_BYTES (read without moving its offset)."""
    return hashlib.blake2b(os.pread(fh.fileno(), HEAD_BYTES, 0), digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class Block:
    """Whole lines of one file: data starts at byte `offset`, after `line` lines. The last
    block of a finished file may end with an unterminated line (`final`). A block with
    `overlong` set holds no data: a line longer than the limit ended at `offset` and was
    skipped; it is line number `line`. One with `cut_short` set holds no data either: the
    file's compressed stream ended (damaged) inside line `line`, which is not trained."""

    file: str
    offset: int
    line: int
    data: bytes
    final: bool = False
    overlong: bool = False
    cut_short: bool = False
    eof: bool = False  # no data: the file ended here (it was read to its end)
    cached: bool = False  # no data: the file was not read, its parsed batches are cached
    newlines: int = -1  # newlines in data when the maker counted them (-1: not counted)

    def newline_count(self) -> int:
        return self.newlines if self.newlines >= 0 else self.data.count(b"\n")


@dataclass
class Position:
    """Where the stream stands: the file being read and the byte offset in it; for a
    Kafka topic, the next offset of every partition (`partitions`, keys are numbers) and the
    topic's id (`topic_id`; "" where the broker gives none)."""

    file: str = ""
    offset: int = 0
    line: int = 0
    partitions: dict[str, int] | None = None
    topic_id: str = ""  # the topic's id when its offsets were taken: a topic created again has another
    # a folder's or a prefix's positions taken by another number of ranks, until this rank passes them
    # (trainer.input.rescaled: {"ranks": W, "positions": [...]})
    prior: dict[str, Any] | None = None


class StreamStopped(Exception):
    """The stream stopped while a read waited for its storage (S3 down): the blocks read so
    far stand, and the reader ends where it is (trainer.input.reader)."""


class Source(Protocol):
    """What the reader needs of a sample source (StreamSource, KafkaSource)."""

    source: str
    idle_since: float
    lost: list[str]  # files removed before they were read whole, or landed late (a folder's, a prefix's)
    lost_messages: dict[str, int]  # a topic's offset ranges retention removed untrained -> their messages
    resets: list[str]  # a topic's partitions read again from their oldest message (the topic created again)

    def peek(self, max_lines: int = 2000, max_bytes: int = 4 << 20, timeout_s: float = 0.0) -> list[str]: ...

    def blocks(self, max_line_bytes: int) -> Iterator[Block | None]: ...

    def position_after(self, position: Position) -> Position: ...

    def backlog(self, position: Position) -> tuple[str, int] | None:
        """What the stream holds past `position`, as (unit, amount); None if unknown."""
        ...


def open_source(
    source: str,
    follow: bool,
    stop: Callable[[], bool] = lambda: False,
    start: Position | None = None,
    part: tuple[int, int] = (0, 1),
    pattern: str = "*",
    ignore: tuple[str, ...] = DEFAULT_IGNORE,
    exclude: tuple[str, ...] = (),
    start_at: float = 0.0,
    kafka_config: str = "",
) -> Source:
    """A folder, a file, stdin ('-'), s3://BUCKET/PREFIX, or kafka://HOST:PORT/TOPIC;
    `exclude`: paths a folder's listing passes over (the trainer's own outputs); `start_at`:
    the wall time of the cut `start` comes from (0: unknown); `kafka_config`: a topic's
    client settings file (trainer.input.kafka_config)."""
    if source.startswith("s3://"):
        from trainer.input.s3_source import S3PrefixSource  # boto3 loads only for S3

        return S3PrefixSource(
            source, follow, stop=stop, start=start, part=part, pattern=pattern, ignore=ignore, start_at=start_at
        )
    if source.startswith("kafka://"):
        from trainer.input.kafka_source import KafkaSource  # confluent-kafka loads only for Kafka

        return KafkaSource(source, follow, stop=stop, start=start, part=part, config_file=kafka_config)
    return StreamSource(
        source, follow, stop=stop, start=start, part=part, pattern=pattern, ignore=ignore, exclude=exclude, start_at=start_at
    )


class StreamSource:
    def __init__(
        self,
        source: str,
        follow: bool,
        poll_s: float = 0.2,
        stop: Callable[[], bool] = lambda: False,
        start: Position | None = None,
        part: tuple[int, int] = (0, 1),
        pattern: str = "*",
        ignore: tuple[str, ...] = DEFAULT_IGNORE,
        exclude: tuple[str, ...] = (),
        start_at: float = 0.0,
    ) -> None:
        self.source = source
        self.pattern = pattern
        self.ignore = ignore
        # what the trainer writes (exports, metrics, its batch cache), never read back as samples
        self.exclude = frozenset(os.path.abspath(x) for x in exclude)
        self._read_ids: dict[int, tuple[str, bytes]] = {}  # inodes of files read to their end: name then, head digest
        self._inodes: dict[str, int] = {}  # a folder's files' inodes, from its listing
        # compressed and Parquet files read lately: their bytes on disk per byte of the text a
        # position counts in (backlog() is in bytes on disk)
        self._disk_per_text: dict[str, float] = {}
        self._relative: dict[str, str] = {}  # a folder's files' paths under it, from its listing
        # rank i of W reads its share of the folder's files (trainer.input.file_split): by
        # their names' hash when followed, so files rolling away move no other file
        self.part = part
        self.follow = follow
        self.poll_s = poll_s
        self.stop = stop
        self.lost: list[str] = []  # files of the stream not trained: removed before they were read, or landed late
        self.lost_messages: dict[str, int] = {}  # a topic's (KafkaSource): a folder's losses are files
        self.resets: list[str] = []
        self.start = self._rebased(start or Position())
        self._places: tuple[list[Path] | None, dict[str, int]] = (None, {})  # _prior_owner's, per listing
        self.prior = self.start.prior  # dropped once this rank's position passes it (position_after)
        self._prior_last = rescaled.last_file(self.prior)  # the file past which it says nothing
        self.idle_since = time.monotonic()
        self._listed: tuple[int, float, list[Path]] = (-1, 0.0, [])  # folder mtime, when listed, files
        # asked before a finished file is read from its start: True skips reading it (the
        # reader replays its parsed batches from the batch cache)
        self.cached: Callable[[str], bool] | None = None
        self._say_if_gone(self.start)
        self._say_late(self.start, start_at)
        if self.prior is not None and part[0] == 0:  # the files the prior's ranks stood in, said once for the group
            for file, (offset, line) in rescaled.stands(self.prior).items():
                self._say_if_gone(Position(file, offset, line))

    @property
    def lost_files(self) -> int:
        return len(self.lost)

    def _rebased(self, start: Position) -> Position:
        """The checkpoint's position in this source's spelling. Files are ordered by their
        paths, and those before the position's count as read, so a position spelled
        otherwise (a relative --source now absolute) or in another folder (the source moved,
        or changed) made every file count as read, or none: a run that trained nothing, or
        everything again, silently."""
        if start.prior is not None and self.source != "-":
            return self._rebased_prior(start)
        if not start.file or self.source == "-":
            return start
        if start.partitions is not None:  # a topic's position: the source was a topic at the cut
            log.warning(
                "the checkpoint's stream position is in topic %s: --source %s is read from its start", start.file, self.source
            )
            return Position()
        now, moved = self._spelled(start.file)
        if now is None:
            log.warning(
                "the checkpoint's stream position is in %s, which is not in --source %s: the source changed since the cut;"
                " %s is read from its start",
                start.file,
                self.source,
                self.source,
            )
            return Position()
        if moved:
            log.warning(
                "the checkpoint's stream position is in %s, which is not under --source %s; %s has a file of that name:"
                " taken as the same stream, moved, and taken up there",
                start.file,
                self.source,
                Path(now).parent,
            )
        return replace(start, file=now)

    def _spelled(self, file: str) -> tuple[str | None, bool]:
        """A file of a checkpoint's position as this source spells it (None when it is not
        this source's), and whether it was taken from a folder moved: the same folder however
        spelled, a subfolder of it, or (moved) another folder whose file's name this source
        has."""
        here = Path(self.source)
        was = Path(file)
        folder = here if here.is_dir() else here.parent
        candidate = folder / was.name if here.is_dir() else here
        if _same_path(was.parent, folder) and (here.is_dir() or was.name == here.name):
            return str(candidate), False  # the same file, spelled as this source spells it
        under = _under(was, folder) if here.is_dir() else None
        if under is not None:  # in a subfolder of this folder
            return str(folder / under), False
        return (str(candidate), True) if candidate.exists() and was.name == candidate.name else (None, False)

    def _rebased_prior(self, start: Position) -> Position:
        """A position that carries the positions of a cut taken by another number of ranks
        (trainer.input.rescaled), every file of it spelled as this source spells it; from
        the start, said, when they are another source's."""
        names = [start.file] if start.file else []
        names += [str(pos["file"]) for pos in rescaled.positions(start.prior) if pos.get("file")]
        spelled = {name: self._spelled(name)[0] for name in names}
        gone = [name for name, now in spelled.items() if now is None]
        if gone:
            log.warning(
                "the checkpoint's stream positions are in %s, which is not in --source %s: the source changed since the"
                " cut; %s is read from its start",
                gone[0],
                self.source,
                self.source,
            )
            return Position()
        return replace(
            start,
            file=str(spelled[start.file]) if start.file else "",
            prior=rescaled.rebased(start.prior, lambda name: str(spelled[name])),
        )

    def _prior_owner(self, name: str, ranks: int) -> int:
        """The rank of `ranks` that read the file under the folder's dealing (file_split):
        by its name's hash when followed, else by its place in the listing."""
        if self.follow:
            return owner_of(self._relative.get(name, Path(name).name), ranks)
        files = self._all_files()
        if self._places[0] is not files:  # the listing's places, once a listing
            self._places = (files, {str(f): i for i, f in enumerate(files)})
        place = self._places[1].get(name)
        return place % ranks if place is not None else 0

    def _prior_state(self, name: str) -> rescaled.FileState:
        """What the prior says of a file this rank has not passed (NEW without one)."""
        if self.prior is None:
            return rescaled.NEW
        return rescaled.state_of(name, self.prior, self._prior_owner)

    def _say_if_gone(self, start: Position) -> None:
        """A folder's file the checkpoint stands in, gone from the folder: removed while the
        trainer was down, so the files after it may be gone too (a retention that ran ahead
        of the trainer). Said, and counted: the stream goes on with the next file."""
        if not start.file or not Path(self.source).is_dir() or Path(start.file).exists():
            return
        self.lost.append(start.file)
        metrics.SOURCE_FILES_LOST.inc()
        log.error(
            "%s, where the checkpoint stands (line %d, byte %d), is gone from the folder: whatever it held past that"
            " line was not trained, nor any file removed after it while the trainer was down. The stream takes up"
            " at the next file (a retention that removes files the trainer has not read loses their samples)",
            start.file,
            start.line,
            start.offset,
        )

    def _say_late(self, start: Position, cut_at: float) -> None:
        """A folder's files that sort before the checkpoint's file count as read, and so do
        those a prior says its ranks read whole; one that changed after the cut was taken (a
        late file, landed under an earlier name; a file read after the cut, whose training
        the restore undid) holds samples the model does not: said and counted. The cut's time
        is known for cuts from 2026-12-05 on."""
        if cut_at <= 0 or not Path(self.source).is_dir() or not (start.file or self.prior):
            return
        late: dict[str, list[str]] = {}  # the position's file that counts them as read -> the late files
        for f in self._files():
            name = str(f)
            by = self._counted_read_by(name, start)
            try:
                if by and f.stat().st_mtime > cut_at + LATE_SLACK_S:
                    late.setdefault(by, []).append(name)
            except OSError:  # gone since the listing
                continue
        for by, names in late.items():
            self._say_taken_as_read(names, by)

    def _counted_read_by(self, name: str, start: Position) -> str:
        """The file of the position that counts file `name` as read: the start's, for a file
        named before it, else the prior's rank's; "" where none does."""
        if start.file and name < start.file:
            return start.file
        return "" if name == start.file else self._prior_state(name).by

    def _say_taken_as_read(self, late: list[str], start_file: str) -> None:
        """Files (objects) before the checkpoint's that changed after the cut: counted, and
        said one by one, or in one line when there are many."""
        self.lost += late
        metrics.SOURCE_FILES_LOST.inc(len(late))
        if 0 < len(late) <= LATE_SAID:
            for name in late:
                log.error(
                    "%s sorts before %s, where the checkpoint stands, and changed after the cut: it is taken as read, so"
                    " what it holds now is not trained (a file that landed late under an earlier name)",
                    name,
                    start_file,
                )
        elif late:  # many at once: more likely the folder copied anew (cp without -p) than files landing late
            log.error(
                "%d files that sort before %s, where the checkpoint stands, changed after the cut (%s, ...): they are"
                " taken as read, so what they hold now is not trained. Files that landed late under earlier names lose"
                " their samples; a folder copied since the cut (cp without -p gives every file a new time) loses nothing",
                len(late),
                start_file,
                ", ".join(late[:LATE_SAID]),
            )

    def _vanished(self, f: Path, inode: int | None) -> None:
        """`f` (`inode` in the listing that named it), listed and not read yet, is gone:
        renamed within the folder (read under its new name, as the listing finds its inode
        there) or removed, its samples lost: said."""
        self._listed = (-1, 0.0, [])  # list the folder again, now
        self._all_files()
        if inode is not None and inode in self._inodes.values():
            return
        self.lost.append(str(f))
        metrics.SOURCE_FILES_LOST.inc()
        log.error(
            "%s was removed from the folder before it was read: its samples are not trained (a retention or a"
            " clean-up that removes files the trainer has not read yet)",
            f,
        )

    def names(self) -> list[str]:
        """The names (paths under the folder) of every file the folder's contract reads
        now, every rank's share."""
        return [self._relative[str(f)] for f in self._all_files()] if Path(self.source).is_dir() else []

    def _all_files(self) -> list[Path]:
        p = Path(self.source)
        if not p.is_dir():
            return [p]
        # this runs every few ms while following: the listing is reused while the folder's
        # mtime stays the same, for at most one poll (a file may land in the same mtime tick,
        # or in a subfolder, which leaves the folder's mtime as it was)
        stamp, now = p.stat().st_mtime_ns, time.monotonic()
        if stamp != self._listed[0] or now - self._listed[1] > self.poll_s:
            found: dict[str, tuple[str, int]] = {}  # path under the folder: (path, inode)
            self._walk(str(p), "", found, set())
            self._inodes = {path: ino for path, ino in found.values()}
            self._relative = {path: rel for rel, (path, _) in found.items()}
            self._listed = (stamp, now, [Path(found[rel][0]) for rel in sorted(found)])
        return self._listed[2]

    def _walk(self, folder: str, prefix: str, found: dict[str, tuple[str, int]], seen: set[tuple[int, int]]) -> None:
        """The files under `folder` the contract reads, subfolders included (a Hive or Spark
        layout: `date=2026-12-01/part-00000.csv`), by their path under the source folder.
        A subfolder whose name the ignore globs match (`_temporary`, `.staging`) is not
        entered; a folder reached twice through links is entered once."""
        try:
            held = os.stat(folder)
            if (held.st_dev, held.st_ino) in seen:
                return
            seen.add((held.st_dev, held.st_ino))
            with os.scandir(folder) as entries:  # entries know their type and inode: no stat per file
                listed = list(entries)
        except OSError:  # a subfolder removed meanwhile
            return
        for e in listed:
            if self.exclude and os.path.abspath(e.path) in self.exclude:
                continue
            try:
                if e.is_dir():
                    if not self._ignored(e.name):
                        self._walk(e.path, f"{prefix}{e.name}/", found, seen)
                elif e.is_file() and self._takes(e.name):
                    found[prefix + e.name] = (str(Path(e.path)), e.inode())  # spelled as str(Path) keys it
            except OSError:
                continue

    def first_lines(self) -> Iterator[str]:
        """The first line of each of the stream's files, every rank's, in the stream's order
        (a header to read a headerless file with: trainer.input.reader)."""
        for f in self._all_files():
            try:
                yield first_line(f)
            except OSError:  # gone since the listing
                continue

    def _takes(self, name: str) -> bool:
        """A name the folder's contract reads (not one a producer is still writing)."""
        return fnmatch.fnmatch(name, self.pattern) and not self._ignored(name)

    def _ignored(self, name: str) -> bool:
        return any(fnmatch.fnmatch(name, g) for g in self.ignore)

    def _files(self) -> list[Path]:
        """This worker's files (dealt out by their paths under the folder)."""
        files = self._all_files()
        return share(files, [self._relative.get(str(f), f.name) for f in files], self.part, self.follow)

    def peek(self, max_lines: int = 2000, max_bytes: int = 4 << 20, timeout_s: float = 0.0) -> list[str]:
        """The first lines of the stream, without consuming them: the first file's head,
        waiting up to timeout_s for one to land. Empty for stdin, which cannot be re-read.
        The folder's first file that holds bytes, whichever rank's share it is: a followed
        folder's files go to ranks by their names' hash, so rank 0's, which resolves the field
        list for every rank, may hold none yet. Only a followed source waits for one."""
        if self.source == "-":
            return []
        deadline = time.monotonic() + (timeout_s if self.follow else 0.0)  # a finished folder has what it has
        while True:
            files = self._all_files() if Path(self.source).exists() else []
            full = [f for f in files if _size(f) > 0]  # an empty file (a marker) tells nothing
            unreadable: list[str] = []
            for f in full:
                try:
                    head = _head_text(f, max_bytes)
                except Exception as e:  # noqa: BLE001 - a damaged file is skipped, as blocks() skips it
                    unreadable.append(f"{f}: cannot be read ({e})")
                    continue
                for said in unreadable:
                    log.error("%s; skipped", said)
                text = head.decode("utf-8", errors="replace").splitlines()
                return text[: max_lines if len(head) < max_bytes else max(0, min(max_lines, len(text) - 1))]
            if unreadable and not self.follow:  # every file with bytes is damaged: nothing tells the format
                raise ValueError("; ".join(unreadable[:3]))
            if time.monotonic() >= deadline or self.stop():
                return []
            time.sleep(self.poll_s)

    def position_after(self, position: Position) -> Position:
        """A batch's position, carrying the prior until this rank has passed it."""
        if self.prior is None:
            return position
        if rescaled.passed(position.file, self._prior_last):
            self.prior = None
            return position
        return replace(position, prior=self.prior)

    def backlog(self, position: Position) -> tuple[str, int] | None:
        """Bytes on disk of this worker's files past `position` (None for stdin)."""
        if self.source == "-":
            return None
        total = 0
        for f in self._files():
            name = str(f)
            if position.file and name < position.file:
                continue
            state = self._prior_state(name) if name != position.file else rescaled.NEW
            if state.done:
                continue
            try:
                size = f.stat().st_size
            except OSError:  # rolled away meanwhile
                continue
            total += max(0, size - (self.on_disk(position) if name == position.file else 0))
        return "bytes", total

    def on_disk(self, position: Position) -> int:
        """About where `position` stands in its file's bytes on disk: a compressed or Parquet
        file's position counts bytes of its text, which its file holds fewer (or more) of."""
        return round(position.offset * self._disk_per_text.get(position.file, 1.0))

    def _note_disk_per_text(self, name: str, fh: object) -> None:
        """Keeps a compressed or Parquet file's bytes on disk per byte of text, as read so far."""
        ratio = getattr(fh, "disk_per_text", None)
        found = ratio() if callable(ratio) else None
        if found is not None:
            self._disk_per_text.pop(name, None)  # to the end: the oldest entries go first
            self._disk_per_text[name] = found
            while len(self._disk_per_text) > 8:  # the files read lately: a position lags the reading by a few
                del self._disk_per_text[next(iter(self._disk_per_text))]

    def blocks(self, max_line_bytes: int, block_bytes: int = BLOCK_BYTES) -> Iterator[Block | None]:
        """Blocks in stream order; yields None while waiting for data (so callers can flush)."""
        if self.source == "-":
            yield from self._read(sys.stdin.buffer, "<stdin>", 0, 0, lambda: not self.follow, max_line_bytes, block_bytes)
            return
        start = self.start
        before_start: set[str] = set()  # files named before the start's: read before it, on every pass
        while not self.stop():
            pending = self._unread(self._files())
            listed = dict(self._inodes)  # the inodes of the files pending names, whatever a later listing finds
            if start.file:
                before_start.update(str(f) for f in pending if str(f) < start.file)
            if self.prior is not None:  # read whole by the ranks of a cut taken by another number
                before_start.update(str(f) for f in pending if self._prior_state(str(f)).done)
            pending = [f for f in pending if str(f) not in before_start]
            if not pending:
                if not self.follow:
                    return
                yield None
                time.sleep(self._nap())
                continue
            unwritten = 0  # compressed files still empty: looked at again at the next pass
            for i, f in enumerate(pending):
                is_start = str(f) == start.file
                offset = start.offset if is_start else 0
                line_no = start.line if is_start else 0
                if not is_start and self.prior is not None:  # read in part by a rank of another number
                    state = self._prior_state(str(f))
                    offset, line_no = state.offset, state.line
                is_last = i == len(pending) - 1

                def last(f: Path = f, is_last: bool = is_last) -> bool:
                    # a file is finished once a later file exists (or we do not follow)
                    return not self.follow or not is_last or any(str(g) > str(f) for g in self._all_files())

                try:
                    fh = open(f, "rb")  # noqa: SIM115 - held across yields
                except FileNotFoundError:  # renamed (the next pass reads it) or removed since the listing
                    self._vanished(f, listed.get(str(f)))
                    continue
                with fh:
                    ident = os.fstat(fh.fileno())
                    parquet = is_parquet(str(f))
                    compressed = None if parquet else compression_of_file(fh.fileno())
                    if self.follow and compressed is None and ident.st_size == 0 and f.suffix in COMPRESSED_SUFFIXES:
                        unwritten += 1  # not written yet: its first bytes tell how to read it, at the next pass
                        continue
                    if self.follow and (parquet or compressed is not None) and _settling(ident.st_mtime):
                        unwritten += 1  # read whole: not while a writer may still be appending to it
                        self.idle_since = time.monotonic()  # bytes are landing: --idle-exit-s does not count this wait
                        continue
                    # the checkpoint's file is shorter now: rewritten while down
                    if offset > ident.st_size and not parquet and compressed is None:
                        log.error(
                            "%s holds %d bytes, fewer than the %d the checkpoint read: it was truncated or rewritten;"
                            " reading it from its start",
                            f,
                            ident.st_size,
                            offset,
                        )
                        offset, line_no = 0, 0
                    if offset == 0 and self.cached is not None and last() and self.cached(str(f)):
                        yield Block(str(f), 0, 0, b"", cached=True)
                        self._read_ids[ident.st_ino] = (str(f), _head(fh))
                        continue
                    if parquet:  # its text, rendered a row group at a time; whole once it is there
                        try:
                            text: BinaryIO = ParquetText(f)  # type: ignore[assignment]
                        except Exception as e:  # noqa: BLE001 - a damaged file must not stop the stream
                            log.error("%s: not a readable Parquet file (%s); skipped", f, e)
                            self._read_ids[ident.st_ino] = (str(f), _head(fh))
                            continue
                        with text:
                            text.seek(offset)
                            finished = yield from self._read(
                                text, str(f), offset, line_no, lambda: True, max_line_bytes, block_bytes
                            )
                    elif compressed is not None:  # its text, decompressed as it is read; whole once it is there
                        unpacked: BinaryIO = DecompressedText(f, compressed)  # type: ignore[assignment]
                        with unpacked:
                            unpacked.seek(offset)
                            finished = yield from self._read(
                                unpacked, str(f), offset, line_no, lambda: True, max_line_bytes, block_bytes
                            )
                    else:
                        fh.seek(offset)
                        finished = yield from self._read(fh, str(f), offset, line_no, last, max_line_bytes, block_bytes)
                    if finished:
                        self._read_ids[ident.st_ino] = (str(f), _head(fh))
                if finished:
                    yield Block(str(f), 0, 0, b"", eof=True)
                if self.stop():
                    return
            if unwritten == len(pending):  # nothing to read but files still being written
                yield None
                time.sleep(self._nap())
            start = Position()

    def _unread(self, files: list[Path]) -> list[Path]:
        """The files not read yet: a file read under another name (renamed in the folder) is
        not read again; a name that now holds another file is."""
        out, present = [], set()
        for f in files:
            fid = self._inodes.get(str(f))  # from the folder's listing: a poll stats no file
            if fid is None:  # a single file named as the source
                try:
                    fid = f.stat().st_ino
                except OSError:  # gone
                    continue
            present.add(fid)
            known = self._read_ids.get(fid)
            if known is not None:
                if known[0] == str(f):
                    continue
                try:
                    with open(f, "rb") as fh:
                        same = _head(fh) == known[1]
                except OSError:
                    continue
                if same:
                    log.info("%s: read already as %s (renamed); not read again", f, known[0])
                    self._read_ids[fid] = (str(f), known[1])
                    continue
            out.append(f)
        # a file gone from the folder cannot come back by a rename: forget it (its inode may be reused)
        self._read_ids = {k: v for k, v in self._read_ids.items() if k in present}
        return out

    def _changed(self, fh: BinaryIO, name: str, offset: int) -> str | None:
        """While waiting on a followed file: "truncated" when it shrank below what was read,
        "replaced" when its name now holds another file (it was rotated away), else None."""
        if os.fstat(fh.fileno()).st_size < offset:
            return "truncated"
        try:
            now = os.stat(name)
        except FileNotFoundError:
            return "replaced"
        held = os.fstat(fh.fileno())
        return "replaced" if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino) else None

    def _read(
        self, fh: BinaryIO, name: str, offset: int, line_no: int, last: Callable[[], bool], max_line: int, block_bytes: int
    ) -> Generator[Block | None, None, bool]:
        """Yields the file's blocks; returns True when it was read to its end."""
        partial = b""
        skipping = False  # inside a line over the limit: its bytes are dropped up to its end
        read = getattr(fh, "read1", fh.read)
        while not self.stop():
            data = read(block_bytes)
            if data:
                self.idle_since = time.monotonic()
                if skipping:
                    nl = data.find(b"\n")
                    if nl < 0:
                        offset += len(data)
                        continue
                    offset += nl + 1
                    line_no += 1
                    skipping = False
                    yield Block(name, offset, line_no, b"", overlong=True)
                    data = data[nl + 1 :]
                buf = partial + data if partial else data
                cut = buf.rfind(b"\n") + 1
                if cut:
                    # counted once, by numpy (5x bytes.count, without the GIL); the reader takes it from here
                    newlines = int(np.count_nonzero(np.frombuffer(buf, dtype=np.uint8, count=cut) == 10))
                    self._note_disk_per_text(name, fh)
                    yield Block(name, offset, line_no, buf[:cut], newlines=newlines)
                    offset += cut
                    line_no += newlines
                partial = buf[cut:]
                if len(partial) > max_line:
                    offset += len(partial)
                    partial = b""
                    skipping = True
                continue
            whole = is_parquet(name) or isinstance(fh, DecompressedText)  # read whole once there: no growth to watch
            changed = None if name == "<stdin>" or not self.follow or whole else self._changed(fh, name, offset)
            if changed == "truncated":  # copytruncate: the lines read stay trained, the new ones are read
                log.error("%s was truncated below the %d bytes read (rewritten in place); read from the start", name, offset)
                fh.seek(0)
                offset, line_no, partial, skipping = 0, 0, b"", False
                continue
            if last() or changed == "replaced":  # rotated away: what it held is read, its successor comes next
                if skipping:  # the file ended inside the over-long line
                    yield Block(name, offset, line_no + 1, b"", overlong=True)
                elif partial.strip() and getattr(fh, "damage", None):  # a piece of a line: not a sample
                    yield Block(name, offset + len(partial), line_no + 1, b"", cut_short=True)
                elif partial.strip():  # a final line without newline in a finished file
                    yield Block(name, offset, line_no, partial, final=True)
                return True
            yield None
            time.sleep(self._nap())
        return False

    def _nap(self) -> float:
        """How long to wait for more data: briefly while it flows (the next file often lands
        right after the last one ended; a full poll per file would cap a stream of small
        files at one file per poll), the full poll once the stream has been idle a second."""
        return self.poll_s if time.monotonic() - self.idle_since > 1.0 else min(self.poll_s, FLOWING_POLL_S)


def _head_text(path: Path, max_bytes: int) -> bytes:
    """A file's first max_bytes of text: Parquet's rendered rows, a compressed file's text."""
    if is_parquet(str(path)):
        with ParquetText(path) as rendered:
            return rendered.read(max_bytes)  # type: ignore[no-any-return]
    with open(path, "rb") as fh:
        kind = compression_of_file(fh.fileno())
        if kind is None:
            return fh.read(max_bytes)
    with DecompressedText(path, kind) as unpacked:
        return unpacked.read(max_bytes)


def _size(path: Path) -> int:
    """A file's size; 0 for one gone since the listing (rolled away)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
