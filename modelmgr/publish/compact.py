"""Compaction: a delta chain folded into a new full version, bit for bit what replaying the
chain gives (rows of later deltas win, tombstones remove keys for good), so serving loads
one image per shard and the chain's versions can be retired."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ctr.format import modelfile
from ctr.repository.versions import MANIFEST, Repository

Keys = npt.NDArray[np.uint64]
Rows = npt.NDArray[np.float32]


def image_rows(path: Path) -> tuple[Keys, Rows]:
    """Every key of an image with its row (keys in slot order)."""
    image = modelfile.load_image(path, mmap=False)
    keys, slots = image.items()
    return keys, image.gather(slots)


def fold(base: tuple[Keys, Rows], deltas: list[modelfile.Delta]) -> tuple[Keys, Rows]:
    """The rows a base image and its deltas leave, applied in order (within one delta its
    rows, then its tombstones, as serving applies them)."""
    keys, rows, steps = [base[0]], [base[1]], [np.zeros(base[0].shape[0], np.int64)]
    gone, gone_steps = [np.zeros(0, np.uint64)], [np.zeros(0, np.int64)]
    for step, d in enumerate(deltas, 1):
        keys.append(d.keys)
        rows.append(d.rows)
        steps.append(np.full(d.keys.shape[0], step, np.int64))
        gone.append(d.tombstones)
        gone_steps.append(np.full(d.tombstones.shape[0], step, np.int64))
    all_keys = np.concatenate(keys)[::-1]
    uniq, first = np.unique(all_keys, return_index=True)  # reversed: each key's last write
    wrote = np.concatenate(steps)[::-1][first]
    out_rows = np.concatenate(rows)[::-1][first]
    gk, gs = np.concatenate(gone), np.concatenate(gone_steps)
    last_gone = np.full(uniq.shape[0], -1, np.int64)
    if gk.shape[0] and uniq.shape[0]:
        order = np.argsort(gs, kind="stable")
        pos = np.searchsorted(uniq, gk[order])
        hit = (pos < uniq.shape[0]) & (uniq[np.minimum(pos, uniq.shape[0] - 1)] == gk[order])
        last_gone[pos[hit]] = gs[order][hit]  # later deletions overwrite earlier ones
    alive = last_gone < wrote
    return uniq[alive], out_rows[alive]


def stage_compacted(repo: Repository, version: int, staged: Path) -> dict[str, Any]:
    """Writes into `staged` the full version equal to delta `version` with its chain, and
    returns its manifest (numbered when published)."""
    m = repo.manifest(version)
    base = repo.manifest(int(m["base_version"]))
    chain = [(repo.path(v), repo.manifest(v)) for v in m["delta_chain"]]
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(parents=True)
    files = []
    for f in base["files"]:
        if f["role"] != "sparse_full":
            continue
        shard = modelfile.file_shard(f)
        deltas = [
            modelfile.read_delta(d / g["name"])
            for d, dm in chain
            for g in dm["files"]
            if g["role"] == "sparse_delta" and modelfile.file_shard(g) == shard
        ]
        keys, rows = fold(image_rows(repo.path(base["version"]) / f["name"]), deltas)
        path = staged / f["name"]
        modelfile.write_image(path, keys, rows)
        files.append(
            {**f, "size": path.stat().st_size, "sha256": modelfile.sha256_file(path), "rows": int(keys.shape[0]), "shard": shard}
        )
    for f in m["files"]:
        if f["role"] == "dense":
            shutil.copyfile(repo.path(version) / f["name"], staged / f["name"])
            files.append(f)
    manifest = {
        **{k: m[k] for k in ("model", "spec", "schema", "shard_count", "metrics", "evaluation", "export_id")},
        "version": 1,
        "kind": "full",
        "base_version": 1,
        "delta_chain": [],
        "compacts": [int(m["base_version"]), *m["delta_chain"]],
        "lineage_base_export": m.get("lineage_base_export") or base["export_id"],
        "files": files,
        "created": time.time(),
    }
    (staged / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest
