"""Fields that give the label away in the stream's first lines: a copy of the label under
another name, or something known only after the click (a conversion, a time of attribution).
Trained as a feature, such a field makes the progressive AUC near 1.0 and the served model,
which does not get it at request time, worse than one trained without it.

A field determines the label in a sample of lines when every one of its values, its
absence counted as a value, is seen with one label only, while both labels are seen often
enough that chance cannot do it (MIN_EACH of each), over few values (MAX_VALUES: an id whose
values are each seen once separates the labels trivially and says nothing). Real features
do not: CTR is a few percent, and a value frequent enough to matter is seen with both.
"""

from __future__ import annotations

from collections.abc import Iterable

from ctr.data.fields import FieldIndex
from ctr.data.formats import ParsedSample

MIN_EACH = 10  # samples of each label the lines must hold before anything is judged
MAX_VALUES = 20  # more values than this (its absence one of them) and the field is an id, not judged
MIN_PER_VALUE = 3  # a field's values, but for at most one, must each be seen this often


def label_determining(samples: Iterable[ParsedSample], index: FieldIndex, skip: Iterable[str] = ()) -> list[str]:
    """The fields (by name, in field order) whose values, absence included, separate the
    labels of `samples` exactly; [] when the samples hold fewer than MIN_EACH of a label."""
    rows = list(samples)
    positives = sum(1 for s in rows if s.label > 0)
    if positives < MIN_EACH or len(rows) - positives < MIN_EACH:
        return []
    # field -> value -> (negatives, positives); a field absent from a sample is its value None
    seen: dict[int, dict[str | None, list[int]]] = {}
    for s in rows:
        for f in set(s.fields):
            seen.setdefault(f, {})
    for s in rows:
        own = dict(zip(s.fields, s.tokens, strict=True))
        for f, values in seen.items():
            counts = values.setdefault(own.get(f), [0, 0])
            counts[1 if s.label > 0 else 0] += 1
    skipped = set(skip)
    out = []
    for f, values in sorted(seen.items()):
        name = index.names[f] if 0 <= f < len(index.names) else ""
        if not name or name in skipped or len(values) > MAX_VALUES:
            continue
        if sum(1 for neg, pos in values.values() if neg + pos < MIN_PER_VALUE) > 1:
            continue  # values too rare to tell anything
        if all(neg == 0 or pos == 0 for neg, pos in values.values()):
            out.append(name)
    return out
