"""How a field's number-like tokens were written where the model was trained, so that a
client's numbers score as the same tokens.

A categorical field's value is hashed as text: `1005` and `1005.0` are different features.
The trainer reads text (a CSV's `1005`), while a client sends what its language holds: a
pandas column with a missing value is float64, so `df.to_dict("records")` gives `1005.0`,
and Python's JSON writes it so. Such a request scored every one of those values as a token
the model never saw, and said nothing.

The trainer looks at the first lines of its stream (the peek that resolves the field list)
and records, per field, how its number-like tokens are written: "int" when every one is
an integer in canonical form (`1005`, not `007` or `+5`), "decimal" when every one is a
float as Python and pandas write it (`1005.0`, `0.25`). The version's transform carries it
(FeatureSchema.number_text); the client then writes an integral float of an "int" field as
the integer, and an integer of a "decimal" field as the float. A field whose tokens mix
both, or hold none, is left as it was: its numbers go as str() writes them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

import numpy as np

from ctr.data.fields import FieldIndex
from ctr.data.formats import ParsedSample
from ctr.data.schema import NUMBER_STYLES

STYLES = NUMBER_STYLES
INT, DECIMAL = STYLES
_INT = re.compile(r"-?(0|[1-9][0-9]*)")
_DECIMAL = re.compile(r"-?[0-9]+\.[0-9]+")


def style_of(token: str) -> str | None:
    """INT or DECIMAL for a token a number would be written as by Python (and pandas); None
    for any other token."""
    if _INT.fullmatch(token):
        return INT
    if _DECIMAL.fullmatch(token):
        try:
            return DECIMAL if repr(float(token)) == token else None
        except ValueError:
            return None
    return None


def detect(samples: Iterable[ParsedSample], index: FieldIndex, skip: Iterable[str] = ()) -> tuple[tuple[str, str], ...]:
    """(field, style) of every field whose number-like tokens in `samples` (the stream's
    first lines, parsed) are all written in one style. `skip`: fields whose tokens are not
    the values a client sends (bucketed numeric fields, crosses)."""
    seen: dict[int, set[str | None]] = {}
    for sample in samples:
        for f, token in zip(sample.fields, sample.tokens, strict=True):
            seen.setdefault(f, set()).add(style_of(token))
    out: list[tuple[str, str]] = []
    skipped = set(skip)
    for f, styles in sorted(seen.items()):
        name = index.names[f] if 0 <= f < len(index.names) else ""
        numbered = {s for s in styles if s is not None}
        if name and name not in skipped and len(numbered) == 1:
            out.append((name, numbered.pop()))
    return tuple(out)


def render(value: object, style: str | None) -> object:
    """`value` as its field's tokens were written: an integral float of an INT field as the
    integer, an integer of a DECIMAL field as the float; anything else unchanged."""
    if style == INT and isinstance(value, float | np.floating) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    if style == DECIMAL and isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_):
        return repr(float(value))
    return value


def render_column(values: np.ndarray, style: str | None) -> np.ndarray:
    """A column as its field's tokens were written. A float column (pandas makes one of an
    integer column with a missing value): an INT field's whole numbers as integers, a
    DECIMAL field's as Python writes floats, NaN as a missing value (''); an INT field's
    column whose numbers are not all whole stays as it was. A DECIMAL field's integer
    column as float text. Any other column unchanged."""
    if style in STYLES and values.dtype.kind == "f":
        missing = np.isnan(values)
        kept = values[~missing]
        if not bool(np.all(np.isfinite(kept))):
            return values
        if style == INT:
            if kept.size and not (bool(np.all(kept == np.round(kept))) and float(np.max(np.abs(kept))) < 2.0**53):
                return values
            if not missing.any():
                return values.astype(np.int64)
            text = [str(int(v)) for v in np.where(missing, 0, values).reshape(-1).tolist()]
        else:
            text = [repr(float(v)) for v in values.reshape(-1).tolist()]
        out = np.asarray(text, dtype=str).reshape(values.shape)
        return np.where(missing, "", out)
    if style == DECIMAL and values.dtype.kind in "iu":
        text = [repr(float(v)) for v in values.reshape(-1).tolist()]
        return np.asarray(text, dtype=str).reshape(values.shape)
    return values
