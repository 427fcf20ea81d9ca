"""A servable version: per-shard hashmap images (mmapped) under an overlay of delta rows,
the dense weights, and the model rebuilt from the manifest alone (spec, fields, layout).

Each sparse row holds every sparse table's weights side by side (`columns` of the shard
files, e.g. `w:1,v:8`): a request's unique keys are looked up once, then scored by the
model family's kernel (ctr.model.registry); wdl and deepfm run their MLP in torch (CUDA when present).
Lookups and the LR/FM/FFM kernels release the GIL, and a large request's keys and items are
split across the scoring threads (serving.scoring.parallel).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from safetensors.numpy import load_file

from ctr.data.schema import FeatureSchema, transform_digest
from ctr.format import modelfile
from ctr.format.bucket_kernels import MAX_SHARDS, by_owner, lookup_at, lookup_rows, zero_unfound
from ctr.format.bucket_map import NO_FILTER, BucketMap
from ctr.model.family import ModelFamily, Request
from ctr.model.first_use import in_first_use_order
from ctr.model.partial_sums import partial_sums
from ctr.model.spec import ModelSpec
from ctr.runtime.extras import require
from serving.config import DnnBatching
from serving.loading.bucket_locate import ROWS_AT, SLOT_SHIFT, locate
from serving.loading.overlay import Overlay
from serving.loading.shard_part import WHOLE, ShardPart
from serving.request.encoding import DecodedRequest
from serving.scoring.parallel import SERIAL, Splitter

NO_BATCHING = DnnBatching("off")
Located = tuple[tuple[npt.NDArray[np.float32], ...], npt.NDArray[np.int64], npt.NDArray[np.int64], int, int]
PART_WORK = 1 << 18  # multiply-adds worth a range of items on another thread
# the FFM kernel takes the located tables as one tuple, compiled per length: past this many
# shard files held, rows are copied instead (one table) rather than compiling a huge switch
MAX_LOCATED_TABLES = 32


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


def check_columns(columns: dict[str, tuple[int, int]], spec: ModelSpec) -> None:
    """The shard files' columns hold every sparse table of the spec at its width: the
    kernels index rows by the spec's k and fields, so a mismatch must stop the load."""
    for table in spec.tables():
        if table.kind != "sparse":
            continue
        if table.name not in columns:
            raise ValueError(f"columns: the {spec.type} model's table {table.name!r} is not in the shard files")
        if columns[table.name][1] != table.dim:
            raise ValueError(f"columns: table {table.name!r} is {columns[table.name][1]} wide; the spec needs {table.dim}")
    # the kernels read w at column 0 and the tables after it in the spec's order: another
    # order (a shard that exported its tables as they came from its store) is refused, not scored
    at = 0
    for table in spec.tables():
        if table.kind == "sparse":
            if columns[table.name][0] != at:
                order = ",".join(f"{n}:{d}" for n, (_, d) in sorted(columns.items(), key=lambda c: c[1][0]))
                raise ValueError(f"columns: {order} is not the {spec.type} model's table order")
            at += table.dim


def spec_of(manifest: dict[str, Any]) -> ModelSpec:
    return ModelSpec.from_dict(manifest.get("spec") or {"type": "lr"})


def schema_of(manifest: dict[str, Any]) -> FeatureSchema:
    """The feature transform the version was trained under (the default kv schema when
    the manifest has none: a stream whose format was never told)."""
    raw = manifest.get("schema") or {}
    return FeatureSchema.from_dict(raw) if isinstance(raw, dict) else FeatureSchema()


@dataclass
class ServableModel:
    name: str
    version: int
    base_version: int
    chain: list[int]
    spec: ModelSpec
    columns: dict[str, tuple[int, int]]
    images: list[BucketMap]
    overlay: Overlay
    dense: dict[str, npt.NDArray[np.float32]]
    keys: int
    net: Any = None  # ctr.model.mlp.DeepCTR for wdl and deepfm
    splitter: Splitter = SERIAL
    shard_count: int = 1  # the version's shard files: keys are routed over these
    held: tuple[int, ...] = (0,)  # which of them `images` holds, in order (serving.loading.shard_part)
    part: ShardPart = WHOLE
    loaded_at: float = field(default_factory=time.time)
    active: int = 0  # requests scoring with it now (serving.loading.watcher.ModelWatcher.use)
    schema: FeatureSchema = field(default_factory=FeatureSchema)  # how raw values became features

    @functools.cached_property
    def transform_digest(self) -> int:
        """What a request encoded for this version's fields and transform carries."""
        return transform_digest(tuple(self.spec.fields), self.schema)

    @property
    def bias(self) -> float:
        return float(self.dense["bias"][0])

    @property
    def family(self) -> ModelFamily:
        return self.spec.family

    def rows(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.float32]:
        """Rows for keys (zero rows for absent ones): one probe per key. A key the overlay's
        filter may hold is looked up there first (newest deltas); the rest go to the image
        of the shard that owns them. `out` starts uninitialized and only the absent keys'
        rows are zeroed after (bucket_kernels.zero_unfound), not all of it first."""
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        overlay = self.overlay
        out = np.empty((keys.shape[0], overlay.row_words), dtype=np.uint32)
        found = np.zeros(keys.shape[0], dtype=np.bool_)
        self._search(
            keys,
            overlay,
            lambda lo, hi: lookup_rows(overlay.map.table, keys, lo, hi, overlay.bits, out, found),
            lambda _, image, at: lookup_at(image.table, keys, at, out, found),
        )
        zero_unfound(out, found)
        return out.view(np.float32)

    def locate(self, keys: npt.NDArray[np.uint64]) -> Located:
        """Where each key's row sits, rows not copied (ctr.format.located.row_at): table 0 is
        the overlay (its filter first, the newest deltas), then the images, each for the
        keys its shard owns that the overlay does not hold; src -1 where absent."""
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        overlay = self.overlay
        src = np.full(keys.shape[0], -1, dtype=np.int64)
        slot = np.empty(keys.shape[0], dtype=np.int64)
        everywhere = np.empty(0, dtype=np.int64)  # `at` empty: positions lo..hi
        self._search(
            keys,
            overlay,
            lambda lo, hi: locate(overlay.map.table, keys, everywhere, lo, hi, overlay.bits, 0, src, slot),
            lambda tag, image, at: locate(image.table, keys, at, 0, at.shape[0], NO_FILTER, tag, src, slot),
        )
        tables = tuple(_float_rows(t) for t in (overlay.map.table, *(i.table for i in self.images)))
        return tables, src, slot, SLOT_SHIFT, ROWS_AT

    def _search(
        self,
        keys: npt.NDArray[np.uint64],
        overlay: Overlay,
        in_overlay: Callable[[int, int], None],
        in_image: Callable[[int, BucketMap, npt.NDArray[np.int64]], None],
    ) -> None:
        """The order every key is searched in, over ranges of keys split across the scoring
        threads: in_overlay(lo, hi) first (the newest deltas, when `overlay` holds any), then
        in_image(tag, image, positions) for each image held (tag 1, 2, ...) with the
        positions in [lo, hi) of the keys its shard owns."""

        def part(lo: int, hi: int) -> None:
            if overlay.size:
                in_overlay(lo, hi)
            if not self.images:
                return
            order, bounds = by_owner(keys, lo, hi, self.shard_count)
            for tag, (s, image) in enumerate(zip(self.held, self.images, strict=True), start=1):
                in_image(tag, image, order[bounds[s] : bounds[s + 1]])

        self.splitter.run(part, keys.shape[0])

    def score(self, req: Request, rows: npt.NDArray[np.float32] | None = None) -> npt.NDArray[np.float32]:
        """Scores the request's items; `rows` are its dictionary's rows when a router
        fetched them from the shards (else they are looked up here)."""
        return self.family.score(self, req if rows is not None else self._in_read_order(req), rows)

    def _in_read_order(self, req: Request) -> Request:
        """The request whose rows this version looks up: renumbered in the order its items
        read them where the family reads wide rows item by item (ctr.model.first_use)."""
        return in_first_use_order(req) if self.family.first_use else req

    @property
    def locates_in_place(self) -> bool:
        """Whether a request's rows are read where they sit (FFM's wide rows): up to a few images."""
        return len(self.images) < MAX_LOCATED_TABLES

    def partial(self, req: DecodedRequest) -> npt.NDArray[np.float32]:
        """LR and FM partial sums per item over the request's features (ctr.model.partial_sums)."""
        k = self.family.partial_factors(self.spec)
        used = self._in_read_order(req)
        rows = self.rows(used.keys)
        v_at = self.columns[self.spec.embedding_table() or "v"][0] if k else 0
        return partial_sums(used.context, used.item_offsets, used.item_indices, used.values, rows, v_at, k)  # type: ignore[no-any-return]

    def per_items(
        self,
        req: Request,
        work_per_feature: int,
        kernel: Callable[[npt.NDArray[np.int64], int], npt.NDArray[np.float32]],
    ) -> npt.NDArray[np.float32]:
        """kernel(item offsets, first item) over ranges of items, split across the scoring
        threads when the request is large enough to repay the hand-off (the context part
        is recomputed per range: it is small)."""
        offsets = req.item_offsets
        n = offsets.shape[0] - 1
        out = np.empty(n, dtype=np.float32)

        def part(lo: int, hi: int) -> None:
            out[lo:hi] = kernel(offsets[lo : hi + 1], lo)

        per_item = max(1, req.item_indices.shape[0] // max(1, n)) * work_per_feature
        self.splitter.run(part, n, min_part=max(1, PART_WORK // per_item))
        return out


def _float_rows(table: npt.NDArray[np.uint32]) -> npt.NDArray[np.float32]:
    """A bucket table's words as float32, read-only: one array type for the overlay's
    table and the mmapped images', so the kernels take them as one tuple."""
    view = np.asarray(table).view(np.float32)
    view.flags.writeable = False
    return view


def _dense(folder: Path, files: list[dict[str, Any]]) -> dict[str, npt.NDArray[np.float32]]:
    names = [f["name"] for f in files if f["role"] == "dense"]
    if not names:
        raise ValueError("the version has no dense file")
    return {k: np.asarray(v, dtype=np.float32) for k, v in load_file(str(folder / names[0])).items()}


def _net(spec: ModelSpec, dense: dict[str, npt.NDArray[np.float32]], batching: DnnBatching) -> Any:
    if not spec.is_dnn:
        return None
    torch = require("torch")  # torch loads only for DNN models

    # one torch thread: torch's OpenMP pool spins after every call, taking the cores from
    # the scoring threads' decoding and lookups (a 200 x 500 DeepFM request on two cores:
    # 9.1 ms in process, 5.7-6.4 ms with one torch thread, whose MLP takes 0.65 ms instead
    # of 0.36; splitting the MLP across the scoring threads gained nothing)
    torch.set_num_threads(1)
    from serving.scoring import batcher
    from serving.scoring.mlp import DeepScorer

    on = batching.enabled(torch.cuda.is_available())
    shared = batcher.shared(batching.wait_s, batching.max_items) if on else None
    return DeepScorer(spec, dense, shared, batching.cuda_graphs, batching.max_items)


def apply_delta(overlay: Overlay, path: Path, images: list[BucketMap]) -> None:
    """Applies a delta's rows, then its tombstones (keys the PS evicted): they leave the
    overlay; one that a base image also holds keeps a zero row there, which masks the
    image's (mmapped, read-only) row until the next full version drops it."""
    d = modelfile.read_delta(path)
    if d.keys.shape[0]:
        overlay.put(d.keys, d.rows)
    if d.tombstones.shape[0]:
        overlay.delete(d.tombstones)
        in_image = np.zeros(d.tombstones.shape[0], dtype=np.bool_)
        for image in images:
            in_image |= image.find(d.tombstones) >= 0
        if in_image.any():
            masked = d.tombstones[in_image]
            overlay.put(masked, np.zeros((masked.shape[0], overlay.row_words), dtype=np.float32))  # reads as absent


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
    splitter: Splitter = SERIAL,
    part: ShardPart = WHOLE,
    batching: DnnBatching = NO_BATCHING,
) -> ServableModel:
    """Builds the servable of a version; reuses current's images when the new version
    extends current's delta chain. Its overlay is then `spare`'s (a retired version of the
    same chain that no request uses any more: a double buffer, brought up to date with the
    deltas it lacks, so a delta costs its own rows and the one before), or else a copy of
    current's. With a `part`, only the shard files it holds are loaded; `batching` says
    whether a wdl or deepfm version runs its MLP through the process's dynamic batcher."""
    spec = spec_of(manifest)
    chain = list(manifest["delta_chain"])
    all_files = _sparse_files(base_manifest, "sparse_full")
    shard_count = int(base_manifest.get("shard_count") or len(all_files) or 1)
    if not 1 <= shard_count <= MAX_SHARDS:
        raise ValueError(f"manifest: shard_count {shard_count} is not in 1..{MAX_SHARDS}")
    part.check(shard_count)
    held = tuple(modelfile.file_shard(f) for f in all_files if part.holds(modelfile.file_shard(f)))
    if current is not None and extends(chain, manifest, current) and current.held == held:
        images, columns = current.images, current.columns
        if spare is not None and extends(current.chain, manifest, spare) and spare.images is current.images:
            overlay, todo = spare.overlay, chain_dirs[len(spare.chain) :]
            spare.overlay = Overlay(overlay.row_words)  # it is the new version's now
        else:
            overlay = current.overlay.copy()
            todo = chain_dirs[len(current.chain) :]
    else:
        columns = parse_columns(all_files[0].get("columns", "w:1")) if all_files else {"w": (0, 1)}
        images = [modelfile.load_image(base_dir / f["name"]) for f in all_files if modelfile.file_shard(f) in held]
        check_columns(columns, spec)
        width = sum(d for _, d in columns.values())
        if any(i.row_words != width for i in images):
            raise ValueError(f"an image's rows do not hold the {width} columns its manifest lists")
        overlay = Overlay(width)
        todo = chain_dirs
    for d, m in todo:
        for f in _sparse_files(m, "sparse_delta"):
            if modelfile.file_shard(f) in held:
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
        net=_net(spec, dense, batching),
        splitter=splitter,
        shard_count=shard_count,
        held=held,
        part=part,
        schema=schema_of(manifest),
    )
