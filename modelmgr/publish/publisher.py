"""Turns READY exports into published versions, in export order, and never stops on one.

Each export is validated (ctr.repository.schemas), placed in its lineage (a delta must follow
the newest version of its chain), copied into `<model>/.tmp-<export>/` (the repository's
own copies, each file read once and checked against its size and sha256 on the way),
verified there (CRCs, shard coverage, finite weights, the model spec), then judged on its
holdout against the live version (modelmgr.publish.gate), both scored on the same samples. Only
samples the candidate has not trained on count: an older export's top-up of trained-on
samples (`seen`) is left out, and so are earlier exports' holdouts, which the candidate
trained on after they were taken. Only then it gets a version number from
the persistent counter, and manifest.json and DONE are written and the folder renamed
into place, so readers never see half a version. A bad
export is rejected with its reason and counted as handled, never retried.

Each holdout also scores the live version and its predecessor: when the live one falls
behind, the manager pins the predecessor (auto-rollback) and records the evidence.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from ctr.data.batch import SampleBatch
from ctr.data.quality import auc_difference_se
from ctr.format import modelfile
from ctr.repository import holdout as holdouts
from ctr.repository import schemas
from ctr.repository.schemas import ChainLink, ExportManifest, SchemaError, VersionManifest
from ctr.repository.storage import StorageUnreachable
from ctr.repository.versions import DONE, MANIFEST, Policy, Repository, RepositoryError
from ctr.runtime.repeated_error import RepeatedError
from modelmgr import metrics
from modelmgr.publish.compact import stage_compacted
from modelmgr.publish.decide import Evidence, Reject, RollBack, compacts, decide, identity, spec_change
from modelmgr.publish.evaluate import evaluate, evaluate_scores, load_published, scores
from modelmgr.publish.gate import QualityGate
from modelmgr.publish.verify import VerificationError, verify_export
from serving.loading.servable import extends, load

log = logging.getLogger("modelmgr")
# the repository's disk, not the export: full, over quota or read-only; the export waits
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
RELIST_S = 60.0  # the exports folder is listed again at least this often (a coarse mtime tick can hide a new folder)
MODELS_KEPT = 4  # loaded versions kept for judging (the live one, its predecessor, the newest)


class Rejected(Exception):
    def __init__(self, stage: str, reason: str, evidence: Any = None) -> None:
        super().__init__(reason)
        self.stage, self.reason, self.evidence = stage, reason, evidence


class Publisher:
    def __init__(
        self,
        repo: Repository,
        exports: Path,
        gate: QualityGate,
        compact_after: int = 20,
        keep_full: int = 3,
        accept_new_spec: bool = False,
        keep_exports: int = 100,
        keep_rejections: int = 1000,
    ) -> None:
        self.repo = repo
        self.keep_exports = keep_exports  # handled export folders kept (the newest; 0: keep all)
        self.keep_rejections = keep_rejections  # rejection records kept in the repository (0: keep all)
        # what a poll looks at: the exports' names not handled yet, relisted only when the
        # folder changes (or every RELIST_S), so an idle manager's cost does not grow with history
        self._candidates: list[str] = []
        self._listed: tuple[int, float] = (-1, 0.0)  # the exports folder's mtime, when listed
        self._handled = ""
        self._storage = RepeatedError(log)  # the repository that cannot be written, said once a minute
        # exports left for the next scan because the repository failed: their version may be in
        # place already (the failure came after), or half written (S3: files without DONE)
        self._retrying: set[str] = set()
        self.accept_new_spec = accept_new_spec  # publish an export of another type or field list
        self.exports = exports
        self.gate = gate
        self.compact_after = compact_after  # a chain this many deltas long is folded into a full version (0: never)
        self.keep_full = keep_full  # retention: full versions kept with their chains (0: keep everything)
        self._seen: set[str] = set()
        self._below: set[str] | None = None  # the export folders at or below handled_through, as last listed
        self.changed = False  # a version was published or the policy set since the caller last looked
        self._models: dict[int, Any] = {}  # version -> serving.loading.servable.ServableModel
        for name in repo.clean_unfinished():
            log.warning("removed %s/%s: a version a crash left unfinished", repo.dir, name)

    def _unhandled(self) -> list[str]:
        """The export folders' names newer than what is handled: relisted when the folder's
        mtime moves (a new export) or every RELIST_S; otherwise the last list, less what was
        handled since. A poll then stats only these."""
        stamp, now = self.exports.stat().st_mtime_ns, time.monotonic()
        if stamp != self._listed[0] or now - self._listed[1] > RELIST_S:
            self._handled = self.repo.counter().handled_through
            names = [e.name for e in os.scandir(self.exports) if e.is_dir()]
            self._candidates = sorted(n for n in names if n > self._handled and n not in self._seen)
            self._refuse_late({n for n in names if n <= self._handled})
            self._retrying = {n for n in self._retrying if n > self._handled}  # at or below: its version is in place
            self._seen = {n for n in self._seen if n > self._handled}  # what the counter holds is forgotten
            self._listed = (stamp, now)
        return self._candidates

    def _refuse_late(self, below: set[str]) -> None:
        """Rejects the READY exports that appeared since the last listing with an id at or
        below the last handled one: exports go in id order, so one numbered behind (a trainer
        whose clock lags the one that exported before, into a folder emptied meanwhile)
        would otherwise lie there unpublished, and retention would delete it. Those present
        when the manager starts are taken as handled before."""
        if self._below is not None:
            for name in sorted(below - self._below - self._seen - self._retrying):  # a retried one's version is in place
                if not (self.exports / name / "READY").exists():
                    below.discard(name)  # still being written: looked at again at the next listing
                    continue
                self._reject(
                    self.exports / name,
                    Rejected(
                        "order",
                        f"its id is not above {self._handled}, the last export handled: the trainer that wrote it"
                        " numbers exports behind the one before (its clock lags); its next exports into a folder"
                        " that keeps the newest ones are numbered above them",
                    ),
                )
        self._below = below

    def poll(self) -> list[int]:
        """Processes every new READY export; returns the versions published."""
        if not self.exports.is_dir():
            return []
        published = []
        handled = False
        for name in list(self._unhandled()):
            folder = self.exports / name
            if name in self._seen or not (folder / "READY").exists():
                continue  # still being written: its READY comes last
            self._candidates.remove(name)
            self._seen.add(folder.name)
            handled = True
            try:
                v = self._published_before(folder.name) or self._process(folder)
            except Rejected as e:
                self._reject(folder, e)
                continue
            except Exception as e:  # noqa: BLE001 - an export must never stop the manager
                if isinstance(e, StorageUnreachable) or isinstance(e, OSError) and e.errno in STORAGE_ERRNOS:
                    self._seen.discard(folder.name)  # the repository, not the export: tried again at the next scan
                    self._retrying.add(folder.name)
                    self._candidates.insert(0, folder.name)
                    shutil.rmtree(self.repo.dir / f".tmp-{folder.name}", ignore_errors=True)
                    metrics.STORAGE_FAILURES.inc()
                    self._storage.failed(
                        f"export {folder.name} not published, the repository cannot be written: {e}; trying again"
                    )
                    break  # the exports after it may be its deltas
                log.exception("export %s: unexpected failure", folder.name)
                self._reject(folder, Rejected("internal", f"{type(e).__name__}: {e}"))
                continue
            self._storage.passed(f"export {folder.name} published; the repository is written again")
            published.append(v)
            published += self._maintain(v)
        if handled and self.keep_exports:
            self._retire_exports()
        return published

    def _published_before(self, name: str) -> int | None:
        """For an export left for this scan because the repository failed: its version when
        that was in place already (the failure came after: the counter is written now, no
        second version made), else None, with what a failed publish left half written
        removed first (an S3 version's files without DONE), so its number is used again."""
        if name not in self._retrying:
            return None
        self._retrying.discard(name)  # added back by poll() if the repository fails again
        v = self.repo.version_of_export(name)
        if v is None:
            for gone in self.repo.clean_unfinished():
                log.info("removed %s/%s: what a failed publish of export %s left", self.repo.dir, gone, name)
            return None
        self.repo.record_published(v, name)
        log.info("export %s is version %d already: it was in place before the repository failed", name, v)
        return v

    def _retire_exports(self) -> None:
        """Retention of the exports folder: handled exports past the newest keep_exports go
        (the repository holds its own copies of what was published; rejections keep their
        record); an export not handled yet is never touched."""
        handled = self.repo.counter().handled_through
        done = sorted(e.name for e in os.scandir(self.exports) if e.is_dir() and e.name <= handled)
        for name in done[: max(0, len(done) - self.keep_exports)]:
            shutil.rmtree(self.exports / name, ignore_errors=True)

    def forget(self, versions: list[int]) -> None:
        """Drops removed versions from the models kept for judging."""
        for v in versions:
            self._models.pop(v, None)

    def _maintain(self, version: int) -> list[int]:
        """Compacts a chain grown long and applies retention; returns a version published."""
        out = []
        try:
            m = self.repo.manifest_model(version)
            if compacts(m.kind, len(m.delta_chain), self.compact_after):
                staged = self.repo.dir / f".tmp-compact-{version}"
                stage_compacted(self.repo, version, staged)
                out.append(self._finalize(staged, m.export_id))
                log.info("compacted versions %d..%d into version %d", m.base_version, version, out[-1])
            if self.keep_full:
                gone = self.repo.gc(self.keep_full)
                self.forget(gone)
                for v in gone:
                    log.info("retention: removed version %d", v)
        except StorageUnreachable as e:  # the repository away: no traceback, tried again after the next version
            log.error("compaction or retention after version %d failed: %s", version, e)
        except Exception:  # noqa: BLE001 - upkeep that fails is tried again after the next version
            log.exception("compaction or retention after version %d failed", version)
        return out

    def _reject(self, folder: Path, e: Rejected) -> None:
        log.warning("rejected export %s (%s): %s", folder.name, e.stage, e.reason)
        raw: dict[str, Any] | None = None
        try:
            loaded = json.loads((folder / "export.json").read_text())
            raw = loaded if isinstance(loaded, dict) else None
        except (OSError, ValueError):
            pass
        shutil.rmtree(self.repo.dir / f".tmp-{folder.name}", ignore_errors=True)
        self.repo.record_rejection(folder.name, f"{e.stage}: {e.reason}", raw, e.evidence)
        metrics.REJECTED.labels(e.stage).inc()
        if self.keep_rejections:
            self.repo.prune_rejections(self.keep_rejections)

    def _process(self, folder: Path) -> int:
        try:
            export = schemas.read(ExportManifest, folder / "export.json")
        except SchemaError as e:
            raise Rejected("schema", str(e)) from None
        if export.id != folder.name:
            raise Rejected("schema", f"export.json: id {export.id} is not its folder's name {folder.name}")
        self._check_identity(export)
        base, chain, previous = self._lineage(export)
        holdout = self._holdout(folder, export)
        staged = self._stage(folder, export, base, chain, previous)  # the copies' sizes and sha256 checked
        try:
            verify_export(staged, export, checked=True)
        except VerificationError as e:
            raise Rejected("verify", str(e)) from None
        evaluation = self._judge(staged, export, holdout, previous)
        return self._publish(staged, folder.name, evaluation)

    def _live_spec(self) -> dict[str, Any] | None:
        """The spec of the version serving follows (the newest loadable one otherwise)."""
        target = self.repo.target()
        for v in [*([target] if target is not None else []), *reversed(self.repo.versions())]:
            if self.repo.broken(v) is None:
                return self.repo.manifest_model(v).spec
        return None

    def _check_identity(self, export: ExportManifest) -> None:
        refused = identity(self.repo.model, export.model, self._live_spec(), self.accept_new_spec)
        if refused is not None:
            raise Rejected(refused.stage, refused.reason)

    def _lineage(self, export: ExportManifest) -> tuple[int | None, list[int], int | None]:
        """(base version, chain before this delta, predecessor) of a delta; (None, [], None)
        for a full. A delta whose predecessor is missing, or already followed by another
        delta (a duplicate, or one out of order), is refused."""
        if export.kind == "full":
            return None, [], None
        try:
            prev = self.repo.version_of_export(str(export.previous))
            if prev is None:
                raise Rejected("lineage", f"delta follows export {export.previous}, which was not published")
            pm = self.repo.manifest_model(prev)
            base = pm.version if pm.kind == "full" else pm.base_version
            bm = self.repo.manifest_model(base)
            base_export = bm.lineage_base_export or bm.export_id
            if base_export != export.base:
                raise Rejected("lineage", f"delta names base export {export.base}; its predecessor's base is {base_export}")
            for v in self.repo.versions():
                if v > prev and self.repo.broken(v) is None:
                    link = self.repo.manifest_model(v).previous
                    if link is not None and link.version == prev:
                        raise Rejected(
                            "lineage", f"version {v} already follows version {prev}: a duplicate or out-of-order delta"
                        )
        except RepositoryError as e:
            raise Rejected("lineage", str(e)) from None
        return base, ([] if pm.kind == "full" else list(pm.delta_chain)), prev

    def _holdout(self, folder: Path, export: ExportManifest) -> SampleBatch:
        h = export.holdout
        if h is None:
            raise Rejected("gate", "the export has no holdout: nothing to judge it on")
        path = folder / h.name
        if not path.is_file() or path.stat().st_size != h.size or modelfile.sha256_file(path) != h.sha256:
            raise Rejected("verify", f"{h.name}: missing, or its size or sha256 does not match export.json")
        try:
            batch = holdouts.read(path)
        except holdouts.HoldoutError as e:
            raise Rejected("verify", str(e)) from None
        if len(batch) != h.samples:
            raise Rejected("verify", f"{h.name}: {len(batch)} samples, export.json says {h.samples}")
        if not 0 <= h.seen <= h.samples:
            raise Rejected("schema", f"export.json: holdout.seen {h.seen} is not within 0..{h.samples}")
        return holdouts.head(batch, h.samples - h.seen)  # an older trainer's trained-on top-up is no evidence

    def _stage(self, folder: Path, export: ExportManifest, base: int | None, chain: list[int], previous: int | None) -> Path:
        """The version's folder, not yet numbered: the manager's own copies and a manifest."""
        tmp = self.repo.dir / f".tmp-{folder.name}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)  # on the repository's file system (a local one): the publish is a rename
        for f in export.files:
            try:
                modelfile.copy_checked(folder / f.name, tmp / f.name, f.size, f.sha256, "export.json")
            except modelfile.ModelFileError as e:
                raise Rejected("verify", str(e)) from None
        manifest = {
            "model": self.repo.model,
            "version": 1,  # numbered when published
            "kind": export.kind,
            "base_version": 1 if base is None else base,
            "delta_chain": [] if base is None else chain,
            "base": None if base is None else self._link(base),
            "previous": None if previous is None else self._link(previous),
            "export_id": folder.name,
            "lineage_base_export": folder.name if export.kind == "full" else export.base,
            "spec": export.model,
            "schema": export.feature_schema,
            "shard_count": export.shard_count,
            "files": [schemas.dump(f) for f in export.files],
            "metrics": export.metrics,
            "created": time.time(),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        return tmp

    def _link(self, version: int) -> dict[str, Any]:
        raw = self.repo.manifest_bytes(version)
        return schemas.dump(ChainLink(version=version, manifest_sha256=hashlib.sha256(raw).hexdigest()))

    def _model(self, version: int) -> Any:
        """The published version, loaded as serving loads it (kept for the next holdouts)."""
        if version not in self._models:
            m = self.repo.manifest(version)
            near = [x for x in self._models.values() if extends(m["delta_chain"], m, x)]
            current = max(near, key=lambda x: len(x.chain), default=None)
            self._models[version] = load_published(self.repo, version, current)
            while len(self._models) > MODELS_KEPT:
                del self._models[min(self._models)]
        return self._models[version]

    def _candidate(self, staged: Path, previous: int | None) -> Any:
        m = json.loads((staged / MANIFEST).read_text())
        if m["kind"] == "full":
            return load(staged, m, m, staged, [], None)
        base = int(m["base_version"])
        chain = [(self.repo.path(v), self.repo.manifest(v)) for v in m["delta_chain"]]
        current = self._model(previous) if previous is not None else None
        return load(staged, m, self.repo.manifest(base), self.repo.path(base), [*chain, (staged, m)], current)

    def _judge(self, staged: Path, export: ExportManifest, holdout: SampleBatch, previous: int | None) -> dict[str, Any]:
        """Gathers the evidence (the candidate, the live version and, while the policy follows
        the latest, its predecessor, all scored on this holdout), lets decide() rule, and
        carries the ruling out: a roll-back first, then Rejected or the publish's evidence."""
        live_v = self.repo.target()
        if live_v is not None and spec_change(self.repo.manifest_model(live_v).spec, export.model) is not None:
            live_v = None  # a new spec (--accept-new-spec): the live version reads these samples otherwise
        live_p = self._scores_published(live_v, holdout) if live_v is not None else None
        live = evaluate_scores(live_p, holdout.labels, live_v) if live_p is not None and live_v is not None else None
        follows_latest = self.repo.policy().mode == "latest"
        predecessor, behind_se = None, math.nan
        if live is not None:
            metrics.HOLDOUT_AUC.labels("live").set(live.auc)
        if live is not None and live_p is not None and follows_latest:
            older = [v for v in self.repo.versions() if v < live.version and self.repo.broken(v) is None]
            pred_p = self._scores_published(older[-1], holdout) if older else None
            if pred_p is not None:
                predecessor = evaluate_scores(pred_p, holdout.labels, older[-1])
                metrics.HOLDOUT_AUC.labels("predecessor").set(predecessor.auc)
                if predecessor.finite and live.finite:
                    behind_se = auc_difference_se(holdout.labels, pred_p, live_p)
        candidate, error = None, ""
        try:
            candidate = evaluate(self._candidate(staged, previous), holdout, 0)
            metrics.HOLDOUT_AUC.labels("candidate").set(candidate.auc)
        except StorageUnreachable:
            raise  # its base or chain could not be read: the export waits for the repository (poll)
        except (OSError, ValueError, KeyError) as e:
            error = str(e)
        seen = export.holdout.seen if export.holdout else 0
        evidence = Evidence(export.id, len(holdout), seen, candidate, live, predecessor, follows_latest, error, behind_se)
        for action in decide(evidence, self.gate):
            if isinstance(action, RollBack):
                self._roll_back(action, export.id)
            elif isinstance(action, Reject):
                raise Rejected(action.stage, action.reason, action.evidence)
            else:
                return action.evidence
        raise AssertionError("decide() rules on every candidate")

    def _scores_published(self, version: int, holdout: SampleBatch) -> np.ndarray | None:
        """A published version's scores of the holdout; None (logged) when its files in the
        repository no longer load: a damaged old version must not hold new ones back."""
        try:
            return scores(self._model(version), holdout)
        except StorageUnreachable:
            raise  # not a damaged version: judging without it would pass the gate unchecked
        except (OSError, ValueError, KeyError) as e:
            log.warning("version %d cannot be loaded to compare with: %s", version, e)
            return None

    def _roll_back(self, action: RollBack, export_id: str) -> None:
        """Pins the live version's predecessor, with the evidence beside the policy."""
        self.repo.set_policy(Policy("pinned", action.to_version, action.reason))
        self.changed = True
        self.repo.write_evidence(
            "rollbacks",
            f"{time.time_ns():020d}.json",
            {
                "reason": action.reason,
                "export_id": export_id,
                "live": action.live.to_dict(),
                "predecessor": action.predecessor.to_dict(),
                "difference_se": action.se if math.isfinite(action.se) else None,
                "at": time.time(),
            },
        )
        metrics.ROLLBACKS.inc()
        log.warning("%s; serving is pinned to version %d", action.reason, action.to_version)

    def _publish(self, staged: Path, export_id: str, evaluation: dict[str, Any]) -> int:
        m = json.loads((staged / MANIFEST).read_text())
        m["evaluation"] = evaluation
        (staged / MANIFEST).write_text(json.dumps(m, indent=1))
        v = self._finalize(staged, export_id)
        ev = evaluation["candidate"]
        log.info(
            "published %s version %d (%s) from export %s: holdout AUC %s over %d samples",
            self.repo.model,
            v,
            m["kind"],
            export_id,
            ev["auc"],
            ev["samples"],
        )
        return v

    def _finalize(self, staged: Path, export_id: str) -> int:
        """Numbers a staged version and moves it into place: manifest, DONE, fsync, rename."""
        v = self.repo.next_version()
        m = json.loads((staged / MANIFEST).read_text())
        m["version"] = v
        if m["kind"] == "full":
            m["base_version"] = v
        else:
            m["delta_chain"] = [*m["delta_chain"], v]
        VersionManifest.model_validate(m)  # what readers will check
        (staged / MANIFEST).write_text(json.dumps(m, indent=1))
        (staged / DONE).write_text(str(v))
        self.repo.publish_staged(staged, v)
        self.changed = True
        self.repo.record_published(v, export_id)  # a failure here: counter() finds the version in place
        metrics.PUBLISHED.inc()
        metrics.LATEST.set(v)
        return v
