"""Fields whose values in the stream's first lines are measurements, not categories: a
price, a dwell time, a model score, written with their decimals. A field's value is hashed
as text, so each distinct number trains a feature of its own; where almost every sample
holds another value, each feature is seen about once and the field teaches the model
nothing. Listed under `numeric:` in the schema, such a field is bucketed instead
(ctr.data.schema: floor(ln(v)^2) above 2), and its buckets generalize.

A field is judged continuous when, in the lines looked at, it is present often enough to
judge (MIN_SEEN), its tokens are numbers (NUMBERS of them), most of them with a fraction
(FRACTIONAL: integer ids and counts are categories more often than not), and most of them
differ from one another (DISTINCT). A price written to the cent over a few thousand
lines repeats, and trains well as categories; a float written to full precision does not.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from ctr.data.fields import FieldIndex
from ctr.data.formats import ParsedSample

MIN_SEEN = 100
NUMBERS = 0.9
FRACTIONAL = 0.5
DISTINCT = 0.5
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _fractional(token: str) -> bool | None:
    """Whether a token is a number with a fraction (None: not a number)."""
    if not _NUMBER.fullmatch(token):
        return None
    value = float(token)
    return math.isfinite(value) and not value.is_integer()


def continuous_fields(samples: Iterable[ParsedSample], index: FieldIndex, skip: Iterable[str] = ()) -> list[tuple[str, int, int]]:
    """(field name, distinct values, samples holding it) of each field of `samples` (the
    stream's first lines, parsed) that reads as a measurement, in field order; `skip`:
    fields whose tokens are not the values as written (bucketed numeric fields, crosses)."""
    tokens: dict[int, list[str]] = {}
    for s in samples:
        for f, token in zip(s.fields, s.tokens, strict=True):
            tokens.setdefault(f, []).append(token)
    skipped = set(skip)
    out: list[tuple[str, int, int]] = []
    for f, seen in sorted(tokens.items()):
        name = index.names[f] if 0 <= f < len(index.names) else ""
        if not name or name in skipped or len(seen) < MIN_SEEN:
            continue
        kinds = [_fractional(t) for t in seen]
        numbers = sum(k is not None for k in kinds)
        fractional = sum(k is True for k in kinds)
        distinct = len(set(seen))
        if numbers >= NUMBERS * len(seen) and fractional >= FRACTIONAL * len(seen) and distinct >= DISTINCT * len(seen):
            out.append((name, distinct, len(seen)))
    return out
