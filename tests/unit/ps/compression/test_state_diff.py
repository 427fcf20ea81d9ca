"""A dense state written as its difference from the shard's base: bit for bit, the cheaper
form per column, and bodies that do not match their base refused before anything changes."""

from __future__ import annotations

import numpy as np
import pytest

from ctr.format.varint import _get
from ps.compression.payload import CodecError, _to_planes
from ps.compression.state_diff import as_fp32_bits, base_digest, decode_state_diff, encode_state_diff


def _states(n: int = 50_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """An MLP-like state (w | m | v | t) and the next cut's: weights and second moments
    moved a little, first moments new."""
    g = np.random.default_rng(seed)
    w = g.normal(0, 0.05, n).astype(np.float32)
    m = g.normal(0, 1e-3, n).astype(np.float32)
    v = (g.gamma(2.0, 1e-6, n)).astype(np.float32)
    base = np.stack([w, m, v, np.full(n, 200.0, np.float32)], axis=1)
    new = np.stack(
        [
            w + g.normal(0, 1e-4, n).astype(np.float32),
            g.normal(0, 1e-3, n).astype(np.float32),
            v * np.float32(0.9) + np.float32(0.1) * g.gamma(2.0, 1e-6, n).astype(np.float32),
            np.full(n, 430.0, np.float32),
        ],
        axis=1,
    )
    return base.astype(np.float64), new.astype(np.float64)


def test_the_state_comes_back_bit_for_bit_and_smaller_than_its_planes():
    base, new = _states()
    b, nb = as_fp32_bits(base), as_fp32_bits(new)
    assert b is not None and nb is not None
    body = encode_state_diff(nb, b)
    np.testing.assert_array_equal(decode_state_diff(body, b).view(np.uint64), new.view(np.uint64))
    # weights and second moments go as differences; the first moments, new, as their bits
    assert _modes(body, 4)[:3] == [1, 0, 1]
    assert len(body) < 0.9 * len(_to_planes(nb.view(np.float32)))


def test_signs_exponents_and_extremes_cross_over_exactly():
    """Differences that wrap around 2^32 (a sign flip, a zero, a subnormal, the largest
    float) still give back the bits."""
    base = np.array([[1.0, -0.0], [-2.5, 3.4e38], [1e-45, 0.0], [7.0, -1e-38]], dtype=np.float32)
    new = np.array([[-1.0, 0.0], [2.5, -3.4e38], [0.0, 1e-45], [7.0, 1e-38]], dtype=np.float32)
    b, nb = base.view(np.uint32), new.view(np.uint32)
    got = decode_state_diff(encode_state_diff(nb, b), b)
    np.testing.assert_array_equal(got.astype(np.float32).view(np.uint32), nb)


def test_a_value_that_is_not_a_float32_has_no_bits():
    assert as_fp32_bits(np.array([[0.1]])) is None  # 0.1 in float64 is not a float32
    assert as_fp32_bits(np.array([[0.5, 3.0]])) is not None


def test_the_digest_names_the_base():
    base, _ = _states(1000)
    b = as_fp32_bits(base)
    assert b is not None
    other = b.copy()
    other[500, 2] ^= np.uint32(1)  # one bit
    assert base_digest(b) == base_digest(b.copy()) != base_digest(other)


def test_bodies_that_do_not_fit_their_base_are_refused():
    base, new = _states(2000)
    b, nb = as_fp32_bits(base), as_fp32_bits(new)
    assert b is not None and nb is not None
    body = encode_state_diff(nb, b)
    with pytest.raises(CodecError, match="the shard's range holds"):
        decode_state_diff(body, b[:-1])
    with pytest.raises(CodecError, match="missing|says"):
        decode_state_diff(body[: len(body) // 2], b)
    with pytest.raises(CodecError, match="after the last column"):
        decode_state_diff(body + b"\0", b)
    bad_at = _first_mode_at(body)
    bad = bytearray(body)
    bad[bad_at] = 7  # column 0's mode
    with pytest.raises(CodecError, match="mode 7"):
        decode_state_diff(bytes(bad), b)
    inf = nb.copy()
    inf[0, 0] = np.float32(np.inf).view(np.uint32)
    with pytest.raises(CodecError, match="not all finite"):
        decode_state_diff(encode_state_diff(inf, b), b)


def _first_mode_at(body: bytes) -> int:
    buf = np.frombuffer(body, dtype=np.uint8)
    _, pos = _get(buf, 0)
    _, pos = _get(buf, pos)
    return int(pos)


def _modes(body: bytes, cols: int) -> list[int]:
    buf = np.frombuffer(body, dtype=np.uint8)
    pos = _first_mode_at(body)
    out = []
    for _ in range(cols):
        out.append(int(buf[pos]))
        size, pos = _get(buf, pos + 1)
        pos += int(size)
    return out
