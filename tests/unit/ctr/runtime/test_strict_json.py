"""strict_json writes what a strict JSON reader takes: non-finite floats as null, at any depth."""

from __future__ import annotations

import json
import math

import pytest

from ctr.runtime.strict_json import dumps, finite


def test_non_finite_floats_are_null_at_any_depth():
    doc = {"auc": math.nan, "rows": [1.0, math.inf, {"x": -math.inf, "y": 2}], "pair": (math.nan, "a"), "n": 3}
    text = dumps(doc)
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == {
        "auc": None,
        "rows": [1.0, None, {"x": None, "y": 2}],
        "pair": [None, "a"],
        "n": 3,
    }
    assert finite(0.5) == 0.5 and finite("nan") == "nan"
