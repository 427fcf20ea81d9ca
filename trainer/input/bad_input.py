"""The error a user sees when a stream is mostly bad lines, or trains nothing: the file, the
first bad lines and the likely cause (another format than the one given, a label column
that is not there), instead of a warning per line and an exit code of 0."""

from __future__ import annotations

import itertools
from pathlib import Path

from ctr.data.schema import FeatureSchema, detect_schema

CHECK_AFTER = 1000  # bad lines before the fraction is judged mid-stream: a few bad lines in a row prove little


class BadInput(ValueError):
    """The stream cannot be trained as configured."""


def too_bad(bad: int, good: int, max_fraction: float, final: bool) -> bool:
    """Bad lines past the threshold: judged mid-stream once CHECK_AFTER of them came."""
    if bad == 0 or (not final and bad < CHECK_AFTER):
        return False
    return bad > max_fraction * (bad + good)


def _encoding(where: str) -> str:
    """The likely cause of lines that are not UTF-8: text in another encoding (a
    spreadsheet's or an old system's export), with the first bytes that are not UTF-8.
    Which encoding it is cannot be told from the bytes reliably (Latin-1 decodes anything,
    GBK most pairs), so it is not guessed."""
    raw = _raw_line_at(where) or b""
    try:
        raw.decode("utf-8")
        shown = ""
    except UnicodeDecodeError as e:
        shown = f" (its first such bytes: {raw[e.start : e.start + 4]!r})"
    return (
        f"the file is not UTF-8 text{shown}: write it as UTF-8 from the encoding it is in, e.g. iconv -f latin1 -t utf-8"
        " FILE > FILE.utf8 for Western European text; every line that is not UTF-8 is a bad line"
    )


def _raw_line_at(where: str) -> bytes | None:
    """The bytes of a bad line named "file:line: reason" (None when it cannot be read)."""
    file, _, rest = where.partition(":")
    number = rest.partition(":")[0]
    path = Path(file)
    if not number.isdigit() or not path.is_file():
        return None
    with path.open("rb") as fh:
        return next(itertools.islice(fh, int(number) - 1, None), None)


def _line_at(where: str) -> str | None:
    """The text of a bad line named "file:line: reason" (None when it cannot be read)."""
    raw = _raw_line_at(where)
    return None if raw is None else raw.decode("utf-8", errors="replace")


def likely_cause(first_bad: list[str], schema: FeatureSchema | None) -> str:
    """A guess at why the lines do not parse, from the first bad one."""
    if not first_bad:
        return "the source held no sample line"
    reason = first_bad[0]
    if "not valid UTF-8" in reason:
        return _encoding(first_bad[0])
    if "it is delimited by" in reason:  # a file of another producer among the stream's
        return "the stream's files are delimited differently; a stream reads one delimiter (--format csv or tsv)"
    if "label column" in reason or "no label" in reason:
        return "the label column is not where the format expects it: name it with --label COLUMN"
    if ": label: " in reason:  # the format was read, its label column was not a click
        return (
            "the label column holds something other than clicks: a label is 1 or 0 (or -1, a count, true/false);"
            " write it so, or name the right column with --label COLUMN"
        )
    line = _line_at(first_bad[0])
    if line is not None:
        try:
            seen = detect_schema(line)
        except ValueError as e:
            return f"the format is not told by the first bad line ({e}); give --format, or a --schema YAML"
        if schema is None or seen.format != schema.format:
            given = f", not {schema.format}" if schema is not None else ""
            return f"the lines look like {seen.format}{given}: give --format {seen.format} (or auto)"
    return "see the first bad lines above; --format, --schema and --label set how lines are read"


def message(source: str, bad: int, good: int, first_bad: list[str], schema: FeatureSchema | None) -> str:
    shown = "\n  ".join(first_bad)
    return (
        f"--source {source}: {bad} bad lines, {good} samples; the first bad lines:\n  {shown}\n"
        f"likely cause: {likely_cause(first_bad, schema)}"
    )
