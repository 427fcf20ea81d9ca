"""A shard's export: its sparse weights as one file whose rows hold every sparse table's
weights side by side (ctr/format/modelfile.py), a full image or a delta of the rows changed
since the last export with the keys evicted since then as tombstones."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from ctr.format import modelfile
from ps.api import ExportedFile
from ps.server.errors import ShardError
from ps.server.tables import SparseTable


def export_folder(root: Path | None, name: str) -> Path:
    """The folder of export `name` under the export root: the caller names a folder, it
    never gives a path, so a caller cannot make the shard write anywhere else."""
    if root is None:
        raise ShardError("this shard has no export root (--export-root): it writes no exports")
    if not modelfile.EXPORT_NAME.fullmatch(name):
        raise ShardError(f"directory: {name[:80]!r} is not an export name (letters, digits, '.', '_', '-'; no path)")
    return root / name


def changed_rows(tables: list[SparseTable], since: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
    """The keys any table updated after `since` (-1: every key) and their rows, each table's
    weights side by side (zeros where a table does not hold the key). A copy: the caller
    holds the shard's lock while this runs, not while the file is written."""
    changed = [t.updated_after(since)[0] for t in tables]
    keys = np.unique(np.concatenate(changed)) if changed else np.empty(0, np.uint64)
    parts = []
    for t in tables:
        ids = t.find(keys)
        w = np.zeros((keys.shape[0], t.dim), dtype=np.float32)
        present = ids >= 0
        w[present] = t.weights_at(ids[present])
        parts.append(w)
    rows = np.concatenate(parts, axis=1) if parts else np.zeros((0, 1), np.float32)
    return keys, rows


def write_export(
    directory: Path,
    shard: int,
    full: bool,
    keys: npt.NDArray[np.uint64],
    rows: npt.NDArray[np.float32],
    tombstones: npt.NDArray[np.uint64],
    columns: str,
) -> ExportedFile:
    """Writes shard `shard`'s file into `directory` and describes it for the manifest."""
    directory.mkdir(parents=True, exist_ok=True)
    if full:
        path, role = directory / f"shard{shard}-sparse.image", "sparse_full"
        modelfile.write_image(path, keys, rows)
    else:
        path, role = directory / f"shard{shard}-sparse.delta", "sparse_delta"
        modelfile.write_delta(path, keys, rows, tombstones)  # evicted keys: serving drops them
    return ExportedFile(path.name, "sparse", role, path.stat().st_size, modelfile.sha256_file(path), int(keys.shape[0]), columns)
