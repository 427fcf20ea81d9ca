"""Line parsers for the supported sample formats.

Every parser turns one text line into a ParsedSample (field indices, tokens, values) or
raises ParseError with a message that names the field; readers add file:line. Field
indices come from a FieldIndex shared by all files of a stream (ctr.fields).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from ctr.fields import FieldIndex, cross_name
from ctr.schema import CRITEO_CATEGORICAL, CRITEO_NUMERIC, FeatureSchema


class ParseError(ValueError):
    """A malformed sample line."""


@dataclass(frozen=True, slots=True)
class ParsedSample:
    label: float
    fields: list[int]  # field index of each feature
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
    """Maps named raw values to (field index, token, value) under a schema; shared with
    serving.client. Features of fields the index does not take are dropped."""

    def __init__(self, schema: FeatureSchema, index: FieldIndex) -> None:
        self.numeric = frozenset(schema.numeric)
        self.skip = frozenset(schema.skip)
        self.index = index

    def add(self, out: ParsedSample, name: str, raw: str) -> None:
        """Appends field `name` with raw text value to out; empty values are missing."""
        if raw == "" or name in self.skip:
            return
        token = bucket_numeric(raw, name) if name in self.numeric else raw
        i = self.index.add(name)
        if i < 0:
            return
        out.fields.append(i)
        out.tokens.append(token)
        out.values.append(1.0)


def _criteo(schema: FeatureSchema, index: FieldIndex) -> LineParser:
    enc = FieldEncoder(schema, index)
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


def _csv(schema: FeatureSchema, index: FieldIndex, header: str) -> LineParser:
    enc = FieldEncoder(schema, index)
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


def _libsvm(schema: FeatureSchema, index: FieldIndex) -> LineParser:
    single = schema.libsvm_fields == "single"

    def parse(line: str) -> ParsedSample:
        tokens = line.split()
        if not tokens:
            raise ParseError("empty line")
        s = ParsedSample(parse_label(tokens[0]), [], [], [])
        for pos, tok in enumerate(tokens[1:]):
            idx, sep, raw = tok.partition(":")
            if not sep or not idx:
                raise ParseError(f"feature {pos + 1}: {tok!r} is not index:value")
            value = _feature_value(raw, f"feature {pos + 1}")
            f = index.number(0 if single else pos)
            if f >= 0:
                s.fields.append(f)
                s.tokens.append(idx)
                s.values.append(value)
        return s

    return parse


def _libffm(schema: FeatureSchema, index: FieldIndex) -> LineParser:
    def parse(line: str) -> ParsedSample:
        tokens = line.split()
        if not tokens:
            raise ParseError("empty line")
        s = ParsedSample(parse_label(tokens[0]), [], [], [])
        for pos, tok in enumerate(tokens[1:]):
            parts = tok.split(":")
            if len(parts) != 3 or not parts[0] or not parts[1]:
                raise ParseError(f"feature {pos + 1}: {tok!r} is not field:index:value")
            value = _feature_value(parts[2], f"feature {pos + 1}")
            if parts[0].isdigit():
                f = index.number(int(parts[0]))
                if f < 0 and index.frozen:
                    raise ParseError(f"feature {pos + 1}: field {parts[0]} is out of range (the model has {len(index)} fields)")
            else:
                f = index.add(parts[0])
            if f >= 0:
                s.fields.append(f)
                s.tokens.append(parts[1])
                s.values.append(value)
        return s

    return parse


def _kv(schema: FeatureSchema, index: FieldIndex) -> LineParser:
    enc = FieldEncoder(schema, index)

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


def _with_crosses(parse: LineParser, crosses: list[tuple[int, int, int]]) -> LineParser:
    """Adds, for each (a, b, c), the pair of field a's and field b's first tokens as one
    feature of field c; absent when either field is missing."""

    def parse_crossed(line: str) -> ParsedSample:
        s = parse(line)
        first: dict[int, str] = {}
        for f, tok in zip(s.fields, s.tokens, strict=True):
            first.setdefault(f, tok)
        for a, b, c in crosses:
            ta, tb = first.get(a), first.get(b)
            if ta is not None and tb is not None:
                s.fields.append(c)
                s.tokens.append(f"{ta}\x1f{tb}")
                s.values.append(1.0)
        return s

    return parse_crossed


def make_parser(schema: FeatureSchema, index: FieldIndex, header: str | None = None) -> LineParser:
    """A parser for one file; csv files pass their header line."""
    if schema.format == "criteo":
        parse = _criteo(schema, index)
    elif schema.format == "csv":
        if header is None:
            raise ParseError("csv format needs the header line")
        parse = _csv(schema, index, header)
    elif schema.format == "libsvm":
        parse = _libsvm(schema, index)
    elif schema.format == "libffm":
        parse = _libffm(schema, index)
    else:
        parse = _kv(schema, index)
    if not schema.cross:
        return parse
    crosses = []
    for a, b in schema.cross:
        ia, ib, ic = index.get(a), index.get(b), index.get(cross_name(a, b))
        if min(ia, ib, ic) < 0:
            raise ParseError(f"schema.cross: [{a}, {b}] names a field the field list does not hold")
        crosses.append((ia, ib, ic))
    return _with_crosses(parse, crosses)


def resolve_fields(schema: FeatureSchema, lines: list[str], freeze: bool) -> FieldIndex:
    """The stream's field index: the schema's known fields, then those the first lines show
    (csv: lines[0] is the header), then the crosses. Unparsable lines are passed over here;
    the trainer reports them when it reads them. Raises ValueError naming a bad setting."""
    header = lines[0] if schema.format == "csv" and lines else None
    index = FieldIndex(schema.base_fields(header), cap=schema.max_fields)
    if schema.fields:
        _check_given_fields(schema, lines, header)
    if not schema.fields and schema.format != "criteo" and not (schema.format == "csv" and header is not None):
        parse = make_parser(replace(schema, cross=()), index)
        for line in lines:
            try:
                parse(line)
            except ParseError:
                continue
    for a, b in schema.cross:
        for f in (a, b):
            if index.get(f) < 0:
                raise ValueError(f"schema.cross: unknown field {f!r}; the data has fields {index.names[:50]}")
        index.add(cross_name(a, b))
    if freeze:
        index.freeze()
    return index


def _check_given_fields(schema: FeatureSchema, lines: list[str], header: str | None) -> None:
    """A given field list must fit the data: every listed field exists, and the first lines
    hold no field it does not list (name those in schema.skip to leave them out)."""
    known = FieldIndex(schema.fields, frozen=True)
    if schema.format == "criteo":
        missing = [f for f in schema.fields if f not in (*CRITEO_NUMERIC, *CRITEO_CATEGORICAL)]
    elif header is not None:
        columns = {c.strip() for c in header.rstrip("\r\n").split(schema.delimiter)}
        missing = [f for f in schema.fields if f not in columns]
    else:
        missing = []
    if missing:
        raise ValueError(f"schema.fields: {missing} are not fields of the data")
    if schema.format == "criteo" or (schema.format == "csv" and header is None):
        return
    parse = make_parser(replace(schema, cross=()), known, header)
    for line in lines[1:] if header is not None else lines:
        try:
            parse(line)
        except ParseError:
            continue
    if known.unknown:
        raise ValueError(
            f"schema.fields: the data has fields {sorted(known.unknown)[:20]} that the list does not name"
            " (add them to schema.fields, or to schema.skip to leave them out)"
        )
