"""A local cache of parsed batches (`--batch-cache DIR`), the multi-level data cache of the
MSTopK paper: a second run over the same files (to tune hyper-parameters, say) reads the
parsed batches instead of parsing the text again.

An entry holds one whole file's batches, in the order the first run cut them, with their
stream positions, the file's bad lines (re-reported on every replay) and the fields the
file added to a growing field index. Its key is the file's identity (path, size, mtime,
inode) and everything that shapes parsing: the schema, the field index when the file
starts, the batch size, the line limit and the cache format. A file is recorded only when
read whole from its start, and written to a temporary folder renamed into place once the
file ends, so a crash never leaves an entry that looks complete. The cache keeps to a size
cap by dropping the entries used least recently.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ctr.data.batch import SampleBatch
from ctr.data.fields import FieldIndex
from ctr.data.schema import FeatureSchema
from trainer.input.source import Position

log = logging.getLogger("trainer")

# the entries' layout and what parsing means: 2 since quoted CSV fields, true/false labels and
# missing-number markers parse as they do now (an entry parsed before would replay the old tokens);
# 3 since a Parquet file's list columns train (an entry before holds none of their features)
FORMAT = 3
# (name, dtype) of the arrays stored per entry; offsets are kept as per-sample counts
ARRAYS = (("labels", np.float32), ("counts", np.int32), ("keys", np.uint64), ("fields", np.int32), ("values", np.float32))


@dataclass
class CachedBatch:
    batch: SampleBatch
    position: Position
    lines: int


@dataclass
class Recording:
    """A file being parsed from its start: its batches go to a temporary folder."""

    file: str
    key: str
    tmp: Path
    outs: dict[str, BinaryIO]
    fields_before: int
    dropped_before: int
    batches: list[dict[str, Any]] = field(default_factory=list)
    bad: list[tuple[int, str]] = field(default_factory=list)


class BatchCache:
    def __init__(self, root: Path, schema: FeatureSchema, batch_size: int, max_line_bytes: int, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        root.mkdir(parents=True, exist_ok=True)
        self._settings = json.dumps(
            {"format": FORMAT, "schema": schema.to_dict(), "batch": batch_size, "max_line": max_line_bytes}, sort_keys=True
        )
        self.hits = 0
        self.misses = 0
        self.writable = True  # False once a write failed (a full disk): entries are still read, none written

    def key(self, file: str, fields: FieldIndex) -> str | None:
        """The entry's name for the file as it is now and the index as it stands."""
        try:
            st = os.stat(file)
        except OSError:
            return None
        identity = [os.path.realpath(file), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev]
        index = [list(fields.names), fields.frozen, fields.cap]
        text = json.dumps([identity, index, self._settings])
        return hashlib.sha256(text.encode()).hexdigest()[:40]

    def has(self, file: str, fields: FieldIndex) -> bool:
        key = self.key(file, fields)
        return key is not None and (self.root / key / "meta.json").is_file()

    # -- replay --------------------------------------------------------------------------

    def replay(self, file: str, fields: FieldIndex) -> tuple[Iterator[CachedBatch], list[tuple[int, str]]] | None:
        """The file's batches and bad lines, with the index grown as the first run grew it;
        None when there is no usable entry."""
        key = self.key(file, fields)
        if key is None:
            return None
        entry = self.root / key
        if not (entry / "meta.json").is_file():
            return None
        try:
            meta = json.loads((entry / "meta.json").read_text())
            sizes = {name: (entry / f"{name}.bin").stat().st_size // np.dtype(dt).itemsize for name, dt in ARRAYS}
        except (OSError, ValueError) as e:
            log.warning("batch cache entry for %s unreadable (%s); parsing the file", file, e)
            return None
        if sizes != meta.get("sizes"):
            log.warning("batch cache entry for %s is truncated; parsing the file", file)
            return None
        for name in meta["new_fields"]:
            fields.add(name)
        fields.dropped += int(meta["dropped"])
        os.utime(entry / "meta.json")  # recently used
        self.hits += 1
        return self._batches(file, entry, meta), [(int(line), str(why)) for line, why in meta["bad"]]

    @staticmethod
    def _batches(file: str, entry: Path, meta: dict[str, Any]) -> Iterator[CachedBatch]:
        """Reads batch by batch, so a large file never sits in memory whole."""
        ins = {name: open(entry / f"{name}.bin", "rb") for name, _ in ARRAYS}  # noqa: SIM115 - closed below
        dtypes = dict(ARRAYS)
        try:
            for b in meta["batches"]:
                n, m = int(b["samples"]), int(b["features"])
                got = {
                    name: np.fromfile(fh, dtype=dtypes[name], count=n if name in ("labels", "counts") else m)
                    for name, fh in ins.items()
                }
                offsets = np.zeros(n + 1, dtype=np.int64)
                np.cumsum(got["counts"], out=offsets[1:])
                batch = SampleBatch(got["labels"], offsets, got["keys"], got["fields"], got["values"])
                yield CachedBatch(batch, Position(file, int(b["offset"]), int(b["line"])), int(b["lines"]))
        finally:
            for fh in ins.values():
                fh.close()

    # -- recording -----------------------------------------------------------------------

    def record(self, file: str, fields: FieldIndex) -> Recording | None:
        key = self.key(file, fields) if self.writable else None
        if key is None:
            return None
        self.misses += 1
        tmp = self.root / f".tmp-{key}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        outs: dict[str, BinaryIO] = {n: open(tmp / f"{n}.bin", "wb") for n, _ in ARRAYS}  # noqa: SIM115 - closed in finish/abort
        return Recording(file, key, tmp, outs, len(fields), fields.dropped)

    @staticmethod
    def add(rec: Recording, batch: SampleBatch, position: Position, lines: int) -> None:
        counts = np.diff(batch.offsets).astype(np.int32)
        for name, dtype in ARRAYS:
            arr = counts if name == "counts" else getattr(batch, name)
            rec.outs[name].write(np.ascontiguousarray(arr, dtype=dtype).tobytes())
        rec.batches.append(
            {
                "samples": len(batch),
                "features": int(batch.keys.shape[0]),
                "offset": position.offset,
                "line": position.line,
                "lines": lines,
            }
        )

    def finish(self, rec: Recording, fields: FieldIndex) -> None:
        """Commits the entry if the file is still the one that was read."""
        for out in rec.outs.values():
            out.close()
        if self.key(rec.file, _as_before(fields, rec.fields_before)) != rec.key:
            log.info("%s changed while it was read; not cached", rec.file)
            shutil.rmtree(rec.tmp, ignore_errors=True)
            return
        sizes = {name: (rec.tmp / f"{name}.bin").stat().st_size // np.dtype(dt).itemsize for name, dt in ARRAYS}
        meta = {
            "file": rec.file,
            "batches": rec.batches,
            "bad": rec.bad,
            "new_fields": list(fields.names[rec.fields_before :]),
            "dropped": fields.dropped - rec.dropped_before,
            "sizes": sizes,
        }
        (rec.tmp / "meta.json").write_text(json.dumps(meta))
        final = self.root / rec.key
        shutil.rmtree(final, ignore_errors=True)
        os.replace(rec.tmp, final)
        self._trim(keep=final)

    @staticmethod
    def abort(rec: Recording) -> None:
        for out in rec.outs.values():
            out.close()
        shutil.rmtree(rec.tmp, ignore_errors=True)

    def _trim(self, keep: Path) -> None:
        """Drops the least recently used entries while the cache is over its cap, but not
        the entry just written."""
        entries = []
        total = 0
        for d in self.root.iterdir():
            meta = d / "meta.json"
            if d.name.startswith(".") or not meta.is_file():
                continue
            size = sum(f.stat().st_size for f in d.iterdir())
            entries.append((meta.stat().st_mtime, size, d))
            total += size
        for _, size, d in sorted(entries):
            if total <= self.max_bytes:
                break
            if d == keep:
                continue
            shutil.rmtree(d, ignore_errors=True)
            total -= size
            log.info("batch cache over %.1f GB: dropped %s", self.max_bytes / 1e9, d.name)


def _as_before(fields: FieldIndex, count: int) -> FieldIndex:
    """The index as it stood when the file started (the key names that state)."""
    return FieldIndex(fields.names[:count], cap=fields.cap, frozen=fields.frozen)
