"""JSON a strict reader takes: Python's json writes NaN and Infinity, which jq, JavaScript's
JSON.parse and most other parsers refuse. A figure that has no value (the AUC of a window
with one class) is written as null."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(obj: Any) -> Any:
    """obj with every non-finite float (in dicts, lists and tuples) replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """json.dumps of finite(obj), refusing any non-finite number left (numpy scalars are
    converted by the caller)."""
    return json.dumps(finite(obj), allow_nan=False, **kwargs)
