"""Gradient codecs behind one interface. The wire id of each codec is its proto enum value."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt


class CodecError(ValueError):
    """A payload that does not decode to the announced number of values."""


class Codec(Protocol):
    wire_id: int
    name: str

    def encode(self, values: npt.NDArray[np.floating]) -> bytes: ...

    def decode(self, payload: bytes, count: int) -> npt.NDArray[np.float64]: ...

    def count(self, payload: bytes) -> int: ...


class _Cast:
    def __init__(self, wire_id: int, name: str, dtype: type[np.generic]) -> None:
        self.wire_id = wire_id
        self.name = name
        self.dtype = np.dtype(dtype)

    def encode(self, values: npt.NDArray[np.floating]) -> bytes:
        return np.ascontiguousarray(values, dtype=self.dtype).tobytes()

    def count(self, payload: bytes) -> int:
        """Values held by a payload whose count the message does not carry."""
        if len(payload) % self.dtype.itemsize:
            raise CodecError(f"{self.name} payload of {len(payload)} bytes is not whole values")
        return len(payload) // self.dtype.itemsize

    def decode(self, payload: bytes, count: int) -> npt.NDArray[np.float64]:
        if len(payload) != count * self.dtype.itemsize:
            raise CodecError(f"{self.name} payload is {len(payload)} bytes, expected {count * self.dtype.itemsize}")
        out = np.frombuffer(payload, dtype=self.dtype).astype(np.float64)
        if not np.isfinite(out).all():
            raise CodecError(f"{self.name} payload holds non-finite values")
        return out


FP32 = _Cast(0, "fp32", np.float32)
FP16 = _Cast(1, "fp16", np.float16)
FP64 = _Cast(2, "fp64", np.float64)  # state deltas: accumulators need every digit

CODECS: dict[str, Codec] = {c.name: c for c in (FP32, FP16, FP64)}
BY_WIRE_ID: dict[int, Codec] = {c.wire_id: c for c in CODECS.values()}


def codec_named(name: str) -> Codec:
    try:
        return CODECS[name]
    except KeyError:
        raise ValueError(f"unknown codec {name!r}; known: {', '.join(CODECS)}") from None
