"""A servable version: per-shard hashmap images (mmapped) under an overlay of delta rows."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ctr import modelfile
from ctr.hashmap import CompactHashMap
from ctr.hashmap_kernels import gather_rows
from ctr.routing import shard_of


@dataclass
class ServableModel:
    name: str
    version: int
    base_version: int
    chain: list[int]
    dim: int
    images: list[CompactHashMap]
    overlay: CompactHashMap
    bias: float
    keys: int
    loaded_at: float = field(default_factory=time.time)

    def weights(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.float32]:
        """Rows for keys: overlay first (newest deltas), then the owning shard's image."""
        slots = self.overlay.find(keys)
        out: npt.NDArray[np.float32] = gather_rows(self.overlay.rows, slots)
        rest = np.flatnonzero(slots < 0)
        if rest.shape[0] == 0:
            return out
        rk = keys[rest]
        owner = shard_of(rk, len(self.images)) if len(self.images) > 1 else np.zeros(rk.shape[0], np.int64)
        for s, image in enumerate(self.images):
            sel = np.flatnonzero(owner == s)
            if sel.shape[0]:
                out[rest[sel]] = gather_rows(image.rows, image.find(rk[sel]))
        return out


def _bias(folder: Path, files: list[dict[str, Any]], table: str) -> float:
    parts = [modelfile.read_dense(folder / f["name"]) for f in files if f["role"] == "dense" and f["table"] == table]
    values = np.concatenate([v for _, v in sorted(parts, key=lambda p: p[0])]) if parts else np.zeros(1)
    return float(values[0]) if values.shape[0] else 0.0


def apply_delta(overlay: CompactHashMap, path: Path) -> None:
    d = modelfile.read_delta(path)
    if d.keys.shape[0]:
        slots = overlay.insert(d.keys)
        overlay.rows[slots] = d.rows
    if d.tombstones.shape[0]:  # an evicted key reads as a zero row, as an absent key does
        slots = overlay.insert(d.tombstones)
        overlay.rows[slots] = 0.0


def load(
    version_dir: Path,
    manifest: dict[str, Any],
    base_manifest: dict[str, Any],
    base_dir: Path,
    chain_dirs: list[tuple[Path, dict[str, Any]]],
    current: ServableModel | None,
) -> ServableModel:
    """Builds the servable of a version; reuses current's images and overlay when the new
    version extends current's delta chain, so a delta costs only its own rows."""
    spec = manifest.get("spec") or {}
    table = str(spec.get("table", "w"))
    chain = list(manifest["delta_chain"])
    if current is not None and current.base_version == manifest["base_version"] and chain[: len(current.chain)] == current.chain:
        images = current.images
        overlay = CompactHashMap(current.overlay.row_words, slots=current.overlay.slots.copy(), size=current.overlay.size)
        todo = chain_dirs[len(current.chain) :]
    else:
        shard_files = sorted(
            (f for f in base_manifest["files"] if f["role"] == "sparse_full" and f["table"] == table),
            key=lambda f: f["name"],
        )
        images = [modelfile.load_image(base_dir / f["name"]) for f in shard_files]
        dim = images[0].row_words if images else int(spec.get("dim", 1))
        overlay = CompactHashMap(dim, capacity=1024)
        todo = chain_dirs
    for d, m in todo:
        for f in sorted(m["files"], key=lambda f: f["name"]):
            if f["role"] == "sparse_delta" and f["table"] == table:
                apply_delta(overlay, d / f["name"])
    bias = _bias(version_dir, manifest["files"], str(spec.get("bias_table", "bias")))
    return ServableModel(
        name=str(manifest["model"]),
        version=int(manifest["version"]),
        base_version=int(manifest["base_version"]),
        chain=chain,
        dim=overlay.row_words,
        images=images,
        overlay=overlay,
        bias=bias,
        keys=sum(i.size for i in images) + overlay.size,
    )
