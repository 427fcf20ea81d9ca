"""Blocks of sample lines to SampleBatches: the numba kernel (trainer.input.block_kernels) does the
work; the lines it defers (malformed, new fields, rare numbers) go through the reference
line parser (ctr.data.formats) one by one, and are merged back in line order."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ctr.data.batch import SampleBatch, build_batch
from ctr.data.fields import FieldIndex
from ctr.data.formats import ParsedSample, ParseError, columns_of, cross_fields, make_parser, split_spaces, vw_namespaces
from ctr.data.hashing import hash_tokens, pack_tokens
from ctr.data.json_lines import json_features, json_object
from ctr.data.schema import FeatureSchema
from trainer.input import block_kernels as k

MAX_LINE_BYTES = 1 << 20
_MODES = {"libsvm": k.MODE_LIBSVM, "libffm": k.MODE_LIBFFM, "kv": k.MODE_KV, "vw": k.MODE_VW, "json": k.MODE_JSON}


@dataclass(frozen=True)
class BadLine:
    line: int  # index of the line within the block
    reason: str


@dataclass(frozen=True)
class ParsedBlock:
    batch: SampleBatch
    line_ends: npt.NDArray[np.int64]  # byte offset after each line parsed, within the block
    bad: list[BadLine]

    @property
    def lines(self) -> int:
        return int(self.line_ends.shape[0])

    @property
    def consumed(self) -> int:
        return int(self.line_ends[-1]) if self.lines else 0


@dataclass(frozen=True)
class _NameTable:
    keys: npt.NDArray[np.uint64]
    roles: npt.NDArray[np.int32]
    numeric: npt.NDArray[np.bool_]
    field_ids: npt.NDArray[np.uint32]  # the index's hash id per field (one 0 when empty)


def name_key(names: list[str]) -> npt.NDArray[np.uint64]:
    """The kernel's key of each field name: its token key in field id 0."""
    buf, offsets = pack_tokens(names)
    return hash_tokens(buf, offsets, np.zeros(len(names), dtype=np.uint32))  # type: ignore[no-any-return]


class BlockParser:
    """Parses blocks of one file's lines (a csv file's header already read) into batches.
    Shares the stream's FieldIndex with the reference parser it defers to."""

    def __init__(
        self,
        schema: FeatureSchema,
        index: FieldIndex,
        header: str | None = None,
        max_line_bytes: int = MAX_LINE_BYTES,
        lists: tuple[str, ...] = (),
    ) -> None:
        """lists: a Parquet file's list columns (their values joined by LIST_SEPARATOR)."""
        self.schema = schema
        self.index = index
        self.max_line_bytes = max_line_bytes
        self.reference = make_parser(schema, index, header, lists)
        self.columns = columns_of(schema, index, header, lists) if schema.format in ("criteo", "csv") else None
        delim = "\t" if schema.format in ("criteo", "kv", "json") else schema.delimiter
        if len(delim.encode()) != 1:
            raise ValueError(f"schema.delimiter: {delim!r} must be one ASCII character")
        self.delim = delim.encode()[0]
        self.mode = k.MODE_COLUMNS if self.columns is not None else _MODES[schema.format]
        self.quoted = schema.format == "csv" and self.delim != ord('"')  # criteo's TSV has no quoting
        if self.columns is not None:
            self.col_role = np.asarray(self.columns.roles, dtype=np.int32)
            self.col_numeric = np.asarray(self.columns.numeric, dtype=np.bool_)
            self.col_sep = np.asarray([ord(sep) if sep else 0 for sep in self.columns.separators], dtype=np.int32)
        else:
            self.col_role = np.zeros(0, dtype=np.int32)
            self.col_numeric = np.zeros(0, dtype=np.bool_)
            self.col_sep = np.zeros(0, dtype=np.int32)
        crosses = cross_fields(schema, index)
        self.crosses = np.asarray(crosses, dtype=np.int32).reshape(len(crosses), 3)
        self.dropped_names: set[str] = set()  # named fields the index refused
        self._table: _NameTable | None = None
        self._table_for = (-1, -1)

    def _names(self) -> _NameTable:
        """The kernel's table of field names and field ids, rebuilt when the index or the
        dropped names grew."""
        now = (len(self.index), len(self.dropped_names))
        if self._table is not None and self._table_for == now:
            return self._table
        roles: dict[str, int] = {}
        for name in self.dropped_names:
            roles[name] = k.DROPPED
        for i, name in enumerate(self.index.names):
            roles[name] = i
        if self.mode in (k.MODE_KV, k.MODE_VW, k.MODE_JSON):
            for name in self.schema.skip:
                roles[name] = k.SKIPPED
        if self.mode == k.MODE_JSON:  # the label is a key of the object, never a field
            roles[self.schema.label] = k.LABEL_COLUMN
        size = 16
        while size < 2 * len(roles):
            size *= 2
        keys = np.zeros(size, dtype=np.uint64)
        table_roles = np.zeros(size, dtype=np.int32)
        numeric = np.zeros(size, dtype=np.bool_)
        names = list(roles)
        numeric_names = frozenset(self.schema.numeric)
        for name, key in zip(names, name_key(names).tolist(), strict=True):
            slot = key & (size - 1)
            while keys[slot] != 0:
                slot = (slot + 1) & (size - 1)
            keys[slot] = key
            table_roles[slot] = roles[name]
            numeric[slot] = name in numeric_names
        field_ids = self.index.ids() if len(self.index) else np.zeros(1, dtype=np.uint32)
        self._table = _NameTable(keys, table_roles, numeric, field_ids)
        self._table_for = now
        return self._table

    def parse(self, block: bytes | memoryview, final: bool, max_lines: int, ascii_only: bool = False) -> ParsedBlock:
        """Parses up to max_lines complete lines of block (and its unterminated tail when
        final). Bad lines are skipped and listed with the reason. `ascii_only` says the
        caller checked that no byte is above 0x7F (so no line needs UTF-8 validation)."""
        buf = np.frombuffer(block, dtype=np.uint8)
        names = self._names()
        labels, offsets, keys, fields, values, sample_line, deferred, line_ends, dropped = k.parse_block(
            buf,
            final,
            ascii_only,
            max_lines,
            self.max_line_bytes,
            self.mode,
            self.delim,
            self.columns is not None and self.columns.ragged,
            self.quoted,
            self.col_role,
            self.col_numeric,
            self.col_sep,
            names.keys,
            names.roles,
            names.numeric,
            len(self.index),
            self.index.frozen,
            self.index.cap,
            self.schema.libsvm_fields == "single",
            names.field_ids,
            self.crosses,
        )
        self.index.dropped += int(dropped)
        batch = SampleBatch(labels, offsets, keys, fields, values)
        if not len(deferred):
            return ParsedBlock(batch, line_ends, [])
        bad: list[BadLine] = []
        settled: list[ParsedSample] = []
        settled_lines: list[int] = []
        for li in deferred.tolist():
            start = int(line_ends[li - 1]) if li else 0
            raw = bytes(block[start : int(line_ends[li])])
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            sample = self._reference(raw, li, bad)
            if sample is not None:
                settled.append(sample)
                settled_lines.append(li)
        if settled:
            batch = merge(batch, sample_line, build_batch(settled, self.index.ids()), np.asarray(settled_lines, dtype=np.int32))
        return ParsedBlock(batch, line_ends, bad)

    def _reference(self, raw: bytes, li: int, bad: list[BadLine]) -> ParsedSample | None:
        if len(raw) > self.max_line_bytes:
            bad.append(BadLine(li, f"line is longer than {self.max_line_bytes} bytes"))
            return None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            bad.append(BadLine(li, "line is not valid UTF-8"))
            return None
        try:
            return self.reference(text)
        except ParseError as e:
            bad.append(BadLine(li, str(e)))
            return None
        finally:
            self._note_dropped(text)

    def _note_dropped(self, text: str) -> None:
        """Remembers the named fields of a deferred line that the index refused, so the
        kernel drops them itself next time."""
        if self.mode == k.MODE_KV and self.schema.format == "kv":
            names = [col.partition("=")[0] for col in text.rstrip("\r\n").split("\t")[1:]]
        elif self.mode == k.MODE_LIBFFM:
            names = [tok.split(":", 1)[0] for tok in split_spaces(text)[1:]]
            names = [n for n in names if not (n.isascii() and n.isdigit())]
        elif self.mode == k.MODE_VW:
            bar = text.find("|")
            names = [name for name, _, _ in vw_namespaces(text.rstrip("\r\n")[bar + 1 :])] if bar >= 0 else []
        elif self.mode == k.MODE_JSON:  # every field the object names, a nested object's as "key.inner"
            try:
                names = [name for name, _ in json_features(json_object(text), self.schema.label)]
            except ParseError:
                names = []
        else:
            return
        skip = frozenset(self.schema.skip) if self.mode in (k.MODE_KV, k.MODE_VW, k.MODE_JSON) else frozenset()
        for name in names:
            if name and name not in skip and self.index.get(name) < 0 and not self.index.can_grow():
                self.dropped_names.add(name)


class RefusedFile:
    """The parser of a file whose header cannot be read (no label column, a name given
    twice, bad quoting): each of its lines is a bad line with that reason, so the file is
    named and counted and the stream goes on to the next (--max-bad-fraction still judges)."""

    def __init__(self, reason: str, index: FieldIndex) -> None:
        self.reason = f"not trained: the file's {reason}"
        self.index = index

    def parse(self, block: bytes | memoryview, final: bool, max_lines: int, ascii_only: bool = False) -> ParsedBlock:
        data = bytes(block)
        ends: list[int] = []
        pos = 0
        while len(ends) < max_lines and pos < len(data):
            nl = data.find(b"\n", pos)
            if nl < 0 and not final:
                break
            pos = len(data) if nl < 0 else nl + 1
            ends.append(pos)
        empty = build_batch([], self.index.ids())
        return ParsedBlock(empty, np.asarray(ends, dtype=np.int64), [BadLine(i, self.reason) for i in range(len(ends))])


def merge(a: SampleBatch, a_lines: npt.NDArray[np.int32], b: SampleBatch, b_lines: npt.NDArray[np.int32]) -> SampleBatch:
    """The samples of a and b in the order of their line numbers."""
    order = np.argsort(np.concatenate([a_lines, b_lines]), kind="stable")
    counts = np.concatenate([np.diff(a.offsets), np.diff(b.offsets)])[order]
    starts = np.concatenate([a.offsets[:-1], b.offsets[:-1] + a.keys.shape[0]])[order]
    offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    gather = np.repeat(starts - offsets[:-1], counts) + np.arange(offsets[-1], dtype=np.int64)
    return SampleBatch(
        np.concatenate([a.labels, b.labels])[order],
        offsets,
        np.concatenate([a.keys, b.keys])[gather],
        np.concatenate([a.fields, b.fields])[gather],
        np.concatenate([a.values, b.values])[gather],
    )
