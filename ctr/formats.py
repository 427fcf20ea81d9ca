"""Line parsers for the supported sample formats.

Every parser turns one text line into a ParsedSample or raises ParseError with a
message that names the field; readers add file:line.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ctr.hashing import field_id
from ctr.schema import CRITEO_CATEGORICAL, CRITEO_NUMERIC, FeatureSchema


class ParseError(ValueError):
    """A malformed sample line."""


@dataclass(frozen=True, slots=True)
class ParsedSample:
    label: float
    fields: list[int]
    tokens: list[str]
    values: list[float]


LineParser = Callable[[str], ParsedSample]


def parse_label(raw: str) -> float:
    try:
        return 1.0 if float(raw) > 0 else 0.0
    except ValueError:
        raise ParseError(f"label: {raw!r} is not a number") from None


def bucket_numeric(raw: str, field: str) -> str:
    """Criteo-winner bucketing: floor(ln(v)^2) for v > 2, else the integer itself."""
    try:
        v = float(raw)
    except ValueError:
        raise ParseError(f"field {field}: {raw!r} is not a number") from None
    if math.isnan(v) or math.isinf(v):
        raise ParseError(f"field {field}: {raw!r} is not finite")
    if v > 2:
        return f"b{int(math.log(v) ** 2)}"
    return f"v{math.floor(v)}"


class FieldEncoder:
    """Maps named raw values to (field id, token, value) under a schema; shared with serving.client."""

    def __init__(self, schema: FeatureSchema) -> None:
        self.numeric = frozenset(schema.numeric)
        self.skip = frozenset(schema.skip)
        self._ids: dict[str, int] = {}

    def field(self, name: str) -> int:
        fid = self._ids.get(name)
        if fid is None:
            fid = self._ids[name] = field_id(name)
        return fid

    def add(self, out: ParsedSample, name: str, raw: str) -> None:
        """Appends field `name` with raw text value to out; empty values are missing."""
        if raw == "" or name in self.skip:
            return
        token = bucket_numeric(raw, name) if name in self.numeric else raw
        out.fields.append(self.field(name))
        out.tokens.append(token)
        out.values.append(1.0)


def _criteo(schema: FeatureSchema) -> LineParser:
    enc = FieldEncoder(schema)
    names = ("label", *CRITEO_NUMERIC, *CRITEO_CATEGORICAL)

    def parse(line: str) -> ParsedSample:
        cols = line.rstrip("\r\n").split("\t")
        if len(cols) > len(names):
            raise ParseError(f"{len(cols)} columns, at most {len(names)} expected")
        if len(cols) < 2:
            raise ParseError("no feature columns")
        s = ParsedSample(parse_label(cols[0]), [], [], [])
        for name, raw in zip(names[1:], cols[1:], strict=False):  # missing trailing = empty
            enc.add(s, name, raw)
        return s

    return parse


def _csv(schema: FeatureSchema, header: str) -> LineParser:
    enc = FieldEncoder(schema)
    names = [c.strip() for c in header.rstrip("\r\n").split(schema.delimiter)]
    if schema.label not in names:
        raise ParseError(f"header has no label column {schema.label!r}")
    label_at = names.index(schema.label)
    delim = schema.delimiter

    def parse(line: str) -> ParsedSample:
        cols = line.rstrip("\r\n").split(delim)
        if len(cols) != len(names):
            raise ParseError(f"{len(cols)} columns, header has {len(names)}")
        s = ParsedSample(parse_label(cols[label_at]), [], [], [])
        for i, (name, raw) in enumerate(zip(names, cols, strict=True)):
            if i != label_at:
                enc.add(s, name, raw)
        return s

    return parse


def _feature_value(raw: str, where: str) -> float:
    try:
        v = float(raw)
    except ValueError:
        raise ParseError(f"{where}: value {raw!r} is not a number") from None
    if not math.isfinite(v):
        raise ParseError(f"{where}: value {raw!r} is not finite")
    return v


def _libsvm(schema: FeatureSchema) -> LineParser:
    single = schema.libsvm_fields == "single"
    ids = [field_id(str(i)) for i in range(1024)]

    def parse(line: str) -> ParsedSample:
        tokens = line.split()
        if not tokens:
            raise ParseError("empty line")
        s = ParsedSample(parse_label(tokens[0]), [], [], [])
        for pos, tok in enumerate(tokens[1:]):
            idx, sep, raw = tok.partition(":")
            if not sep or not idx:
                raise ParseError(f"feature {pos + 1}: {tok!r} is not index:value")
            s.fields.append(ids[0] if single else (ids[pos] if pos < 1024 else field_id(str(pos))))
            s.tokens.append(idx)
            s.values.append(_feature_value(raw, f"feature {pos + 1}"))
        return s

    return parse


def _libffm(schema: FeatureSchema) -> LineParser:
    enc = FieldEncoder(schema)

    def parse(line: str) -> ParsedSample:
        tokens = line.split()
        if not tokens:
            raise ParseError("empty line")
        s = ParsedSample(parse_label(tokens[0]), [], [], [])
        for pos, tok in enumerate(tokens[1:]):
            parts = tok.split(":")
            if len(parts) != 3 or not parts[0] or not parts[1]:
                raise ParseError(f"feature {pos + 1}: {tok!r} is not field:index:value")
            s.fields.append(enc.field(parts[0]))
            s.tokens.append(parts[1])
            s.values.append(_feature_value(parts[2], f"feature {pos + 1}"))
        return s

    return parse


def _kv(schema: FeatureSchema) -> LineParser:
    enc = FieldEncoder(schema)

    def parse(line: str) -> ParsedSample:
        cols = line.rstrip("\r\n").split("\t")
        s = ParsedSample(parse_label(cols[0]), [], [], [])
        for pos, col in enumerate(cols[1:]):
            name, sep, raw = col.partition("=")
            if not sep or not name:
                raise ParseError(f"column {pos + 2}: {col!r} is not field=value")
            enc.add(s, name, raw)
        return s

    return parse


def needs_header(schema: FeatureSchema) -> bool:
    return schema.format == "csv"


def make_parser(schema: FeatureSchema, header: str | None = None) -> LineParser:
    """A parser for one file; csv files pass their header line."""
    if schema.format == "criteo":
        return _criteo(schema)
    if schema.format == "csv":
        if header is None:
            raise ParseError("csv format needs the header line")
        return _csv(schema, header)
    if schema.format == "libsvm":
        return _libsvm(schema)
    if schema.format == "libffm":
        return _libffm(schema)
    return _kv(schema)
