"""Feature schema: the input format and how each field is treated."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Literal

from ctr.data.csv_line import BOM, CsvQuoteError, header_names, split_header

Format = Literal["criteo", "csv", "libsvm", "libffm", "kv", "vw", "json"]
FORMATS: tuple[str, ...] = ("criteo", "csv", "libsvm", "libffm", "kv", "vw", "json")

CRITEO_NUMERIC = tuple(f"I{i}" for i in range(1, 14))
CRITEO_CATEGORICAL = tuple(f"C{i}" for i in range(1, 27))


@dataclass(frozen=True)
class FeatureSchema:
    """How to turn one input line into (label, fields, tokens, values).

    format: criteo TSV, csv with a header, libsvm, libffm, kv (`label<TAB>field=value...`),
        vw, or json (a JSON object a line: ctr.data.json_lines).
    label: label column name (csv), or key (json); labels > 0 count as clicks.
    numeric: fields whose values are numbers, bucketed as floor(ln(v)^2) for v > 2.
    skip: fields to ignore (csv ids, timestamps of the attribution...).
    libsvm_fields: "single" puts every libsvm feature in field "0"; "position" names the
        field by the feature's position in the line (one-hot rows such as Frappe).
    fields: the field list, when given; otherwise it is resolved from the data
        (ctr.data.fields): fixed for criteo, the header for csv, discovered for the rest.
    max_fields: the cap on discovered fields.
    cross: pairs of fields hashed together into one feature of a field of their own.
    header: csv only: the column names as a header line, for lines that carry none (a Kafka
        topic's messages, headerless files); a line equal to it is skipped. Empty: each
        file's first line is its header.
    multi_valued: csv only: (field, separator) pairs: the field's value is several values
        joined by the separator (MovieLens' `Action|Comedy`), each a feature of the field,
        as kv's repeated `tags=x<TAB>tags=y` are. YAML: `multi_valued: [genres]` (with
        `separator`, default "|") or `multi_valued: {genres: "|", tags: ";"}`.
    number_text: (field, "int" | "decimal") pairs: how a field's number-like tokens are
        written in the training data (ctr.data.number_text), so that a client's 1005.0 is
        sent as the 1005 the model learned. Found by the trainer; YAML: `{hour: int}`.
    """

    format: Format = "kv"
    label: str = "label"
    numeric: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    delimiter: str = ","
    libsvm_fields: Literal["single", "position"] = "position"
    fields: tuple[str, ...] = ()
    max_fields: int = 256
    cross: tuple[tuple[str, str], ...] = ()
    header: str = ""
    multi_valued: tuple[tuple[str, str], ...] = ()
    number_text: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for name, style in self.number_text:
            if style not in NUMBER_STYLES:
                raise ValueError(f"schema.number_text: {name!r}: {style!r} is not 'int' or 'decimal'")
        if self.max_fields < 1:
            raise ValueError(f"schema.max_fields: must be >= 1, got {self.max_fields}")
        if self.fields and len(set(self.fields)) != len(self.fields):
            raise ValueError("schema.fields: field names repeat")
        for pair in self.cross:
            if len(pair) != 2 or pair[0] == pair[1]:
                raise ValueError(f"schema.cross: {list(pair)} is not a pair of two different fields")
            if self.fields:
                for f in pair:
                    if f not in self.fields:
                        raise ValueError(f"schema.cross: unknown field {f!r}; the schema's fields are {list(self.fields)}")
        if self.format == "vw" and self.numeric:
            raise ValueError("schema.numeric: a Vowpal Wabbit feature carries its own value (name:value); nothing is bucketed")
        self._check_multi_valued()

    def _check_multi_valued(self) -> None:
        if not self.multi_valued:
            return
        if self.format != "csv":
            raise ValueError(f"schema.multi_valued: for csv input only (the format is {self.format}; kv repeats a field instead)")
        names = [name for name, _ in self.multi_valued]
        if len(set(names)) != len(names):
            raise ValueError(f"schema.multi_valued: a field is named twice in {names}")
        crossed = {f for pair in self.cross for f in pair}
        for name, sep in self.multi_valued:
            where = f"schema.multi_valued: {name!r}"
            if len(sep) != 1 or not sep.isascii() or sep in ('"', "\n", "\r", self.delimiter):
                raise ValueError(
                    f"{where}: separator {sep!r} must be one ASCII character other than the delimiter"
                    f" ({self.delimiter!r}), a quote or a line break"
                )
            if name in self.numeric:
                raise ValueError(f"{where}: a field cannot be both numeric and multi-valued")
            if name in crossed:
                raise ValueError(f"{where}: a cross of a multi-valued field is not built; cross single-valued fields")
            if name == self.label:
                raise ValueError(f"{where}: the label column cannot be multi-valued")

    def separator_of(self, name: str) -> str:
        """The separator of a multi-valued field, '' for a single-valued one."""
        for field_name, sep in self.multi_valued:
            if field_name == name:
                return sep
        return ""

    def to_dict(self) -> dict[str, object]:
        return {
            "format": self.format,
            "label": self.label,
            "numeric": list(self.numeric),
            "skip": list(self.skip),
            "delimiter": self.delimiter,
            "libsvm_fields": self.libsvm_fields,
            "fields": list(self.fields),
            "max_fields": self.max_fields,
            "cross": [list(c) for c in self.cross],
            **({"header": self.header} if self.header else {}),
            **({"multi_valued": dict(self.multi_valued)} if self.multi_valued else {}),
            **({"number_text": dict(self.number_text)} if self.number_text else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> FeatureSchema:
        if not isinstance(d, dict):
            raise ValueError(f"schema: expected a mapping of settings (format: csv, numeric: [...]), got a {type(d).__name__}")
        fmt = str(d.get("format", "kv"))
        if fmt not in FORMATS:
            raise ValueError(f"schema.format: unknown format {fmt!r}; expected one of {FORMATS}")
        lf = str(d.get("libsvm_fields", "position"))
        if lf not in ("single", "position"):
            raise ValueError(f"schema.libsvm_fields: {lf!r} is not 'single' or 'position'")
        known = {"format", "label", "numeric", "skip", "delimiter", "libsvm_fields", "fields", "max_fields", "cross", "header"}
        known |= {"multi_valued", "separator", "number_text"}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"schema: unknown settings {sorted(unknown)}; known: {sorted(known)}")
        cross = d.get("cross") or ()
        if not isinstance(cross, list | tuple) or not all(isinstance(c, list | tuple) for c in cross):
            raise ValueError("schema.cross: expected a list of [field, field] pairs")
        return cls(
            format=fmt,  # type: ignore[arg-type]
            label=str(d.get("label", "label")),
            numeric=_names(d, "numeric"),
            skip=_names(d, "skip"),
            delimiter=str(d.get("delimiter", ",")),
            libsvm_fields=lf,  # type: ignore[arg-type]
            fields=_names(d, "fields"),
            max_fields=_whole(d, "max_fields", 256),
            header=str(d.get("header", "") or ""),
            cross=tuple((str(c[0]), str(c[1])) if len(c) == 2 else tuple(map(str, c)) for c in cross),  # type: ignore[misc]
            multi_valued=_multi_valued(d.get("multi_valued"), d.get("separator", DEFAULT_SEPARATOR)),
            number_text=_number_text(d.get("number_text")),
        )

    def base_fields(self, header: str | None = None) -> tuple[str, ...]:
        """The field list known before any data line: given, Criteo's, or a CSV header's
        (the schema's own, else the file's)."""
        if self.fields:
            return self.fields
        if self.format == "criteo":
            return (*CRITEO_NUMERIC, *CRITEO_CATEGORICAL)
        header = self.header or header
        if self.format == "csv" and header:
            names = header_names(header, self.delimiter)
            return tuple(n for n in names if n and n != self.label and n not in self.skip)
        if self.format == "libsvm" and self.libsvm_fields == "single":
            return ("0",)
        return ()


def _names(d: dict[str, object], key: str) -> tuple[str, ...]:
    """A setting that lists column names; one name alone is a list of one (`numeric: price`
    would otherwise be the columns p, r, i, c and e)."""
    raw = d.get(key) or ()
    if isinstance(raw, str):
        return (raw,)
    if not isinstance(raw, list | tuple) or not all(isinstance(x, str | int) and not isinstance(x, bool) for x in raw):
        raise ValueError(f"schema.{key}: expected a list of column names, got {raw!r}")
    return tuple(str(x) for x in raw)


def _whole(d: dict[str, object], key: str, default: int) -> int:
    raw = d.get(key, default)
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise ValueError(f"schema.{key}: expected a whole number, got {raw!r}")
    return raw


DEFAULT_SEPARATOR = "|"
NUMBER_STYLES = ("int", "decimal")  # how a field's numbers are written (ctr.data.number_text)
# between the values of a Parquet list column in its rendered text (ctr.data.parquet_text):
# ASCII's unit separator, which no value holds in practice, so no value needs rewriting
LIST_SEPARATOR = "\x1f"


def _number_text(raw: object) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ValueError(f"schema.number_text: expected a mapping of field to 'int' or 'decimal', got {raw!r}")
    return tuple((str(k), str(v)) for k, v in raw.items())


def _multi_valued(raw: object, separator: object) -> tuple[tuple[str, str], ...]:
    """schema.multi_valued as (field, separator) pairs, from a list of names (all with
    `separator`) or a mapping of name to separator."""
    if raw is None:
        return ()
    if isinstance(raw, dict):
        return tuple((str(name), str(sep)) for name, sep in raw.items())
    if isinstance(raw, list | tuple) and all(isinstance(x, str) for x in raw):
        return tuple((name, str(separator)) for name in raw)
    raise ValueError("schema.multi_valued: expected a list of field names or a mapping of field name to separator")


def transform_digest(fields: tuple[str, ...] | list[str], schema: FeatureSchema) -> int:
    """A 64-bit digest of what turns a client's named values into a model's features: the
    field list (a feature's index) and the transform (bucketed, skipped and crossed fields,
    the label). A request carries the digest it was encoded for, so serving can refuse one
    encoded for another version's (serving.service)."""
    crosses = [list(c) for c in schema.cross]
    parts: list[object] = [list(fields), sorted(schema.numeric), sorted(schema.skip), schema.label, crosses]
    if schema.multi_valued:  # only then: the digests of versions before it stay as they were
        parts.append(sorted(map(list, schema.multi_valued)))
    text = json.dumps(parts)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") or 1


PRESETS: dict[str, FeatureSchema] = {
    "criteo": FeatureSchema(format="criteo", numeric=CRITEO_NUMERIC),
    "criteo-csv": FeatureSchema(format="csv", label="label", numeric=CRITEO_NUMERIC),
    "avazu": FeatureSchema(format="csv", label="click", skip=("id",)),
    "talkingdata": FeatureSchema(format="csv", label="is_attributed", skip=("attributed_time", "click_time")),
    "libsvm": FeatureSchema(format="libsvm"),
    "libfm": FeatureSchema(format="libsvm"),  # libFM's text format is libsvm's
    "libffm": FeatureSchema(format="libffm"),
    "kv": FeatureSchema(format="kv"),
    "vw": FeatureSchema(format="vw"),  # Vowpal Wabbit's text format: a namespace a field
}

LABEL_NAMES = ("click", "label", "is_attributed", "clicked", "y")  # the label column names a csv header is told by


def _is_vw(line: str) -> bool:
    """Whether a line reads as Vowpal Wabbit's: a label, then at most an importance weight
    and a tag, then '|' (a header delimited by '|' starts with a name, not a number)."""
    bar = line.find("|")
    head = line[:bar].split() if bar > 0 else []
    if not head or not _is_label(head[0]):
        return False
    rest = head[1:]
    tag_at_bar = line[bar - 1] not in " \t"
    if not all(_is_label(t) or t.startswith("'") or (i == len(rest) - 1 and tag_at_bar) for i, t in enumerate(rest)):
        return False
    # and a feature somewhere: "1|a|b", a headerless pipe-delimited row, names namespaces only
    segments = line[bar + 1 :].split("|")
    return any(len(seg.split()) >= (1 if seg[:1].isspace() else 2) for seg in segments)


def _is_label(text: str) -> bool:
    """Whether a first column reads as a label (a number), as a headerless line's does."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def _header(line: str, delimiter: str) -> tuple[str, ...]:
    try:
        return split_header(line, delimiter)
    except CsvQuoteError as e:
        raise ValueError(f"csv header: {e}") from e


def _labelled_header(headers: list[tuple[str, tuple[str, ...]]], label: str | None) -> FeatureSchema | None:
    """The csv schema of the first (delimiter, header) that names the label (`label`, else
    one of the usual names); None when none does."""
    for delim, header in headers:
        if label is None:
            named = [name for name in LABEL_NAMES if name in header]
            if len(named) > 1:  # the first would be the label and the others features: a label among features leaks
                raise ValueError(
                    f"the header names several label columns ({', '.join(named)}): say which is the label with --label"
                    f" (and skip the others in a --schema YAML if they are labels too: trained as features, they leak it)"
                )
        for name in (label,) if label is not None else LABEL_NAMES:
            if name in header:
                return _csv_preset(header, name, delim)
    return None


def _delimited_header(line: str, label: str | None, delimiters: tuple[str, ...]) -> FeatureSchema:
    """The csv schema of a header line delimited by one of `delimiters` that names the label
    (`label`, else one of the usual names), or ValueError saying what the line lacks."""
    found = _labelled_header([(d, _header(line, d)) for d in delimiters if d in line], label)
    if found is not None:
        return found
    names = " or ".join(repr(d) for d in delimiters)
    wanted = repr(label) if label is not None else f"one of {', '.join(LABEL_NAMES)}; name it with --label"
    raise ValueError(f"the first line is not a header delimited by {names} that names the label column ({wanted}): {line[:80]!r}")


def _csv_preset(header: tuple[str, ...], label: str, delimiter: str) -> FeatureSchema:
    """The csv schema of a header naming `label`: Criteo's numeric columns when it has I1,
    TalkingData's skipped times for is_attributed, Avazu's skipped id."""
    if label == "is_attributed":
        return replace(PRESETS["talkingdata"], delimiter=delimiter)
    base = PRESETS["criteo-csv"] if "I1" in header else PRESETS["avazu"]
    return replace(base, label=label, skip=tuple(s for s in base.skip if s in header), delimiter=delimiter)


def _json_schema(line: str, label: str | None) -> FeatureSchema:
    """The json schema of a line holding a JSON object whose keys hold the label (`label`,
    else one of the usual names); ValueError saying what the line lacks."""
    from ctr.data.json_lines import json_keys

    keys = json_keys(line)
    if keys is None:
        raise ValueError(f"the line is not a JSON object: {line[:80]!r}")
    if label is not None:
        if label not in keys:
            raise ValueError(f"the JSON object has no label key {label!r} (--label); its keys: {', '.join(keys[:20])}")
        return FeatureSchema(format="json", label=label)
    named = [name for name in LABEL_NAMES if name in keys]
    if len(named) > 1:
        raise ValueError(f"the JSON object names several label keys ({', '.join(named)}): say which is the label with --label")
    if not named:
        raise ValueError(
            f"the JSON object has no label key (looked for {', '.join(LABEL_NAMES)}; name it with --label); its keys:"
            f" {', '.join(keys[:20])}"
        )
    return FeatureSchema(format="json", label=named[0])


_DELIMITERS = (",", "\t", ";", "|")  # a header line's: comma first, then TSV, then European and pipe exports
# --format csv / tsv: a file whose first line is a header naming the label, delimited so;
# parquet: a Parquet file, read as the csv text of its columns (ctr.data.parquet_text)
# json: a line holding a JSON object whose keys name the label (ctr.data.json_lines)
JSON_ONLY: tuple[str, ...] = ("{",)
DELIMITED: dict[str, tuple[str, ...]] = {"csv": _DELIMITERS, "tsv": ("\t",), "parquet": (",",), "json": JSON_ONLY}


def detect_schema(first_line: str, label: str | None = None, delimiters: tuple[str, ...] | None = None) -> FeatureSchema:
    """Guesses the schema of a file from its first line (for `--data PATH` without --format);
    `label` names a csv file's label column when it is none of the usual names. A header
    delimited by commas, tabs, semicolons or pipes is a csv file when it names a label.
    `delimiters`: only a header delimited by one of them (--format csv or tsv)."""
    line = first_line.rstrip("\r\n").removeprefix(BOM)
    if delimiters == JSON_ONLY or (delimiters is None and line.lstrip().startswith("{")):
        return _json_schema(line, label)
    if delimiters is not None:
        return _delimited_header(line, label, delimiters)
    if "\t" in line:
        cols = line.split("\t")
        if any("=" in c for c in cols[1:]):
            return PRESETS["kv"]
        if 37 <= len(cols) <= 40 and _is_label(cols[0]):
            return PRESETS["criteo"]
    if _is_vw(line):
        return PRESETS["vw"]
    headers = [(d, _header(line, d)) for d in _DELIMITERS if d in line and (d != "," or ":" not in line)]
    found = _labelled_header(headers, label)
    if found is not None:
        return found
    if headers and (label is not None or headers[0][0] == ","):
        columns = ", ".join(headers[0][1][:20])
        if label is not None:
            raise ValueError(f"csv header has no label column {label!r} (--label); its columns: {columns}")
        raise ValueError(
            f"csv header has no label column (looked for {', '.join(LABEL_NAMES)}; name it with --label); its columns: {columns}"
        )
    tokens = line.split()
    if len(tokens) >= 2:
        colons = tokens[1].count(":")
        if colons == 2:
            return PRESETS["libffm"]
        if colons == 1:
            return PRESETS["libsvm"]
    if line.lstrip().startswith("["):  # a JSON document holding an array of records, not one record a line
        raise ValueError(
            f"the line starts a JSON array ({line[:40]!r}): the trainer reads one JSON object a line (JSON Lines;"
            " `jq -c '.[]' records.json > records.jsonl` writes them so)"
        )
    raise ValueError(f"cannot tell the format of line: {line[:80]!r}")
