"""Asks the PS shards for full and delta exports and writes each export's manifest.

An export is a folder `<export_dir>/<id>/` with the shards' files, `export.json`
(kind, base and previous export, files with sizes and sha256, model spec, schema,
training metrics) and a `READY` marker written last.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ps.client import PSClient


class Exporter:
    def __init__(
        self, client: PSClient, export_dir: Path, model: dict[str, Any], schema: dict[str, Any], full_every: int
    ) -> None:
        self.client = client
        self.export_dir = export_dir
        self.model = model
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
        manifest = {
            "id": export_id,
            "kind": "full" if full else "delta",
            "base": None if full else self.base,
            "previous": None if full else self.previous,
            "model": self.model,
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
