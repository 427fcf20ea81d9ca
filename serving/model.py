"""A servable version: per-shard hashmap images (mmapped) under an overlay of delta rows,
the dense weights, and the model rebuilt from the manifest alone (spec, fields, layout).

Each sparse row holds every sparse table's weights side by side (`columns` of the shard
files, e.g. `w:1,v:8`): a request's unique keys are looked up once, then scored by the
model's kernel (serving.kernels); wdl and deepfm run their MLP in torch (CUDA when present).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from safetensors.numpy import load_file

from ctr import modelfile
from ctr.hashmap import CompactHashMap
from ctr.hashmap_kernels import gather_rows
from ctr.modelspec import ModelSpec
from ctr.routing import shard_of
from serving.encoding import DecodedRequest
from serving.kernels import deep_inputs, ffm_score_items, fm_score_items, lr_score_items


def parse_columns(text: str) -> dict[str, tuple[int, int]]:
    """`w:1,v:8` -> {"w": (0, 1), "v": (1, 8)}: each table's first column and width."""
    out: dict[str, tuple[int, int]] = {}
    at = 0
    for part in filter(None, text.split(",")):
        name, _, dim = part.partition(":")
        if not dim.isdigit() or int(dim) < 1:
            raise ValueError(f"columns: {part!r} is not table:dim")
        out[name] = (at, int(dim))
        at += int(dim)
    return out


def spec_of(manifest: dict[str, Any]) -> ModelSpec:
    return ModelSpec.from_dict(manifest.get("spec") or {"type": "lr"})


@dataclass
class ServableModel:
    name: str
    version: int
    base_version: int
    chain: list[int]
    spec: ModelSpec
    columns: dict[str, tuple[int, int]]
    images: list[CompactHashMap]
    overlay: CompactHashMap
    dense: dict[str, npt.NDArray[np.float32]]
    keys: int
    net: Any = None  # ctr.deep.DeepCTR for wdl and deepfm
    loaded_at: float = field(default_factory=time.time)
    active: int = 0  # requests scoring with it now (serving.watcher.ModelWatcher.use)

    @property
    def bias(self) -> float:
        return float(self.dense["bias"][0])

    def rows(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.float32]:
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

    def score(self, req: DecodedRequest) -> npt.NDArray[np.float32]:
        rows = self.rows(req.keys)
        t = self.spec.type
        if t == "lr":
            contrib = np.ascontiguousarray(rows[:, 0]) * req.values
            return lr_score_items(req.context, req.item_offsets, req.item_indices, contrib, self.bias)  # type: ignore[no-any-return]
        emb = self.spec.embedding_table() or "v"
        v_at = self.columns[emb][0]
        k = self.spec.k
        if t == "fm":
            return fm_score_items(
                req.context, req.item_offsets, req.item_indices, req.values, rows, v_at, k, self.bias, self.spec.pair_norm
            )  # type: ignore[no-any-return]
        if t == "ffm":
            return ffm_score_items(  # type: ignore[no-any-return]
                req.context,
                req.item_offsets,
                req.item_indices,
                req.values,
                req.fields,
                rows,
                v_at,
                k,
                self.bias,
                self.spec.pair_norm,
            )
        pooled, partial = deep_inputs(
            req.context,
            req.item_offsets,
            req.item_indices,
            req.values,
            req.fields,
            rows,
            v_at,
            k,
            self.spec.field_count,
            self.bias,
            t == "deepfm",
            self.spec.pair_norm,
        )
        return self.net.predict(pooled, partial)  # type: ignore[no-any-return]


def _dense(folder: Path, files: list[dict[str, Any]]) -> dict[str, npt.NDArray[np.float32]]:
    names = [f["name"] for f in files if f["role"] == "dense"]
    if not names:
        raise ValueError("the version has no dense file")
    return {k: np.asarray(v, dtype=np.float32) for k, v in load_file(str(folder / names[0])).items()}


def _net(spec: ModelSpec, dense: dict[str, npt.NDArray[np.float32]]) -> Any:
    if not spec.is_dnn:
        return None
    from serving.deep import DeepScorer  # torch loads only for DNN models

    return DeepScorer(spec, dense)


def apply_delta(overlay: CompactHashMap, path: Path, images: list[CompactHashMap]) -> None:
    """Applies a delta's rows, then its tombstones (keys the PS evicted): they leave the
    overlay; one that a base image also holds keeps a zero row there, which masks the
    image's (mmapped, read-only) row until the next full version drops it."""
    d = modelfile.read_delta(path)
    if d.keys.shape[0]:
        slots = overlay.insert(d.keys)
        overlay.rows[slots] = d.rows
    if d.tombstones.shape[0]:
        overlay.delete(d.tombstones)
        in_image = np.zeros(d.tombstones.shape[0], dtype=np.bool_)
        for image in images:
            in_image |= image.find(d.tombstones) >= 0
        if in_image.any():
            slots = overlay.insert(d.tombstones[in_image])
            overlay.rows[slots] = 0.0  # reads as an absent key does


def _sparse_files(manifest: dict[str, Any], role: str) -> list[dict[str, Any]]:
    """The sparse files of a role in shard order: the manifest's index, never the name."""
    return sorted((f for f in manifest["files"] if f["role"] == role), key=modelfile.file_shard)


def extends(chain: list[int], manifest: dict[str, Any], model: ServableModel) -> bool:
    """`chain` (of `manifest`'s base) starts with `model`'s delta chain."""
    return model.base_version == manifest["base_version"] and chain[: len(model.chain)] == model.chain


def load(
    version_dir: Path,
    manifest: dict[str, Any],
    base_manifest: dict[str, Any],
    base_dir: Path,
    chain_dirs: list[tuple[Path, dict[str, Any]]],
    current: ServableModel | None,
    spare: ServableModel | None = None,
) -> ServableModel:
    """Builds the servable of a version; reuses current's images when the new version
    extends current's delta chain. Its overlay is then `spare`'s (a retired version of the
    same chain that no request uses any more: a double buffer, brought up to date with the
    deltas it lacks, so a delta costs its own rows and the one before), or else a copy of
    current's."""
    spec = spec_of(manifest)
    chain = list(manifest["delta_chain"])
    if current is not None and extends(chain, manifest, current):
        images, columns = current.images, current.columns
        if spare is not None and extends(current.chain, manifest, spare) and spare.images is current.images:
            overlay, todo = spare.overlay, chain_dirs[len(spare.chain) :]
            spare.overlay = CompactHashMap(overlay.row_words, capacity=8)  # it is the new version's now
        else:
            overlay = CompactHashMap(current.overlay.row_words, slots=current.overlay.slots.copy(), size=current.overlay.size)
            todo = chain_dirs[len(current.chain) :]
    else:
        shard_files = _sparse_files(base_manifest, "sparse_full")
        columns = parse_columns(shard_files[0].get("columns", "w:1")) if shard_files else {"w": (0, 1)}
        images = [modelfile.load_image(base_dir / f["name"]) for f in shard_files]
        width = sum(d for _, d in columns.values())
        if any(i.row_words != width for i in images):
            raise ValueError(f"an image's rows do not hold the {width} columns its manifest lists")
        overlay = CompactHashMap(width, capacity=1024)
        todo = chain_dirs
    for d, m in todo:
        for f in _sparse_files(m, "sparse_delta"):
            apply_delta(overlay, d / f["name"], images)
    dense = _dense(version_dir, manifest["files"])
    return ServableModel(
        name=str(manifest["model"]),
        version=int(manifest["version"]),
        base_version=int(manifest["base_version"]),
        chain=chain,
        spec=spec,
        columns=columns,
        images=images,
        overlay=overlay,
        dense=dense,
        keys=sum(i.size for i in images) + overlay.size,
        net=_net(spec, dense),
    )
