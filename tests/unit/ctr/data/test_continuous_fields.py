"""Fields whose values are measurements, not categories (ctr.data.continuous_fields)."""

from __future__ import annotations

import random

from ctr.data.continuous_fields import MIN_SEEN, continuous_fields
from ctr.data.fields import FieldIndex
from ctr.data.formats import ParsedSample
from tests.unit.ctr.data.test_label_leaks import _samples as label_leak_samples


def _samples(rows: list[dict[str, str]], index: FieldIndex) -> list[ParsedSample]:
    return label_leak_samples([(0, features) for features in rows], index)


def test_full_precision_floats_are_found_and_ids_counts_and_cents_are_not() -> None:
    rng = random.Random(0)
    rows = [
        {
            "score": repr(rng.random()),  # a model score to full precision: nearly every one differs
            "dwell": f"{rng.expovariate(0.1):.3e}",  # exponent notation too
            "uid": str(rng.randrange(10**9)),  # distinct, but integers: an id
            "price": f"{rng.randrange(1000) / 100:.2f}",  # cents: repeat over the lines
            "clicks": str(rng.randrange(5)),  # a small count
            "site": f"s{rng.randrange(7)}",
        }
        for _ in range(2000)
    ]
    index = FieldIndex()
    found = continuous_fields(_samples(rows, index), index)
    assert [name for name, _, _ in found] == ["score", "dwell"]
    assert found[0] == ("score", 2000, 2000)
    assert continuous_fields(_samples(rows, index), index, skip=("score",))[0][0] == "dwell"


def test_a_field_seen_too_rarely_or_mostly_not_numbers_is_not_judged() -> None:
    rng = random.Random(1)
    index = FieldIndex()
    rare = [{"site": "s1", **({"score": repr(rng.random())} if i < MIN_SEEN - 1 else {})} for i in range(1000)]
    assert continuous_fields(_samples(rare, index), index) == []
    mixed = [{"v": repr(rng.random()) if i % 5 else f"x{i}"} for i in range(1000)]  # a fifth not numbers
    assert continuous_fields(_samples(mixed, index), index) == []
