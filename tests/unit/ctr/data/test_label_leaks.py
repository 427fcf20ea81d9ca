"""Fields that give the label away in the stream's first lines (ctr.data.label_leaks)."""

from __future__ import annotations

import random

from ctr.data.fields import FieldIndex
from ctr.data.formats import ParsedSample
from ctr.data.label_leaks import MIN_EACH, label_determining


def _samples(rows: list[tuple[int, dict[str, str]]], index: FieldIndex) -> list[ParsedSample]:
    out = []
    for label, features in rows:
        s = ParsedSample(float(label), [], [], [])
        for name, token in features.items():
            s.fields.append(index.add(name))
            s.tokens.append(token)
            s.values.append(1.0)
        out.append(s)
    return out


def test_a_copy_of_the_label_and_a_field_known_only_after_the_click_are_found() -> None:
    rng = random.Random(0)
    rows = []
    for _ in range(600):
        y = int(rng.random() < 0.05)
        features = {"site": f"s{rng.randrange(7)}", "copy": str(y), "device": f"d{rng.randrange(3)}", "user": f"u{rng.random()}"}
        if y:
            features["conversion"] = rng.choice(["buy", "signup"])  # only ever present after a click
        rows.append((y, features))
    index = FieldIndex()
    samples = _samples(rows, index)
    assert label_determining(samples, index) == ["copy", "conversion"]  # not site, device, nor the unique user ids
    assert label_determining(samples, index, skip=("copy",)) == ["conversion"]


def test_too_few_of_a_label_tells_nothing() -> None:
    index = FieldIndex()
    rows = [(int(i < MIN_EACH - 1), {"copy": str(int(i < MIN_EACH - 1))}) for i in range(500)]
    assert label_determining(_samples(rows, index), index) == []
    rows.append((1, {"copy": "1"}))
    again = FieldIndex()
    assert label_determining(_samples(rows, again), again) == ["copy"]
