"""Offline scoring of a published version straight from its files, with plain numpy and the
reference formulas: what serving must agree with."""

from __future__ import annotations

import numpy as np
from safetensors.numpy import load_file

from ctr.data.batch import SampleBatch
from ctr.model.factorization import logit_reference
from ctr.repository.versions import Repository


def _columns(text: str) -> dict[str, tuple[int, int]]:
    out, at = {}, 0
    for part in text.split(","):
        name, dim = part.split(":")
        out[name] = (at, int(dim))
        at += int(dim)
    return out


def version_rows(repo: Repository, version: int) -> tuple[dict[int, np.ndarray], dict[str, tuple[int, int]]]:
    """key -> combined row, and the column layout, of a version (base image, then deltas)."""
    m = repo.manifest(version)
    base = repo.manifest(m["base_version"])
    rows: dict[int, np.ndarray] = {}
    columns: dict[str, tuple[int, int]] = {}
    for f in base["files"]:
        if f["role"] == "sparse_full":
            columns = _columns(f["columns"])
            width = sum(d for _, d in columns.values())
            raw = (repo.path(base["version"]) / f["name"]).read_bytes()
            # docs/model-format.md: buckets of S uint64 keys, then their S rows; S = 8
            # (wide), or 5 in 16 words for 1-word rows (line), told by the bucket's width
            n_buckets = int.from_bytes(raw[20:28], "little")
            bucket_words = (len(raw) - 64) // (4 * n_buckets)
            slots = 5 if width == 1 and bucket_words == 16 else 8
            assert bucket_words == (16 if slots == 5 else 8 * (2 + width))
            buckets = np.frombuffer(raw[64:], dtype=np.uint32).reshape(n_buckets, bucket_words)
            keys = buckets[:, : 2 * slots].copy().view(np.uint64).reshape(-1)
            vals = buckets[:, 2 * slots : 2 * slots + slots * width].copy().view(np.float32).reshape(-1, width)
            rows.update({int(k): vals[i] for i, k in enumerate(keys) if k})
    width = sum(d for _, d in columns.values())
    for v in m["delta_chain"]:
        for f in repo.manifest(v)["files"]:
            if f["role"] == "sparse_delta":
                raw = (repo.path(v) / f["name"]).read_bytes()
                count = int.from_bytes(raw[12:20], "little")
                keys = np.frombuffer(raw[64 : 64 + 8 * count], dtype=np.uint64)
                vals = np.frombuffer(raw[64 + 8 * count : 64 + 8 * count + 4 * width * count], dtype=np.float32).reshape(
                    count, width
                )
                rows.update({int(k): vals[i] for i, k in enumerate(keys)})
    return rows, columns


def offline_scores(repo: Repository, version: int, batch: SampleBatch) -> np.ndarray:
    m = repo.manifest(version)
    spec = m["spec"]
    rows, columns = version_rows(repo, version)
    dense = load_file(str(repo.path(version) / "dense.safetensors"))
    bias = float(dense["bias"][0])
    width = sum(d for _, d in columns.values())
    uniq, inv = np.unique(batch.keys, return_inverse=True)
    table = np.array([rows.get(int(k), np.zeros(width, np.float32)) for k in uniq], dtype=np.float64).reshape(-1, width)
    w = table[:, 0:1]
    kind, k = spec["type"], int(spec["k"])
    emb = "emb" if kind == "wdl" else "v"
    v = table[:, columns[emb][0] :] if emb in columns else np.zeros((uniq.shape[0], 0))
    z = []
    for a, b in zip(batch.offsets[:-1], batch.offsets[1:], strict=True):
        u, f, x = inv[a:b].astype(np.int64), batch.fields[a:b], batch.values[a:b].astype(np.float64)
        if kind in ("lr", "fm", "ffm"):
            z.append(logit_reference(kind, u, f, x, w, v, bias, k, bool(spec.get("norm", True))))
            continue
        pooled = np.zeros((len(spec["fields"]), k))
        np.add.at(pooled, f, v[u, :k] * x[:, None])
        logit = bias + float(np.sum(w[u, 0] * x))
        if kind == "deepfm":
            s = pooled.sum(axis=0)
            r = 1.0 / float(np.sum(x * x)) if spec.get("norm", True) else 1.0
            logit += r * 0.5 * float((s * s - (pooled * pooled).sum(axis=0)).sum())
        h = pooled.reshape(-1)
        n_layers = len(spec["hidden"]) + 1
        for i in range(n_layers):
            h = dense[f"mlp.{i}.weight"].astype(np.float64) @ h + dense[f"mlp.{i}.bias"]
            if i < n_layers - 1:
                h = np.maximum(h, 0.0)
        z.append(logit + float(h[0]))
    return 1.0 / (1.0 + np.exp(-np.array(z)))
