"""Asks the PS shards for full and delta exports and writes each export's manifest.

An export is a folder `<export_dir>/<id>/` with the shards' sparse files, `dense.safetensors`
(every dense table with its name and shape: the bias, and the MLP's layers for wdl and
deepfm), `export.json` (kind, base and previous export, files with sizes and sha256, the
model spec and field list, schema, training metrics) and a `READY` marker written last.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from ctr.fields import FieldIndex
from ctr.modelfile import sha256_file
from ctr.modelspec import ModelSpec
from ps.client import ExportedFile, PSClient

DENSE_FILE = "dense.safetensors"


def dense_tensors(client: PSClient, spec: ModelSpec) -> dict[str, np.ndarray]:
    """The dense tables as named tensors: `bias` [1], then `mlp.<i>.weight|bias` by shape."""
    out = {"bias": np.ascontiguousarray(client.pull_dense("bias"), dtype=np.float32).reshape(1)}
    if spec.is_dnn:
        flat = client.pull_dense("mlp")
        at = 0
        for name, shape in spec.mlp_shapes():
            size = int(np.prod(shape))
            out[name] = np.ascontiguousarray(flat[at : at + size].reshape(shape), dtype=np.float32)
            at += size
    return out


class Exporter:
    def __init__(
        self,
        client: PSClient,
        export_dir: Path,
        name: str,
        spec: ModelSpec,
        fields: FieldIndex,
        schema: dict[str, Any],
        full_every: int,
    ) -> None:
        self.client = client
        self.export_dir = export_dir
        self.name = name
        self.spec = spec
        self.fields = fields
        self.schema = schema
        self.full_every = max(1, full_every)
        self.count = 0
        self.base: str | None = None
        self.previous: str | None = None
        export_dir.mkdir(parents=True, exist_ok=True)

    def export(self, metrics: dict[str, float], force_full: bool = False) -> str:
        """Writes one export and returns its id; every full_every-th export is a full one."""
        full = force_full or self.base is None or self.count % self.full_every == 0
        export_id = f"{time.time_ns():020d}"
        folder = self.export_dir / export_id
        files, seqs = self.client.export(full, folder)
        dense_path = folder / DENSE_FILE
        save_file(dense_tensors(self.client, self.spec), str(dense_path))
        files.append(ExportedFile(DENSE_FILE, "dense", "dense", dense_path.stat().st_size, sha256_file(dense_path), 1))
        manifest = {
            "id": export_id,
            "kind": "full" if full else "delta",
            "base": None if full else self.base,
            "previous": None if full else self.previous,
            "model": {"name": self.name, **self.spec.to_dict(), "fields": list(self.fields.names)},
            "schema": self.schema,
            "files": [asdict(f) for f in files],
            "shard_count": self.client.n,
            "shard_seqs": seqs,
            "metrics": {k: (None if v != v else v) for k, v in metrics.items()},  # NaN -> null
            "created": time.time(),
        }
        tmp = folder / "export.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=1))
        os.replace(tmp, folder / "export.json")
        (folder / "READY").write_text(export_id)
        if full:
            self.base = export_id
        self.previous = export_id
        self.count += 1
        return export_id
