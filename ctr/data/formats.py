"""Line parsers for the supported sample formats.

Every parser turns one text line into a ParsedSample (field indices, tokens, values) or
raises ParseError with a message that names the field; readers add file:line. Field
indices come from a FieldIndex shared by all files of a stream (ctr.data.fields).
"""

from __future__ import annotations

import logging
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ctr.data.compressed import DecompressedText, compression_of_file
from ctr.data.csv_line import BOM, CsvQuoteError, header_names, split_csv, unnamed_columns
from ctr.data.fields import FieldIndex, cross_name
from ctr.data.parquet_text import ParquetText, is_parquet
from ctr.data.schema import CRITEO_CATEGORICAL, CRITEO_NUMERIC, DELIMITED, LIST_SEPARATOR, FeatureSchema

log = logging.getLogger(__name__)


class ParseError(ValueError):
    """A malformed sample line."""


@dataclass(frozen=True, slots=True)
class ParsedSample:
    label: float
    fields: list[int]  # field index of each feature
    tokens: list[str]
    values: list[float]


LineParser = Callable[[str], ParsedSample]


# The number grammar of every format: decimal, optional fraction and exponent, ASCII only.
# Narrower than float() (no "nan", "inf", "1_000" or surrounding spaces), so the numba
# parsers (trainer.input.block_kernels) read exactly the same numbers.
NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
FLOAT32_MAX = 3.4028234663852886e38
# The separators of libsvm and libffm tokens: ASCII whitespace (str.split() would also
# split on Unicode spaces, which a byte parser does not see).
ASCII_SPACE = " \t\n\r\x0b\x0c"
_SPACES = re.compile(r"[ \t\n\r\x0b\x0c]+")


def read_lines(data: str) -> list[str]:
    """The lines of a file of samples, or of standard input for '-' (ValueError naming a
    path that is not there)."""
    if data == "-":
        return _lines(sys.stdin.read())
    path = Path(data)
    if not path.is_file():
        raise ValueError(f"--data {data}: no such file")
    if is_parquet(data):  # the CSV text of its rows, as the trainer reads it
        try:
            with ParquetText(path) as rendered:
                return _lines(b"".join(iter(lambda: rendered.read(1 << 20), b"")).decode("utf-8", errors="replace"))
        except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
            raise ValueError(f"--data {data}: not a readable Parquet file ({e})") from None
    with open(path, "rb") as fh:
        kind = compression_of_file(fh.fileno())
        if kind is None:
            return _lines(fh.read().decode("utf-8", errors="replace"))
    with DecompressedText(path, kind) as text:  # gzip, bzip2, xz, zstd: the text they hold
        raw = b"".join(iter(lambda: text.read1(1 << 20), b""))
        if text.damage is not None:  # logged; the piece of a line where the stream broke is no sample
            raw = raw[: raw.rfind(b"\n") + 1]
        return _lines(raw.decode("utf-8", errors="replace"))


def list_columns(data: str) -> tuple[str, ...]:
    """A Parquet file's list columns, which its text holds joined by LIST_SEPARATOR (the
    `lists` of make_parser); () for any other file."""
    if data == "-" or not is_parquet(data):
        return ()
    with ParquetText(Path(data)) as rendered:
        return tuple(rendered.lists)


def _lines(text: str) -> list[str]:
    """Lines split where the trainer splits them, at \\n only: str.splitlines would also
    split inside a value at \\x1c-\\x1e, \\x85 or U+2028 (the parsers drop a line's \\r)."""
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def is_header_line(line: str, header: str) -> bool:
    """Whether a line repeats the schema's header (a producer's header message): skipped."""
    return line.rstrip("\r\n").removeprefix(BOM) == header.rstrip("\r\n").removeprefix(BOM)


def parse_number(raw: str) -> float | None:
    """The value of a number per NUMBER; None when raw is not one."""
    return float(raw) if NUMBER.fullmatch(raw) else None


def split_spaces(line: str) -> list[str]:
    """Tokens of a libsvm or libffm line: runs of ASCII whitespace separate them."""
    stripped = line.strip(ASCII_SPACE)
    return _SPACES.split(stripped) if stripped else []


def parse_label(raw: str) -> float:
    """1.0 for a positive number or true, 0.0 for zero, a negative number or false (any
    case: pandas writes a boolean label column as True/False). A fraction between 0 and 1
    is refused: it is a probability or a rate, and reading it as a click would be silently
    wrong."""
    v = parse_number(raw)
    if v is None:
        word = raw.lower()
        if word in ("true", "false"):
            return 1.0 if word == "true" else 0.0
        raise ParseError(f"label: {raw!r} is not a number or true/false")
    if 0.0 < v < 1.0:
        raise ParseError(
            f"label: {raw!r} is a fraction; a label is 1 or 0 (or -1, a count, true/false): a probability or rate is not a click"
        )
    return 1.0 if v > 0 else 0.0


# how exporters write a number that is not there: R's NA, pandas' and numpy's NaN, SQL's
# NULL, Hive's \N, Excel's #N/A. In a numeric column it is a missing feature, as an empty
# field is; elsewhere it is a value like any other (NA may be North America).
MISSING_NUMBERS = ("NA", "N/A", "#N/A", "NaN", "nan", "NAN", "null", "NULL", "Null", "None", "\\N")
_MISSING = frozenset(MISSING_NUMBERS)


def bucket_numeric(raw: str, field: str) -> str | None:
    """Criteo-winner bucketing: floor(ln(v)^2) for v > 2, else the integer itself; None
    for a missing-number marker (MISSING_NUMBERS)."""
    v = parse_number(raw)
    if v is None:
        if raw in _MISSING:
            return None
        raise ParseError(f"field {field}: {raw!r} is not a number")
    if math.isinf(v):
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
        if token is None:
            return
        i = self.index.add(name)
        if i < 0:
            return
        out.fields.append(i)
        out.tokens.append(token)
        out.values.append(1.0)


# Roles of a column of criteo and csv lines besides its field index.
LABEL_COLUMN = -3
SKIPPED = -2
DROPPED = -1


@dataclass(frozen=True)
class Columns:
    """What each column of a criteo or csv line is: its name, its role (a field index,
    LABEL_COLUMN, SKIPPED, or DROPPED for a field the index cannot take) and whether it is
    numeric. Shared by the reference parsers and the numba ones (trainer.input.block_parser)."""

    names: tuple[str, ...]
    roles: tuple[int, ...]
    numeric: tuple[bool, ...]
    ragged: bool  # criteo: missing trailing columns are empty; csv: the count must match
    separators: tuple[str, ...] = ()  # per column: a multi-valued column's separator, else ''

    def separator(self, column: int) -> str:
        return self.separators[column] if self.separators else ""


def _other_delimiter(header: str, schema: FeatureSchema) -> str:
    """Where the header names the label when split at another delimiter (a file of another
    producer in the same folder): saying so, else ''."""
    for other in DELIMITED["csv"]:  # the delimiters a header is told by
        if other != schema.delimiter and other in header:
            try:
                if schema.label in header_names(header, other):
                    return f" split at {schema.delimiter!r}: it is delimited by {other!r}, as the stream's first file is not"
            except CsvQuoteError:
                continue
    return ""


def columns_of(schema: FeatureSchema, index: FieldIndex, header: str | None, lists: tuple[str, ...] = ()) -> Columns:
    """The columns of a criteo line, or of a csv file with this header line. Fields new to
    a growing index are registered here, in column order. `lists`: the columns of a Parquet
    file's list columns, rendered joined by LIST_SEPARATOR (ctr.data.parquet_text)."""
    if schema.format == "criteo":
        names: tuple[str, ...] = ("label", *CRITEO_NUMERIC, *CRITEO_CATEGORICAL)
        label_at = 0
    else:
        header = header if header is not None else (schema.header or None)
        if header is None:
            raise ParseError("csv format needs the header line")
        try:
            names = header_names(header, schema.delimiter)
        except CsvQuoteError as e:
            raise ParseError(f"header: {e}") from e
        if schema.label not in names:
            raise ParseError(f"header has no label column {schema.label!r}{_other_delimiter(header, schema)}")
        label_at = names.index(schema.label)
        _warn_unnamed(names)
    skip, numeric = frozenset(schema.skip), frozenset(schema.numeric)
    roles = []
    for i, name in enumerate(names):
        if i == label_at:
            roles.append(LABEL_COLUMN)
        elif name in skip or not name:
            roles.append(SKIPPED)
        else:
            f = index.get(name)
            if f < 0 and index.can_grow():
                f = index.add(name)
            roles.append(f if f >= 0 else DROPPED)
    separators = tuple(LIST_SEPARATOR if n in lists else schema.separator_of(n) for n in names)
    return Columns(
        names, tuple(roles), tuple(n in numeric for n in names), schema.format == "criteo", separators if any(separators) else ()
    )


_warned_unnamed: set[tuple[int, ...]] = set()


def _warn_unnamed(names: tuple[str, ...]) -> None:
    """Logs, once a process for each layout, the columns a header leaves unnamed."""
    unnamed = tuple(unnamed_columns(names))
    if unnamed and unnamed not in _warned_unnamed:
        _warned_unnamed.add(unnamed)
        log.warning(
            "csv header: column(s) %s have no name (a DataFrame's index written by to_csv?): not trained;"
            " name them to train them",
            ", ".join(map(str, unnamed)),
        )


def _columns(schema: FeatureSchema, index: FieldIndex, header: str | None, lists: tuple[str, ...] = ()) -> LineParser:
    cols = columns_of(schema, index, header, lists)
    delim = "\t" if schema.format == "criteo" else schema.delimiter
    label_at = cols.roles.index(LABEL_COLUMN)
    width = len(cols.names)
    layout = list(zip(cols.names, cols.roles, cols.numeric, (cols.separator(c) for c in range(width)), strict=True))

    quoted = not cols.ragged and delim != '"'  # csv quotes its fields; criteo's TSV has no quoting

    def parse(line: str) -> ParsedSample:
        try:
            raw = split_csv(line, delim) if quoted else line.rstrip("\r\n").split(delim)
        except CsvQuoteError as e:
            raise ParseError(str(e)) from e
        if cols.ragged:
            if len(raw) > width:
                raise ParseError(f"{len(raw)} columns, at most {width} expected")
            if len(raw) < 2:
                raise ParseError("no feature columns")
        elif len(raw) != width:
            raise ParseError(f"{len(raw)} columns, header has {width}")
        s = ParsedSample(parse_label(raw[label_at]), [], [], [])
        for (name, role, numeric, sep), value in zip(layout, raw, strict=False):  # missing trailing = empty
            if value == "" or role in (LABEL_COLUMN, SKIPPED):
                continue
            if sep:  # several values: each a feature of the field, empty ones missing
                pieces = [piece for piece in value.split(sep) if piece]
                if role == DROPPED:
                    if pieces:
                        index.drop(name, len(pieces))
                    continue
                s.fields.extend([role] * len(pieces))
                s.tokens.extend(pieces)
                s.values.extend([1.0] * len(pieces))
                continue
            token = bucket_numeric(value, name) if numeric else value
            if token is None:  # a missing number (NA, NaN, NULL, \N)
                continue
            if role == DROPPED:
                index.drop(name)
                continue
            s.fields.append(role)
            s.tokens.append(token)
            s.values.append(1.0)
        return s

    return parse


def _feature_value(raw: str, where: str) -> float:
    v = parse_number(raw)
    if v is None:
        raise ParseError(f"{where}: value {raw!r} is not a number")
    if not abs(v) <= FLOAT32_MAX:  # batches hold values as float32
        raise ParseError(f"{where}: value {raw!r} is out of float32 range")
    return v


def svmlight_features(tokens: list[str]) -> list[str]:
    """The feature tokens of a libsvm line after its label. SVMlight's own parts are not
    features: a token that starts with '#' begins the line's comment (to its end), and a
    first token qid:N names the sample's query group. Read as features, the comment was a
    bad line and qid took field 0, moving every feature after it one field on."""
    for i, tok in enumerate(tokens):
        if tok.startswith("#"):
            tokens = tokens[:i]
            break
    if tokens and tokens[0].startswith("qid:"):
        if not (tokens[0][4:].isascii() and tokens[0][4:].isdigit()):
            raise ParseError(f"{tokens[0]!r}: a qid is a whole number (SVMlight's query id)")
        tokens = tokens[1:]
    return tokens


def _libsvm(schema: FeatureSchema, index: FieldIndex) -> LineParser:
    single = schema.libsvm_fields == "single"

    def parse(line: str) -> ParsedSample:
        tokens = split_spaces(line)
        if not tokens:
            raise ParseError("empty line")
        s = ParsedSample(parse_label(tokens[0]), [], [], [])
        features = svmlight_features(tokens[1:])
        for pos, tok in enumerate(features):
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
        tokens = split_spaces(line)
        if not tokens:
            raise ParseError("empty line")
        s = ParsedSample(parse_label(tokens[0]), [], [], [])
        for pos, tok in enumerate(tokens[1:]):
            parts = tok.split(":")
            if len(parts) != 3 or not parts[0] or not parts[1]:
                raise ParseError(f"feature {pos + 1}: {tok!r} is not field:index:value")
            value = _feature_value(parts[2], f"feature {pos + 1}")
            if parts[0].isascii() and parts[0].isdigit():
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


def _json(schema: FeatureSchema, index: FieldIndex) -> LineParser:
    from ctr.data.json_lines import json_features, json_label, json_object  # imports this module's ParseError

    enc = FieldEncoder(schema, index)
    label = schema.label
    # top-level keys whose string values go straight to the index (checked once: a name the
    # index may take, neither numeric nor skipped); anything else takes json_features
    plain: set[str] = set()

    def parse(line: str) -> ParsedSample:
        obj = json_object(line)
        s = ParsedSample(parse_label(json_label(obj, label)), [], [], [])
        for key, value in obj.items():
            if type(value) is str and key in plain:  # numbers are their text too (json_object)
                if value:
                    i = index.add(key)
                    if i >= 0:
                        s.fields.append(i)
                        s.tokens.append(value)
                        s.values.append(1.0)
                continue
            if key == label:
                continue
            for name, text in json_features({key: value}, label):
                enc.add(s, name, text)
            if type(value) is str and key not in enc.numeric and key not in enc.skip:
                plain.add(key)  # json_features took its name
        return s

    return parse


VW_DEFAULT_NAMESPACE = "default"  # the field of features after a bare '|' (Vowpal Wabbit's " ")


def vw_head_error(head: list[str], adjacent: bool) -> str | None:
    """Why the tokens after a Vowpal Wabbit line's label and before its first '|' cannot be
    read (None when they can): an importance weight of 1 and a tag ('tag, or one that
    touches the '|') are taken; another weight or a base would change the training, and no
    sample is weighed here."""
    weight_seen = False
    for pos, tok in enumerate(head):
        if tok.startswith("'"):
            continue
        v = parse_number(tok)
        if v is not None:
            if not weight_seen and v == 1.0:
                weight_seen = True
                continue
            return (
                f"{tok!r} before the first '|': an importance weight other than 1, or a base, is not supported"
                " (every sample weighs 1)"
            )
        if pos == len(head) - 1 and adjacent:
            continue  # a tag written against the '|'
        return f"{tok!r} before the first '|' is neither an importance weight nor a tag"
    return None


def vw_namespaces(text: str) -> list[tuple[str, str | None, list[str]]]:
    """(namespace, its scale as written or None, its feature tokens) of a Vowpal Wabbit
    line's part after the first '|'; a bare '|' opens the default namespace."""
    out: list[tuple[str, str | None, list[str]]] = []
    for seg in text.split("|"):
        toks = split_spaces(seg)
        if not seg or seg[0] in ASCII_SPACE:
            out.append((VW_DEFAULT_NAMESPACE, None, toks))
        else:
            name, sep, scale = toks[0].partition(":")
            out.append((name, scale if sep else None, toks[1:]))
    return out


def _vw(schema: FeatureSchema, index: FieldIndex) -> LineParser:
    """Vowpal Wabbit's text format: `label [1] ['tag]|namespace[:scale] name[:value] ...`.
    A namespace is a field, a feature's name its token, its value times the namespace's
    scale its value (numba's twin: trainer.input.block_kernels, MODE_VW)."""
    skip = frozenset(schema.skip)

    def parse(line: str) -> ParsedSample:
        text = line.rstrip("\r\n")
        bar = text.find("|")
        if bar < 0:
            raise ParseError("no '|' before the features: not a Vowpal Wabbit line")
        head = split_spaces(text[:bar])
        if not head:
            raise ParseError("no label before the first '|'")
        s = ParsedSample(parse_label(head[0]), [], [], [])
        why = vw_head_error(head[1:], bar > 0 and text[bar - 1] not in ASCII_SPACE)
        if why is not None:
            raise ParseError(why)
        for name, raw_scale, toks in vw_namespaces(text[bar + 1 :]):
            if not name:
                raise ParseError(f"a namespace with a scale ({raw_scale!r}) and no name")
            scale = 1.0 if raw_scale is None else _feature_value(raw_scale, f"namespace {name}: scale")
            for tok in toks:
                token, sep, raw = tok.partition(":")
                if not token:
                    raise ParseError(f"namespace {name}: feature {tok!r} has no name")
                value = (_feature_value(raw, f"namespace {name}: feature {token}") if sep else 1.0) * scale
                if not abs(value) <= FLOAT32_MAX:
                    raise ParseError(f"namespace {name}: feature {token}: value times the scale is out of float32 range")
                if name in skip:
                    continue
                i = index.add(name)
                if i >= 0:
                    s.fields.append(i)
                    s.tokens.append(token)
                    s.values.append(value)
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


def make_parser(schema: FeatureSchema, index: FieldIndex, header: str | None = None, lists: tuple[str, ...] = ()) -> LineParser:
    """A parser for one file; csv files pass their header line (and a Parquet file its list
    columns). A byte order mark that starts a line (a file's first, written by a
    spreadsheet program) is not part of it."""
    if schema.format in ("criteo", "csv"):
        parse = _columns(schema, index, header, lists)
    elif schema.format == "libsvm":
        parse = _libsvm(schema, index)
    elif schema.format == "libffm":
        parse = _libffm(schema, index)
    elif schema.format == "vw":
        parse = _vw(schema, index)
    elif schema.format == "json":
        parse = _json(schema, index)
    else:
        parse = _kv(schema, index)
    crosses = cross_fields(schema, index)
    whole = _with_crosses(parse, crosses) if crosses else parse

    def parse_line(line: str) -> ParsedSample:
        return whole(line[1:] if line.startswith(BOM) else line)

    return parse_line


def cross_fields(schema: FeatureSchema, index: FieldIndex) -> list[tuple[int, int, int]]:
    """(field a, field b, cross field) of each of the schema's crosses."""
    crosses = []
    for a, b in schema.cross:
        ia, ib, ic = index.get(a), index.get(b), index.get(cross_name(a, b))
        if min(ia, ib, ic) < 0:
            raise ParseError(f"schema.cross: [{a}, {b}] names a field the field list does not hold")
        crosses.append((ia, ib, ic))
    return crosses


def resolve_fields(schema: FeatureSchema, lines: list[str], freeze: bool) -> FieldIndex:
    """The stream's field index: the schema's known fields, then those the first lines show
    (csv: lines[0] is the header), then the crosses. Unparsable lines are passed over here;
    the trainer reports them when it reads them. Raises ValueError naming a bad setting."""
    if schema.format == "csv" and schema.header:  # the lines carry no header: the schema names the columns
        lines = [schema.header, *(line for line in lines if not is_header_line(line, schema.header))]
    header = lines[0] if schema.format == "csv" and lines else None
    index = FieldIndex(schema.base_fields(header), cap=schema.max_fields)
    if schema.format == "csv" and header is not None:
        _check_named_columns(schema, header)
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


def _check_named_columns(schema: FeatureSchema, header: str) -> None:
    """A numeric or multi-valued column the header does not hold is a misspelt name: the
    column it meant would train as plain text, without a word. (A skipped column that is
    not there is fine: nothing is read from it either way.)"""
    columns = header_names(header, schema.delimiter)
    for setting, names in (("numeric", schema.numeric), ("multi_valued", tuple(n for n, _ in schema.multi_valued))):
        missing = [n for n in names if n not in columns]
        if missing:
            raise ValueError(
                f"schema.{setting}: {missing} not among the header's columns {[c for c in columns if c][:50]}; a misspelt"
                " name would leave the column it meant read as plain text"
            )


def _check_given_fields(schema: FeatureSchema, lines: list[str], header: str | None) -> None:
    """A given field list must fit the data: every listed field exists, and the first lines
    hold no field it does not list (name those in schema.skip to leave them out)."""
    known = FieldIndex(schema.fields, frozen=True)
    if schema.format == "criteo":
        missing = [f for f in schema.fields if f not in (*CRITEO_NUMERIC, *CRITEO_CATEGORICAL)]
    elif header is not None:
        columns = set(header_names(header, schema.delimiter))
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
