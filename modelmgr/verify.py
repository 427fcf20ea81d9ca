"""Verification of an export folder: every listed file present, of the right size, with the
right sha256 and an intact payload CRC, and every shard accounted for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from safetensors.numpy import load_file

from ctr import modelfile
from ctr.modelspec import ModelSpec, ModelSpecError


class VerificationError(ValueError):
    """An export that must not be published, with the reason."""


def verify_export(folder: Path, manifest: dict[str, Any]) -> None:
    files = manifest.get("files")
    shards = manifest.get("shard_count")
    if not isinstance(files, list) or not files or not isinstance(shards, int) or shards < 1:
        raise VerificationError("export.json lacks files or shard_count")
    spec = _verify_spec(manifest.get("model"))
    seen: dict[tuple[str, str], set[int]] = {}
    for f in files:
        name = str(f.get("name", ""))
        path = folder / name
        if not name or "/" in name or not path.is_file():
            raise VerificationError(f"{name or '<unnamed>'}: listed but missing")
        size = path.stat().st_size
        if size != f.get("size"):
            raise VerificationError(f"{name}: {size} bytes, manifest says {f.get('size')}")
        if modelfile.sha256_file(path) != f.get("sha256"):
            raise VerificationError(f"{name}: sha256 does not match the manifest")
        if f.get("role") == "dense":
            _verify_dense(path, spec)
            continue
        try:
            modelfile.verify(path)
        except modelfile.ModelFileError as e:
            raise VerificationError(str(e)) from None
        try:
            shard = modelfile.shard_index(name)
        except modelfile.ModelFileError as e:
            raise VerificationError(str(e)) from None
        seen.setdefault((str(f.get("table")), str(f.get("role"))), set()).add(shard)
    for (table, role), got in seen.items():
        if got != set(range(shards)):
            raise VerificationError(f"table {table} ({role}): shards {sorted(got)} of {shards}")
    if not any(f.get("role") == "dense" for f in files):
        raise VerificationError("no dense file (bias and MLP weights)")
    roles = {r for _, r in seen}
    expected = "sparse_full" if manifest.get("kind") == "full" else "sparse_delta"
    if expected not in roles:
        raise VerificationError(f"a {manifest.get('kind')} export without {expected} files")


def _verify_dense(path: Path, spec: ModelSpec) -> None:
    """Readable, with the bias and every MLP tensor in the shape the spec declares."""
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise VerificationError(f"{path.name}: not a readable safetensors file: {e}") from None
    for name, shape in [("bias", (1,)), *spec.mlp_shapes()]:
        got = tensors.get(name)
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
