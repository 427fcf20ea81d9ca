"""The table digest (ps/server/digest.py) against a plain reference: order- and split-independent,
and sensitive to any bit of a key or a value."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ps.server.digest import MASK, combine, rows_digest


def _mix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def digest_reference(keys: np.ndarray, rows: np.ndarray) -> int:
    total = 0
    for key, row in zip(keys.tolist(), rows, strict=True):
        h = _mix(key)
        for word in row.view(np.uint64).tolist():
            h = _mix(h ^ word)
        total = (total + h) & MASK
    return total


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 60), st.integers(1, 4), st.integers(0, 2**31))
def test_digest_equals_its_reference_whatever_the_order_or_split(n, width, seed):
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 2**63, n, dtype=np.uint64)
    rows = rng.normal(size=(n, width))
    d = int(rows_digest(keys, rows))
    assert d == digest_reference(keys, rows)
    order = rng.permutation(n)
    assert int(rows_digest(keys[order], rows[order])) == d
    cut = n // 3
    assert combine([int(rows_digest(keys[:cut], rows[:cut])), int(rows_digest(keys[cut:], rows[cut:]))]) == d


def test_digest_sees_one_bit_of_a_value_or_a_key():
    keys = np.arange(1, 101, dtype=np.uint64)
    rows = np.linspace(-1, 1, 200).reshape(100, 2)
    d = int(rows_digest(keys, rows))
    nudged = rows.copy()
    nudged[37, 1] = np.nextafter(nudged[37, 1], 2.0)
    assert int(rows_digest(keys, nudged)) != d
    other = keys.copy()
    other[5] ^= np.uint64(1 << 40)
    assert int(rows_digest(other, rows)) != d
    swapped = rows.copy()
    swapped[[3, 4]] = swapped[[4, 3]]  # the same rows under other keys
    assert int(rows_digest(keys, swapped)) != d
