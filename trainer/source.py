"""Sample sources: a file, a folder of rolling files (read as they grow), or stdin.

Lines carry (file, line number, byte offset after the line) so bad lines are reported as
file:line and a checkpoint can record exactly where the stream stands.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO


@dataclass(frozen=True, slots=True)
class Line:
    file: str
    number: int
    end_offset: int
    text: str | None  # None when the bytes are not UTF-8


@dataclass
class Position:
    """Where the stream stands: the file being read and the byte offset in it."""

    file: str = ""
    offset: int = 0
    line: int = 0


class StreamSource:
    def __init__(
        self,
        source: str,
        follow: bool,
        poll_s: float = 0.2,
        stop: Callable[[], bool] = lambda: False,
        start: Position | None = None,
    ) -> None:
        self.source = source
        self.follow = follow
        self.poll_s = poll_s
        self.stop = stop
        self.start = start or Position()
        self.idle_since = time.monotonic()

    def _files(self) -> list[Path]:
        p = Path(self.source)
        if p.is_dir():
            return sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith("."))
        return [p]

    def peek(self, max_lines: int = 2000, max_bytes: int = 4 << 20, timeout_s: float = 0.0) -> list[str]:
        """The first lines of the stream, without consuming them: the first file's head,
        waiting up to timeout_s for one to land. Empty for stdin, which cannot be re-read."""
        if self.source == "-":
            return []
        deadline = time.monotonic() + timeout_s
        while True:
            files = self._files() if Path(self.source).exists() else []
            if files and files[0].stat().st_size > 0:
                with open(files[0], "rb") as fh:
                    head = fh.read(max_bytes)
                text = head.decode("utf-8", errors="replace").splitlines()
                return text[: max_lines if len(head) < max_bytes else max(0, min(max_lines, len(text) - 1))]
            if time.monotonic() >= deadline or self.stop():
                return []
            time.sleep(self.poll_s)

    def lines(self) -> Iterator[Line | None]:
        """Lines in stream order; yields None while waiting for data (so callers can flush)."""
        if self.source == "-":
            yield from self._read(sys.stdin.buffer, "<stdin>", 0, 0, last=lambda: not self.follow)
            return
        done: set[str] = set()
        start = self.start
        while not self.stop():
            pending = [f for f in self._files() if str(f) not in done]
            if start.file:
                pending = [f for f in pending if str(f) >= start.file]
            if not pending:
                if not self.follow:
                    return
                yield None
                time.sleep(self.poll_s)
                continue
            for i, f in enumerate(pending):
                is_start = str(f) == start.file
                with open(f, "rb") as fh:
                    offset = start.offset if is_start else 0
                    line_no = start.line if is_start else 0
                    fh.seek(offset)
                    is_last = i == len(pending) - 1

                    def last(f: Path = f, is_last: bool = is_last) -> bool:
                        # a file is finished once a later file exists (or we do not follow)
                        return not self.follow or not is_last or any(str(g) > str(f) for g in self._files())

                    yield from self._read(fh, str(f), offset, line_no, last)
                done.add(str(f))
                if self.stop():
                    return
            start = Position()

    def _read(self, fh: BinaryIO, name: str, offset: int, line_no: int, last: Callable[[], bool]) -> Iterator[Line | None]:
        partial = b""
        while not self.stop():
            chunk = fh.readline()
            if chunk.endswith(b"\n"):
                data = partial + chunk
                partial = b""
                offset += len(data)
                line_no += 1
                self.idle_since = time.monotonic()
                try:
                    yield Line(name, line_no, offset, data.decode("utf-8"))
                except UnicodeDecodeError:
                    yield Line(name, line_no, offset, None)
                continue
            partial += chunk
            if last():
                if partial.strip():  # a final line without newline in a finished file
                    offset += len(partial)
                    line_no += 1
                    try:
                        yield Line(name, line_no, offset, partial.decode("utf-8"))
                    except UnicodeDecodeError:
                        yield Line(name, line_no, offset, None)
                return
            yield None
            time.sleep(self.poll_s)
