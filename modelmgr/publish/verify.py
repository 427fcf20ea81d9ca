"""Verification of an export folder: every listed file present, of the right size, with the
right sha256 and an intact payload CRC, and every shard accounted for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file

from ctr.format import modelfile
from ctr.model.spec import ModelSpec, ModelSpecError
from ctr.repository.schemas import ExportManifest


class VerificationError(ValueError):
    """An export that must not be published, with the reason."""


def verify_export(folder: Path, export: ExportManifest, checked: bool = False) -> None:
    """Raises VerificationError unless the files are sound. `checked`: their sizes and
    sha256 were checked already (modelfile.copy_checked, as the publisher copies them)."""
    spec = _verify_spec(export.model)
    seen: dict[tuple[str, str], set[int]] = {}
    for f in export.files:
        path = folder / f.name
        if not checked:
            if not path.is_file():
                raise VerificationError(f"{f.name}: listed but missing")
            size = path.stat().st_size
            if size != f.size:
                raise VerificationError(f"{f.name}: {size} bytes, export.json says {f.size}")
            if modelfile.sha256_file(path) != f.sha256:
                raise VerificationError(f"{f.name}: sha256 does not match export.json")
        if f.role == "dense":
            _verify_dense(path, spec)
            continue
        try:
            modelfile.verify(path)
            shard = f.shard if f.shard is not None else modelfile.shard_index(f.name)
            _finite_rows(path, f.role)
        except modelfile.ModelFileError as e:
            raise VerificationError(str(e)) from None
        seen.setdefault((f.table, f.role), set()).add(shard)
    for (table, role), got in seen.items():
        if got != set(range(export.shard_count)):
            raise VerificationError(f"table {table} ({role}): shards {sorted(got)} of {export.shard_count}")
    if not any(f.role == "dense" for f in export.files):
        raise VerificationError("no dense file (bias and MLP weights)")
    expected = "sparse_full" if export.kind == "full" else "sparse_delta"
    if expected not in {r for _, r in seen}:
        raise VerificationError(f"a {export.kind} export without {expected} files")


def _finite_rows(path: Path, role: str) -> None:
    """A NaN or infinite weight is refused: it would score NaN (a poisoned push, say)."""
    if role == "sparse_full":
        image = modelfile.load_image(path, mmap=False)
        rows = image.gather(image.items()[1])
    else:
        rows = modelfile.read_delta(path).rows
    bad = int((~np.isfinite(rows)).any(axis=1).sum()) if rows.size else 0
    if bad:
        raise VerificationError(f"{path.name}: {bad} rows hold NaN or infinite weights")


def _verify_dense(path: Path, spec: ModelSpec) -> None:
    """Readable, with the bias and every MLP tensor in the shape the spec declares."""
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise VerificationError(f"{path.name}: not a readable safetensors file: {e}") from None
    for name, shape in [("bias", (1,)), *spec.mlp_shapes()]:
        got = tensors.get(name)
        if got is not None and tuple(got.shape) == shape and not np.isfinite(got).all():
            raise VerificationError(f"{path.name}: tensor {name} holds NaN or infinite weights")
        if got is None or tuple(got.shape) != shape:
            found = "missing" if got is None else f"shaped {tuple(got.shape)}"
            raise VerificationError(f"{path.name}: tensor {name} is {found}, the model spec needs {shape}")


def _verify_spec(model: Any) -> ModelSpec:
    if not isinstance(model, dict):
        raise VerificationError("export.json: model is not an object")
    try:
        return ModelSpec.from_dict(model)
    except (ModelSpecError, ValueError, TypeError) as e:
        raise VerificationError(f"export.json: model spec: {e}") from None
