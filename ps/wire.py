"""Packing of keys and rows into bytes fields, shared by the client and the service."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ctr.format.varint import decode_sorted_keys, encode_sorted_keys
from ctr.model.spec import TableSpec
from protos import ps_pb2

KEYS_RAW_U64 = 0
KEYS_DELTA_VARINT = 1


class WireError(ValueError):
    """Bytes that do not decode to what their header announces."""


def encode_keys(keys: npt.NDArray[np.uint64], encoding: int) -> bytes:
    if encoding == KEYS_DELTA_VARINT:
        return bytes(encode_sorted_keys(np.ascontiguousarray(keys, dtype=np.uint64)))
    return np.ascontiguousarray(keys, dtype="<u8").tobytes()


def decode_keys(data: bytes, count: int, encoding: int) -> npt.NDArray[np.uint64]:
    if encoding == KEYS_RAW_U64:
        if len(data) != 8 * count:
            raise WireError(f"keys: {len(data)} bytes for key_count {count} (expected {8 * count})")
        return np.frombuffer(data, dtype="<u8").astype(np.uint64, copy=False)
    if encoding == KEYS_DELTA_VARINT:
        try:
            return decode_sorted_keys(np.frombuffer(data, dtype=np.uint8), count)  # type: ignore[no-any-return]
        except ValueError as e:
            raise WireError(f"keys: {e}") from None
    raise WireError(f"key_encoding: unknown value {encoding}")


def decode_rows(
    data: bytes, count: int, dim: int, dtype: type[np.float32] | type[np.float64] = np.float32
) -> npt.NDArray[np.float32] | npt.NDArray[np.float64]:
    size = np.dtype(dtype).itemsize
    if len(data) != size * count * dim:
        raise WireError(f"rows: {len(data)} bytes for {count} rows of dim {dim}")
    return np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<")).reshape(count, dim)


def table_spec(decl: ps_pb2.TableDecl) -> TableSpec:
    params: dict[str, object] = {"kind": decl.optimizer, **dict(decl.params)}
    return TableSpec.from_dict(
        {"name": decl.name, "kind": decl.kind, "dim": decl.dim, "update": decl.update, "optimizer": params}
    )


def table_decl(spec: TableSpec) -> ps_pb2.TableDecl:
    opt = {k: float(v) for k, v in spec.optimizer.to_dict().items() if k != "kind"}
    return ps_pb2.TableDecl(
        name=spec.name, kind=spec.kind, dim=spec.dim, update=spec.update, optimizer=spec.optimizer.kind, params=opt
    )
