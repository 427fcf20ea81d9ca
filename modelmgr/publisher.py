"""Turns READY exports into published versions, in export order.

A version is assembled in `<model>/.tmp-<version>/`, manifest.json then DONE are written,
and the folder is renamed into place, so readers never see half a version. A delta whose
predecessor was rejected cannot be applied and is rejected too until the next full export.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from modelmgr import metrics
from modelmgr.gate import QualityGate
from modelmgr.repository import DONE, MANIFEST, Repository, version_name
from modelmgr.verify import VerificationError, verify_export

log = logging.getLogger("modelmgr")


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


class Publisher:
    def __init__(self, repo: Repository, exports: Path, gate: QualityGate) -> None:
        self.repo = repo
        self.exports = exports
        self.gate = gate
        self.processed = repo.processed_exports()

    def poll(self) -> list[int]:
        """Processes every new READY export; returns the versions published."""
        if not self.exports.is_dir():
            return []
        published = []
        for folder in sorted(p for p in self.exports.iterdir() if (p / "READY").exists()):
            if folder.name in self.processed:
                continue
            v = self._process(folder)
            self.processed.add(folder.name)
            if v is not None:
                published.append(v)
        return published

    def _process(self, folder: Path) -> int | None:
        export_id = folder.name
        manifest: dict[str, Any] | None = None
        try:
            try:
                manifest = json.loads((folder / "export.json").read_text())
            except (OSError, ValueError) as e:
                raise VerificationError(f"export.json unreadable: {e}") from None
            assert manifest is not None
            verify_export(folder, manifest)
            base, chain = self._lineage(manifest)
            reason = self.gate.check(manifest.get("metrics") or {})
            if reason is not None:
                raise VerificationError(f"quality gate: {reason}")
        except VerificationError as e:
            log.warning("rejected export %s: %s", export_id, e)
            self.repo.record_rejection(export_id, str(e), manifest)
            metrics.REJECTED.inc()
            return None
        return self._publish(folder, manifest, base, chain)

    def _lineage(self, manifest: dict[str, Any]) -> tuple[int | None, list[int]]:
        """(base version, delta chain before this one) of a delta; (None, []) for a full."""
        if manifest.get("kind") == "full":
            return None, []
        prev = self.repo.version_of_export(str(manifest.get("previous")))
        if prev is None:
            raise VerificationError(f"delta follows export {manifest.get('previous')}, which was not published")
        pm = self.repo.manifest(prev)
        if pm["kind"] == "full":
            return prev, []
        return int(pm["base_version"]), [*pm["delta_chain"]]

    def _publish(self, folder: Path, export: dict[str, Any], base: int | None, chain: list[int]) -> int:
        versions = self.repo.versions()
        v = (versions[-1] if versions else 0) + 1
        tmp = self.repo.dir / f".tmp-{version_name(v)}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        for f in export["files"]:
            _link_or_copy(folder / f["name"], tmp / f["name"])
        manifest = {
            "model": self.repo.model,
            "version": v,
            "kind": export["kind"],
            "base_version": v if base is None else base,
            "delta_chain": [] if base is None else [*chain, v],
            "export_id": folder.name,
            "spec": export.get("model"),
            "schema": export.get("schema"),
            "shard_count": export["shard_count"],
            "files": export["files"],
            "metrics": export.get("metrics"),
            "created": time.time(),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        (tmp / DONE).write_text(str(v))
        os.replace(tmp, self.repo.path(v))
        metrics.PUBLISHED.inc()
        metrics.LATEST.set(v)
        log.info("published %s version %d (%s) from export %s", self.repo.model, v, export["kind"], folder.name)
        return v
