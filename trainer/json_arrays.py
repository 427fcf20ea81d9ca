"""Arrays inside the JSON a checkpoint cut records: little-endian bytes in base64, so they
come back bit for bit (a float printed in decimal might not)."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import numpy.typing as npt


def array_text(a: npt.ArrayLike | None, dtype: str = "<f8") -> str | None:
    if a is None:
        return None
    return base64.b64encode(np.ascontiguousarray(a, dtype=dtype).tobytes()).decode()


def text_array(text: str | None, dtype: str = "<f8") -> npt.NDArray[Any] | None:
    if text is None:
        return None
    return np.frombuffer(base64.b64decode(text), dtype=dtype).astype(np.dtype(dtype).newbyteorder("="))
