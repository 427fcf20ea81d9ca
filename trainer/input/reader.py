"""Blocks of the stream to batches of parsed samples, in a reader thread.

The reader cuts the source's blocks into batches of `batch_size` lines and parses each with
the numba block parser (trainer.input.block_parser), whose kernels release the GIL, so reading and
parsing run beside training. Ready batches wait in a bounded queue. Bad lines are logged
as file:line with the reason and skipped.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import numpy as np

from ctr.data.batch import SampleBatch
from ctr.data.compressed import first_line
from ctr.data.csv_line import header_names, split_csv, split_header
from ctr.data.fields import FieldIndex
from ctr.data.formats import ParseError, is_header_line, parse_label
from ctr.data.parquet_text import ParquetText, is_parquet
from ctr.data.schema import FeatureSchema, detect_schema
from trainer import metrics
from trainer.input.batch_cache import BatchCache, CachedBatch, Recording
from trainer.input.block_parser import BlockParser, ParsedBlock, RefusedFile
from trainer.input.source import Block, Position, Source, StreamSource, StreamStopped

log = logging.getLogger("trainer")
T = TypeVar("T")


@dataclass(frozen=True)
class ReadyBatch:
    batch: SampleBatch
    position: Position  # where the stream stands after the batch's last line
    lines: int


FIRST_BAD_KEPT = 5
FIRST_BAD_LOGGED = 10
LOG_EVERY = 1000


class BatchReader:
    """Turns a Source into ReadyBatch items (None while the stream is idle)."""

    def __init__(
        self,
        source: Source,
        schema: FeatureSchema | None,
        fields: FieldIndex,
        batch_size: int,
        max_line_bytes: int,
        cache: BatchCache | None = None,
        label: str | None = None,
        delimiters: tuple[str, ...] | None = None,
    ) -> None:
        self.source = source
        self.schema = schema
        self.label, self.delimiters = label, delimiters  # how _detect tells a format: --label, --format csv/tsv
        self.fields = fields
        self.batch_size = batch_size
        self.max_line_bytes = max_line_bytes
        self.bad_lines = 0
        # --max-samples: the last batch stops at the limit, so the run trains exactly that
        # many (it trained the whole 16,384-line batch that crossed it) and its position is
        # the line after the last sample trained; batches replayed from the cache stay whole
        self.sample_limit: int | None = None  # samples this reader may yield in all (None: no limit)
        self.samples_out = 0
        self.first_bad: list[str] = []  # "file:line: reason" of the first bad lines, for the error a user sees
        self._parsers: dict[str, BlockParser | RefusedFile] = {}
        self._parquet: dict[str, ParquetText] = {}  # the Parquet file being read: its header, list columns, rows' names
        # the unparsed lines of the current file: fewer than a batch, waiting for more
        self._held: Block | None = None
        self._header_next = False  # a detected csv format: the line detected is the header
        # a csv schema's own header (a Kafka topic's columns): lines repeating it are skipped
        self._header = schema.header if schema is not None and schema.format == "csv" and schema.header else None
        # the header of the stream's first file that has one: a later file whose first line
        # is a sample's (split -l, a producer that writes the header once) reads with it
        self._stream_header: str | None = None
        self._borrowed: dict[str, str] = {}  # file: the header it reads with (_stream_header)
        self.cache = cache
        self._recording: Recording | None = None
        self._replays: dict[str, tuple[Iterator[CachedBatch], list[tuple[int, str]]]] = {}
        if cache is not None and isinstance(source, StreamSource):
            source.cached = self._load_cached

    def _load_cached(self, file: str) -> bool:
        """The source asks before reading a finished file: True when its batches are cached."""
        assert self.cache is not None
        replay = self.cache.replay(file, self.fields)
        if replay is None:
            return False
        self._replays[file] = replay
        return True

    def _bad(self, file: str, line: int, reason: str) -> None:
        if self._recording is not None and self._recording.file == file:
            self._recording.bad.append((line, reason))
        self.bad_lines += 1
        metrics.BAD_LINES.inc()
        told = len(self.first_bad) < FIRST_BAD_KEPT or self.bad_lines <= FIRST_BAD_LOGGED or self.bad_lines % LOG_EVERY == 0
        if told and is_parquet(file):  # a row, not a line: (row group, row) of the file
            reason = f"{self._parquet_of(file).where(line)}: {reason}"
        if len(self.first_bad) < FIRST_BAD_KEPT:
            self.first_bad.append(f"{file}:{line}: {reason}")
        # the first few, then one in LOG_EVERY: a file of another format is not a flood of warnings
        if self.bad_lines <= FIRST_BAD_LOGGED or self.bad_lines % LOG_EVERY == 0:
            more = f" (bad line {self.bad_lines}; one in {LOG_EVERY} is logged from now on)" if self.bad_lines > 1 else ""
            log.warning("%s:%d: %s%s", file, line, reason, more if self.bad_lines == FIRST_BAD_LOGGED else "")

    def _parquet_of(self, file: str) -> ParquetText:
        """The Parquet file being read, opened once (its footer: columns, row groups)."""
        if file not in self._parquet:
            for old in self._parquet.values():
                old.close()
            self._parquet = {file: ParquetText(file)}
        return self._parquet[file]

    def _detect(self, block: Block) -> Block | None:
        """Detects the format from the first lines that tell it (--format auto on a stream
        whose head could not be peeked at); lines before are bad. Returns the rest."""
        data, line = block.data, block.line
        while data:
            nl = data.find(b"\n")
            head, rest = (data, b"") if nl < 0 else (data[:nl], data[nl + 1 :])
            try:
                self.schema = detect_schema(head.decode("utf-8"), self.label, self.delimiters)
                log.info("detected format %s in %s", self.schema.format, block.file)
                self._header_next = True
                return Block(block.file, block.offset + len(block.data) - len(data), line, data, block.final)
            except (ValueError, UnicodeDecodeError) as e:
                self._bad(block.file, line + 1, f"format not detected yet: {e}")
            data, line = rest, line + 1
        return None

    def _file_header(self, block: Block) -> str | None:
        """The header line of a csv block's file: the block's first line at the file's start
        (or after a detected format), else the file's first line read again (a Parquet
        file's column names). None where the schema's header (--csv-header, a topic's) names
        the columns instead: a topic's messages, and a file whose first line does not name
        the label column (a Parquet file always names its own)."""
        assert self.schema is not None
        if self._header is not None and not isinstance(self.source, StreamSource):
            return None  # a message is not a file
        if block.offset == 0 or self._header_next:
            nl = block.data.find(b"\n")
            line = (block.data if nl < 0 else block.data[:nl]).decode("utf-8", errors="replace")
        elif is_parquet(block.file):
            line = self._parquet_of(block.file).header.decode()
        elif block.file.startswith("s3://"):  # resumed inside an object: its first line
            line = self.source.first_line(block.file)  # type: ignore[attr-defined]
        else:  # resumed inside the file: its first line (of its text, if compressed) is still its header
            line = first_line(block.file)
        if is_parquet(block.file):
            return line
        if self._header is None:
            if self._names_label(line):
                self._stream_header = self._stream_header or line
                return line
            borrowed = self._headerless(block.file, line)
            return None if borrowed else line  # else refused, as "header has no label column"
        return line if self._names_label(line) else None

    def _names_label(self, line: str) -> bool:
        assert self.schema is not None
        try:
            return self.schema.label in split_header(line, self.schema.delimiter)
        except ValueError:
            return False

    def _headerless(self, file: str, line: str) -> bool:
        """Whether a file whose first line names no label column is headerless: that line
        reads as a sample under the stream's header (as many columns, a label where its
        label column is). It then reads with that header, as split -l's part_ab does with
        part_aa's (before, each such file was refused whole)."""
        assert self.schema is not None
        header = self._stream_header
        if header is None:  # a run taken up past the first file: the first of the stream's files with one
            first_lines = getattr(self.source, "first_lines", None)
            for candidate in first_lines() if first_lines is not None else ():
                if self._names_label(candidate):
                    header = self._stream_header = candidate
                    break
        if header is None:
            return False
        try:
            names = header_names(header, self.schema.delimiter)
            values = split_csv(line, self.schema.delimiter)
            if len(values) != len(names):
                return False
            parse_label(values[names.index(self.schema.label)].strip())
        except ValueError:  # CsvQuoteError, ParseError: not a sample of that header
            return False
        if file not in self._borrowed:
            log.info("%s: its first line is a sample, not a header: read with the columns of the stream's header", file)
        self._borrowed[file] = header
        return True

    def _repeats_header(self, view: memoryview, got: ParsedBlock, line: int) -> bool:
        """Whether bad line `line` of a parse of `view` repeats the schema's header."""
        start = int(got.line_ends[line - 1]) if line else 0
        raw = bytes(view[start : int(got.line_ends[line])])
        return self._header is not None and is_header_line(raw.decode("utf-8", errors="replace"), self._header)

    def _parser(self, block: Block) -> tuple[BlockParser | RefusedFile, Block | None]:
        """The file's parser, and the block less a csv file's header line."""
        known = self._parsers.get(block.file)
        if known is not None:
            return known, block
        assert self.schema is not None
        header: str | None = None
        if self.schema.format == "csv":
            header = self._file_header(block)
            if header is None:  # every line is a sample's
                header = self._header or self._borrowed.get(block.file)
            elif block.offset == 0 or self._header_next:
                block = _after_first_line(block)
        try:
            lists = self._parquet_of(block.file).lists if self.schema.format == "csv" and is_parquet(block.file) else ()
            p: BlockParser | RefusedFile = BlockParser(self.schema, self.fields, header, self.max_line_bytes, lists)
        except ParseError as e:  # its header: the file is named, its lines counted bad, the stream goes on
            log.error("%s: %s; its lines are not trained", block.file, e)
            p = RefusedFile(str(e), self.fields)
        self._parsers[block.file] = p
        return p, block if block.data else None

    def batches(self) -> Generator[ReadyBatch | None, None, None]:
        try:
            yield from self._batches()
        finally:
            if self._recording is not None:  # the stream stopped inside a file
                BatchCache.abort(self._recording)
                self._recording = None

    def _replay(self, file: str) -> Iterator[ReadyBatch]:
        batches, bad = self._replays.pop(file)
        for line, reason in bad:
            self._bad(file, line, reason)
        for b in batches:
            yield ReadyBatch(b.batch, b.position, b.lines)

    def _track(self, block: Block) -> None:
        """Starts recording a file read from its start; drops a recording left unfinished."""
        rec = self._recording
        if rec is not None and rec.file != block.file:
            BatchCache.abort(rec)
            self._recording = rec = None
        if rec is None and self.cache is not None and self.schema is not None and block.offset == 0 and block.line == 0:
            self._recording = self._cache_write(partial(self.cache.record, block.file, self.fields))

    def _cache_write(self, write: Callable[[], T]) -> T | None:
        """A write to the batch cache. The cache only saves parsing: a write that fails (a
        full or read-only disk) drops the recording and the cache's writes for the rest of
        the run, said once, and the stream is parsed and trained as it would be without it."""
        try:
            return write()
        except OSError as e:
            if self._recording is not None:
                BatchCache.abort(self._recording)
                self._recording = None
            if self.cache is not None:
                log.warning(
                    "batch cache: cannot write under %s (%s); files are parsed as without --batch-cache, and not"
                    " cached for the rest of this run (entries written before are still read)",
                    self.cache.root,
                    e,
                )
                self.cache.writable = False
            return None

    def _batches(self) -> Iterator[ReadyBatch | None]:
        try:
            for block in self.source.blocks(self.max_line_bytes):
                if block is None:
                    yield from self._drain()
                    yield None
                    continue
                if block.cached:
                    yield from self._drain()
                    yield from self._replay(block.file)
                    continue
                if block.eof:
                    yield from self._drain()
                    rec = self._recording
                    if rec is not None and self.cache is not None:
                        self._cache_write(partial(self.cache.finish, rec, self.fields))
                    self._recording = None
                    continue
                self._track(block)
                if block.overlong:
                    yield from self._drain()
                    self._bad(block.file, block.line, f"line is longer than {self.max_line_bytes} bytes")
                    continue
                if block.cut_short:
                    yield from self._drain()
                    self._bad(block.file, block.line, "the file's compressed stream ends inside this line (damaged): not trained")
                    continue
                if self._held is not None and self._held.file != block.file:
                    yield from self._drain()
                if self._held is not None:  # join the held lines to the block that follows them
                    h = self._held
                    joined = h.newlines + block.newlines if h.newlines >= 0 and block.newlines >= 0 else -1
                    block = Block(h.file, h.offset, h.line, h.data + block.data, block.final, newlines=joined)
                    self._held = None
                yield from self._cut(block)
            yield from self._drain()
        except StreamStopped:  # stopped while a read waited for S3: what was trained stands
            return

    def _drain(self) -> Iterator[ReadyBatch]:
        """Parses the held lines as a short batch (end of file, idle stream)."""
        held, self._held = self._held, None
        if held is not None:
            yield from self._cut(held, final=True)

    def _cut(self, block: Block, final: bool = False) -> Iterator[ReadyBatch]:
        if self.schema is None:
            detected = self._detect(block)
            if detected is None:
                return
            block = detected
        parser, rest = self._parser(block)
        if rest is None:
            return
        block = rest
        nul_lines = frozenset[int]()
        if b"\0" in block.data:  # NUL is no text: such a line is bad, not a feature with a NUL in it
            block, nul_lines = _mark_nul_lines(block)
        view = memoryview(block.data)
        # one vectorized check for the block spares the kernel a UTF-8 pass per line
        ascii_only = bool(block.data) and int(np.frombuffer(block.data, dtype=np.uint8).max()) < 0x80
        lines_left = block.newline_count() + (1 if block.final else 0)
        pos = 0
        line = block.line
        while True:
            want = self.batch_size
            if self.sample_limit is not None:
                want = min(want, self.sample_limit - self.samples_out)
                if want <= 0:  # the limit is reached: the rest is not held (a final block held would come back here)
                    return
            if not (lines_left >= want or (final and lines_left > 0)):
                break
            got = parser.parse(view[pos:], block.final, want, ascii_only)
            self.samples_out += len(got.batch)
            for bad in got.bad:
                at = line + bad.line
                if self._header is not None and self._repeats_header(view[pos:], got, bad.line):
                    continue  # a producer's header message (or a file's header line): not a sample
                self._bad(block.file, at + 1, "a NUL byte in the line" if at in nul_lines else bad.reason)
            pos += got.consumed
            line += got.lines
            lines_left -= got.lines
            position = Position(block.file, block.offset + pos, line)
            rec = self._recording
            if rec is not None and rec.file == block.file:
                self._cache_write(partial(BatchCache.add, rec, got.batch, position, got.lines))
            yield ReadyBatch(got.batch, position, got.lines)
        if pos < len(block.data):
            held_newlines = lines_left - (1 if block.final else 0)
            self._held = Block(block.file, block.offset + pos, line, block.data[pos:], block.final, newlines=held_newlines)
        if block.final:
            yield from self._drain()


def _after_first_line(block: Block) -> Block:
    """The block less its first line (a csv file's header)."""
    nl = block.data.find(b"\n")
    rest = b"" if nl < 0 else block.data[nl + 1 :]
    newlines = block.newlines - 1 if block.newlines > 0 and nl >= 0 else -1
    first = len(block.data) if nl < 0 else nl
    return Block(block.file, first + 1, block.line + 1, rest, block.final, newlines=newlines)


def _mark_nul_lines(block: Block) -> tuple[Block, frozenset[int]]:
    """The block with each NUL byte made an invalid UTF-8 byte (0xFF), so the parser refuses
    its line, and the (0-based) numbers of those lines, so the report names the NUL."""
    raw = np.frombuffer(block.data, dtype=np.uint8)
    newlines = np.flatnonzero(raw == 10)
    nuls = np.flatnonzero(raw == 0)
    lines = frozenset((block.line + np.searchsorted(newlines, nuls)).tolist())
    data = block.data.replace(b"\0", b"\xff")
    return Block(block.file, block.offset, block.line, data, block.final, newlines=block.newlines), lines


class ThreadedReader:
    """Runs a BatchReader in a thread, feeding a bounded queue of ready batches."""

    _END = object()

    def __init__(self, reader: BatchReader, depth: int, stop: Callable[[], bool]) -> None:
        self.reader = reader
        self.stop = stop
        self._queue: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reader", daemon=True)
        self._thread.start()

    def _put(self, item: object) -> bool:
        while not self._closed.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            for item in self.reader.batches():
                if not self._put(item):
                    return
            self._put(self._END)
        except BaseException as e:  # handed to the training loop, which raises it
            self._put(e)

    def __iter__(self) -> Iterator[ReadyBatch | None]:
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=5)
