"""A file of labelled samples parsed whole to be scored (`boundless eval`, `boundless
predict`): its bad lines counted and the first few named, and a file that is mostly bad
refused as the trainer refuses a stream (--max-bad-fraction), instead of figures from the
few lines that happened to parse (before: "AUC nan on 1 sample" from a file of 3,000
lines whose labels were fractions)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from ctr.data.fields import FieldIndex
from ctr.data.formats import ParsedSample, ParseError

SHOWN = 5  # bad lines named on stderr; the rest are counted
MAX_BAD_FRACTION = 0.1  # the trainer's default


@dataclass
class ParsedFile:
    samples: list[ParsedSample]
    bad: int = 0
    first_bad: list[str] = field(default_factory=list)  # "where:line: reason" of the first SHOWN
    bad_at: list[int] = field(default_factory=list)  # every bad line's index in the body


def parse_file(body: list[str], parse: Callable[[str], ParsedSample], where: str, first_line: int) -> ParsedFile:
    """Every line of body parsed (line numbers from first_line); the first SHOWN bad lines
    kept as where:line: reason, the rest counted."""
    out = ParsedFile([])
    for i, line in enumerate(body):
        try:
            out.samples.append(parse(line))
        except ParseError as e:
            out.bad += 1
            out.bad_at.append(i)
            if out.bad <= SHOWN:
                out.first_bad.append(f"{where}:{i + first_line}: {e}")
    return out


def check_bad(parsed: ParsedFile, where: str, max_fraction: float) -> None:
    """ValueError naming the first bad lines when no line parsed, or more than max_fraction
    of them are bad; else the first bad lines to stderr, and how many were skipped."""
    total = parsed.bad + len(parsed.samples)
    if parsed.samples and parsed.bad <= max_fraction * total:
        for line in parsed.first_bad:
            print(line, file=sys.stderr)
        if parsed.bad > len(parsed.first_bad):
            print(f"{where}: {parsed.bad} bad lines skipped in all", file=sys.stderr)
        return
    shown = "\n  ".join(parsed.first_bad)
    raise ValueError(
        f"--data {where}: {parsed.bad} of {total} lines are bad (over --max-bad-fraction {max_fraction}), so the figures"
        f" would describe the few that parsed; the first bad lines:\n  {shown}"
    )


def check_fields(samples: list[ParsedSample], fields: FieldIndex, where: str, model: str) -> str:
    """'' when every feature is of a field the model has; else a line naming the fields it
    does not have (their features are scored as absent). A file none of whose features is
    of the model's fields is refused (ValueError): its figures would be a constant's (AUC
    0.5), not the model's, and nothing said why (another model's data, or its columns
    named otherwise)."""
    if not fields.dropped:
        return ""
    unknown = ", ".join(sorted(fields.unknown)[:8])
    if not any(s.fields for s in samples):
        known = ", ".join(fields.names[:12])
        raise ValueError(
            f"{where}: none of its features is of a field model {model!r} has (the file's: {unknown}; the model's:"
            f" {known}{', ...' if len(fields.names) > 12 else ''}): another model's data, or columns named otherwise?"
        )
    return f"{where}: dropped {fields.dropped} features of fields model {model!r} does not have: {unknown} (scored as absent)"


def figure(x: float, digits: int = 6) -> str:
    """A quality figure as text: 'n/a' where it is not defined (AUC over one class,
    calibration with no click)."""
    return f"{x:.{digits}f}" if math.isfinite(x) else "n/a"
