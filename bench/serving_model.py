"""Builds what the serving benchmarks score: a published version of an LR, FM, FFM or
DeepFM model whose shard images hold every key of a set of 200-item x 500-feature requests
(100 shared context features, 20 fields x 5; 400 per item, 40 fields x 10; ids drawn from
a large range, so nearly every feature is its own key) plus random keys up to --keys."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from ctr.format import modelfile
from ctr.model.spec import ModelSpec
from ctr.repository.versions import DONE, MANIFEST, Repository
from ctr.routing import shard_of
from serving.client import RequestEncoder
from serving.request.encoding import EncodedRequest, decode, field_hash_ids

ITEMS, CTX_FIELDS, CTX_PER, ITEM_FIELDS, ITEM_PER = 200, 20, 5, 40, 10
FIELDS = [f"u{i}" for i in range(CTX_FIELDS)] + [f"i{i}" for i in range(ITEM_FIELDS)]


def requests(count: int, seed: int = 0, items: int = ITEMS) -> list[EncodedRequest]:
    rng = np.random.default_rng(seed)
    enc = RequestEncoder(None, FIELDS)
    out = []
    for _ in range(count):
        context = {f: rng.integers(1, 1 << 30, CTX_PER) for f in FIELDS[:CTX_FIELDS]}
        columns = {f: rng.integers(1, 1 << 30, (items, ITEM_PER)) for f in FIELDS[CTX_FIELDS:]}
        out.append(enc.encode_columns(columns, context))
    return out


def spec_for(model: str, k: int, hidden: tuple[int, ...]) -> ModelSpec:
    dnn = model in ("wdl", "deepfm")
    return ModelSpec(model, k=k if model != "lr" else 8, fields=tuple(FIELDS), hidden=hidden if dnn else ())


def dense_weights(spec: ModelSpec, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A zero bias and random MLP weights (none for LR, FM, FFM), as a version's dense file holds."""
    dense = {"bias": np.zeros(1, np.float32)}
    for name, shape in spec.mlp_shapes():
        dense[name] = rng.normal(0, 0.05, size=shape).astype(np.float32)
    return dense


def file_entry(path: Path, role: str, shard: int | None, rows: int, columns: str) -> dict[str, Any]:
    """A manifest's entry for a file written by hand (benchmarks and tests)."""
    return {
        "name": path.name,
        "table": "sparse" if shard is not None else "dense",
        "role": role,
        "size": path.stat().st_size,
        "sha256": modelfile.sha256_file(path),
        "rows": rows,
        "columns": columns if shard is not None else "",
        "shard": shard,
    }


def publish(
    repo: Repository, version: int, spec: ModelSpec, reqs: list[EncodedRequest], keys: int, shards: int, seed: int = 1
) -> int:
    """Writes version `version` (full) holding the requests' keys plus random ones up to
    `keys`; returns how many keys it holds."""
    rng = np.random.default_rng(seed)
    hashes = field_hash_ids(tuple(spec.fields))
    wanted = np.unique(np.concatenate([decode(r, spec.field_count, hashes).keys for r in reqs]))
    filler = rng.integers(1, 2**64 - 1, max(0, keys - wanted.shape[0]), dtype=np.uint64)
    all_keys = np.unique(np.concatenate([wanted, filler]))
    sparse = [t for t in spec.tables() if t.kind == "sparse"]  # as a PS export lays them out
    width = sum(t.dim for t in sparse)
    columns = ",".join(f"{t.name}:{t.dim}" for t in sparse)
    d = repo.path(version)
    d.mkdir(parents=True)
    owner = shard_of(all_keys, shards)
    files = []
    for s in range(shards):
        k = all_keys[owner == s]
        rows = rng.normal(0, 0.05, size=(k.shape[0], width)).astype(np.float32)
        path = d / f"shard{s}-sparse.image"
        modelfile.write_image(path, k, rows)
        files.append(file_entry(path, "sparse_full", s, int(k.shape[0]), columns))
    save_file(dense_weights(spec, rng), str(d / "dense.safetensors"))
    files.append(file_entry(d / "dense.safetensors", "dense", None, 1, ""))
    manifest = {
        "model": repo.model,
        "version": version,
        "kind": "full",
        "base_version": version,
        "delta_chain": [],
        "previous": None,
        "export_id": f"{version:020d}",
        "spec": {"name": repo.model, **spec.to_dict()},
        "shard_count": shards,
        "files": files,
        "metrics": {},
        "created": time.time(),
    }
    raw = json.dumps(manifest, indent=1).encode()
    (d / MANIFEST).write_bytes(raw)
    (d / DONE).write_text(hashlib.sha256(raw).hexdigest())
    return int(all_keys.shape[0])
