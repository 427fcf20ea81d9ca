import numpy as np
import pytest

from ps.codecs import FP16, FP32, CodecError


@pytest.mark.parametrize("codec,tol", [(FP32, 0.0), (FP16, 1e-3)])
def test_round_trip_and_count(codec, tol):
    values = np.linspace(-2, 2, 37).astype(np.float32)
    payload = codec.encode(values)
    assert codec.count(payload) == 37
    np.testing.assert_allclose(codec.decode(payload, 37), values, atol=tol * 2)


def test_payloads_that_do_not_fit_are_rejected():
    with pytest.raises(CodecError, match="whole values"):
        FP32.count(b"\0" * 7)
    with pytest.raises(CodecError, match="expected"):
        FP16.decode(b"\0" * 6, 4)
    with pytest.raises(CodecError, match="non-finite"):
        FP32.decode(np.array([np.inf], np.float32).tobytes(), 1)
