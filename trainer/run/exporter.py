"""Asks the PS shards for full and delta exports and writes each export's manifest.

An export is a folder `<export_dir>/<id>/` with the shards' sparse files, `dense.safetensors`
(every dense table with its name and shape: the bias, and the MLP's layers for wdl and
deepfm), `holdout.npz`, `export.json` (kind, base and previous export, files with sizes and
sha256, the model spec and field list, schema, training metrics, the holdout) and a `READY`
marker written last.

The holdout is what the model manager judges the export on: the `holdout` samples the
trainer reads right after the export, parsed, which the exported model has not trained on.
So an export becomes READY only once that many samples have come (or the next export is
taken, or the run ends). It never holds a sample the model trained on: when the stream
ends first it holds fewer (`seen` stays 0; the field is kept for exports of older
versions), and a finite stream's last export gets the stream's tail, which the trainer
holds back from training for it (trainer.run.loop).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from safetensors.numpy import save_file

from ctr.data.batch import SampleBatch
from ctr.data.fields import FieldIndex
from ctr.format.modelfile import sha256_file
from ctr.model.spec import ModelSpec
from ctr.repository import holdout
from ps.api import ExportedFile, ShardRestarted, StoppedWhileUnreachable
from ps.client import PSClient
from trainer.metrics import EXPORT_FAILURES, EXPORT_HOLDOUT_NEEDED, EXPORT_SECONDS, EXPORTS_READY

log = logging.getLogger("trainer")

DENSE_FILE = "dense.safetensors"
ID_DIGITS = 20  # an export id: nanoseconds, zero-padded, so that name order is time order


class ExportFailed(RuntimeError):
    """An export could not be written; training goes on and the next export is full."""


def dense_tensors(
    client: PSClient, spec: ModelSpec, mlp: dict[str, npt.NDArray[np.float32]] | None = None
) -> dict[str, np.ndarray]:
    """The dense tables as named tensors: `bias` [1], then `mlp.<i>.weight|bias` by shape;
    the MLP's from `mlp` where the worker holds it (hybrid training), else from the shards."""
    out = {"bias": np.ascontiguousarray(client.pull_dense("bias"), dtype=np.float32).reshape(1)}
    if spec.is_dnn and mlp is not None:
        for name, shape in spec.mlp_shapes():
            if name not in mlp or tuple(mlp[name].shape) != tuple(shape):
                raise ValueError(f"the worker's MLP has no {name} of shape {tuple(shape)}")
            out[name] = np.ascontiguousarray(mlp[name], dtype=np.float32)
    elif spec.is_dnn:
        flat = client.pull_dense("mlp")
        at = 0
        for name, shape in spec.mlp_shapes():
            size = int(np.prod(shape))
            out[name] = np.ascontiguousarray(flat[at : at + size].reshape(shape), dtype=np.float32)
            at += size
    return out


@dataclass
class _Pending:
    """An export waiting for its holdout."""

    folder: Path
    manifest: dict[str, Any]
    fresh: list[SampleBatch] = field(default_factory=list)
    count: int = 0


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
        holdout: int = 2000,
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
        self.holdout = max(0, holdout)  # samples per holdout
        self._pending: list[_Pending] = []
        self._last_id = 0
        export_dir.mkdir(parents=True, exist_ok=True)

    def observe(self, batch: SampleBatch) -> None:
        """A batch read and about to be trained: it goes into the holdouts of the exports
        waiting for samples (the exported models have not trained on it)."""
        if not len(batch) or not self.holdout:
            return
        for p in self._pending:
            take = min(len(batch), self.holdout - p.count)
            if take > 0:
                p.fresh.append(holdout.head(batch, take))
                p.count += take
        while self._pending and self._pending[0].count >= self.holdout:
            self._finish(self._pending.pop(0))
        EXPORT_HOLDOUT_NEEDED.set(self.needed)

    @property
    def waiting(self) -> bool:
        """An export still waits for its holdout: the next one waits too, so no export goes
        out with less evidence than `holdout` samples while the stream flows."""
        return bool(self._pending)

    @property
    def needed(self) -> int:
        """Samples the export waiting for its holdout still needs (0: none waits). One waits
        at a time: an export closes the one before it."""
        return max((self.holdout - p.count for p in self._pending), default=0)

    def close(self) -> None:
        """Every export waiting for its holdout gets what there is: at the run's end, and
        before a recovery reads the stream again from a cut (samples they trained on)."""
        while self._pending:
            self._finish(self._pending.pop(0))
        EXPORT_HOLDOUT_NEEDED.set(0)

    def _finish(self, p: _Pending) -> None:
        """Writes the export's holdout and READY; one that cannot be written (a full export
        disk) is removed, counted and logged, and the next export is a full one."""
        try:
            self._write_holdout(p)
            EXPORTS_READY.inc()
        except OSError as e:
            shutil.rmtree(p.folder, ignore_errors=True)
            self.base = None
            EXPORT_FAILURES.inc()
            log.error("export %s removed: its holdout could not be written (%s); the next export is full", p.folder.name, e)

    def _write_holdout(self, p: _Pending) -> None:
        path = p.folder / holdout.HOLDOUT_FILE
        holdout.write_batches(path, p.fresh)
        p.manifest["holdout"] = {
            "name": path.name,
            "size": path.stat().st_size,
            "sha256": sha256_file(path),
            "samples": p.count,
            "seen": 0,  # samples the model trained on: never, now
        }
        tmp = p.folder / "export.json.tmp"
        tmp.write_text(json.dumps(p.manifest, indent=1))
        os.replace(tmp, p.folder / "export.json")
        (p.folder / "READY").write_text(str(p.manifest["id"]))

    def export(self, metrics: dict[str, float], mlp: dict[str, npt.NDArray[np.float32]] | None = None) -> str:
        """Writes one export and returns its id; every full_every-th export is a full one.
        `mlp`: the MLP's tensors where the worker holds them (else read from the shards).
        One that cannot be written (a full or read-only export disk, a shard that failed to
        write its part) is removed and raises ExportFailed; the next export is then a full
        one, since the shards' delta state may have moved past what was written."""
        try:
            return self._export(metrics, mlp)
        except (ShardRestarted, StoppedWhileUnreachable):
            raise  # the training path recovers from these
        except Exception as e:  # noqa: BLE001 - an export that fails must not stop training
            self.base = None  # the next one is full: no delta builds on what did not land
            raise ExportFailed(f"{type(e).__name__}: {e}") from e

    def _export(self, metrics: dict[str, float], mlp: dict[str, npt.NDArray[np.float32]] | None) -> str:
        full = self.base is None or self.count % self.full_every == 0
        started = time.perf_counter()
        export_id = self._next_id()
        folder = self.export_dir / export_id
        try:
            return self._write(folder, export_id, full, metrics, started, mlp)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)  # a manager never sees half an export (no READY)
            raise

    def last_exported_samples(self) -> int:
        """The stream's samples at the newest READY export in the folder of this model (0:
        none): a run taken up at an older cut replays the stream up to there."""
        for export_id in sorted(self._ids_in_folder(), reverse=True):
            folder = self.export_dir / export_id
            if not (folder / "READY").exists():
                continue  # still waiting for its holdout, or cut short: never published
            try:
                manifest = json.loads((folder / "export.json").read_text())
                if manifest["model"]["name"] != self.name:
                    return 0
                return int(manifest["metrics"]["samples"])
            except (OSError, ValueError, KeyError, TypeError):
                return 0  # unreadable: the manager refuses it too; nothing to wait for
        return 0

    def _ids_in_folder(self) -> list[str]:
        """The export folders' ids (fixed-width digits: they sort as their numbers)."""
        with os.scandir(self.export_dir) as entries:
            return [e.name for e in entries if e.name.isdigit() and len(e.name) == ID_DIGITS]

    def _next_id(self) -> str:
        """The export's id: the wall clock in ns, but above every export in the folder and
        the last one given. The manager publishes exports in id order and skips ids at or
        below the last it handled, so a clock stepped back (NTP) or a trainer restarted on a
        host whose clock lags would otherwise export into nothing, silently."""
        newest = max(map(int, self._ids_in_folder()), default=0)
        self._last_id = max(time.time_ns(), newest + 1, self._last_id + 1)
        return f"{self._last_id:0{ID_DIGITS}d}"

    def _write(
        self,
        folder: Path,
        export_id: str,
        full: bool,
        metrics: dict[str, float],
        started: float,
        mlp: dict[str, npt.NDArray[np.float32]] | None,
    ) -> str:
        files, seqs = self.client.control.export(full, export_id)  # the shards write under the same export folder
        dense_path = folder / DENSE_FILE
        save_file(dense_tensors(self.client, self.spec, mlp), str(dense_path))
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
        self.close()  # exports become READY in order: the one before takes what it has
        self._pending.append(_Pending(folder, manifest))  # only once it is written whole
        if not self.holdout:
            self.close()
        EXPORT_HOLDOUT_NEEDED.set(self.needed)
        if full:
            self.base = export_id
        self.previous = export_id
        self.count += 1
        EXPORT_SECONDS.observe(time.perf_counter() - started)
        return export_id
