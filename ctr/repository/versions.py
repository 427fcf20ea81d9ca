"""The model repository: `<root>/<model>/<version>/` folders with manifest.json and DONE,
rejected exports with their reasons, the version policy (latest or pinned) and the version
counter, in a local folder or an S3 bucket (`ctr.repository.storage`).

This module is the reader API that serving uses, and the writer the publisher uses. Every
file is validated when read (ctr.repository.schemas): a damaged one never crashes a reader. A bad
policy reads as "latest" (with the reason in `Policy.reason`), a bad manifest makes its
version unservable (`broken`), and every write is atomic (a temporary file, fsync, rename).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctr.format import modelfile
from ctr.repository import schemas
from ctr.repository.schemas import CounterFile, LabelEntry, PolicyFile, RoutingFile, SchemaError, VersionManifest
from ctr.repository.storage import Storage, StorageUnreachable, fsync_dir, open_storage

POLICY_FILE = "POLICY.json"
ROUTING_FILE = "ROUTING.json"  # version labels: canaries by share of routing keys, shadows
COUNTER_FILE = "COUNTER.json"
DONE = "DONE"
MANIFEST = "manifest.json"
REJECTED = "rejected"

log = logging.getLogger("modelmgr")


class RepositoryError(ValueError):
    """A request the repository cannot satisfy (unknown version, bad policy...)."""


@dataclass(frozen=True)
class Policy:
    mode: str  # "latest" | "pinned"
    version: int | None = None
    reason: str = ""

    def describe(self) -> str:
        return "latest" if self.mode == "latest" else f"pinned {self.version}"


def version_name(v: int) -> str:
    return f"{v:08d}"


class Repository:
    """`root`: a folder or `s3://bucket/prefix`. `dir` is the local folder the manager works
    in (staging, evidence of a local repository), and `path(v)` a local folder holding
    version v's files: the repository's own folder, or for S3 a cache the files are
    downloaded into, each checked against the manifest's sha256."""

    def __init__(self, root: str | Path, model: str, cache: Path | None = None) -> None:
        self.root = root
        self.model = model
        self.storage: Storage = open_storage(root)
        local = self.storage.local_root
        if local is not None:
            self.dir = local / model
        else:
            base = cache or Path(tempfile.gettempdir()) / "boundless-s3-cache"
            self.dir = base / hashlib.sha256(self.storage.url.encode()).hexdigest()[:16] / model
        self._manifests: dict[int, VersionManifest] = {}  # S3 only: published manifests do not change

    def _key(self, *parts: str) -> str:
        return "/".join((self.model, *parts))

    @staticmethod
    def models_in(root: str | Path) -> list[str]:
        """The models a repository holds: its folders that hold a published version."""
        storage = open_storage(root)
        return [m for m in storage.children("") if not m.startswith(".") and Repository(root, m).versions()]

    def versions(self) -> list[int]:
        """Published versions (folders with DONE), ascending; a broken one included."""
        out = []
        for name in self.storage.children(self.model):
            if name.isdigit() and self.storage.exists(self._key(name, DONE)):
                out.append(int(name))
        return sorted(out)

    def path(self, version: int) -> Path:
        """A local folder with the version's files (downloaded and checked, for S3)."""
        if self.storage.local_root is not None:
            return self.dir / version_name(version)
        d = self.dir / "cache" / version_name(version)
        if not (d / DONE).exists():
            m = self.manifest_model(version)
            d.mkdir(parents=True, exist_ok=True)
            for f in m.files:
                if not (d / f.name).exists():
                    self._download_checked(version, f.name, f.sha256, d / f.name)
            (d / MANIFEST).write_bytes(self.storage.read_bytes(self._key(version_name(version), MANIFEST)))
            (d / DONE).write_text(str(version))
        return d

    def _download_checked(self, version: int, name: str, sha256: str, dst: Path) -> None:
        tmp = dst.with_name(f".{dst.name}.part")
        self.storage.get_file(self._key(version_name(version), name), tmp)
        if modelfile.sha256_file(tmp) != sha256:
            tmp.unlink(missing_ok=True)
            raise RepositoryError(f"version {version}: {name} in {self.storage.url} does not match its sha256")
        os.replace(tmp, dst)

    def manifest_bytes(self, version: int) -> bytes:
        return self.storage.read_bytes(self._key(version_name(version), MANIFEST))

    def manifest_model(self, version: int) -> VersionManifest:
        cached = self._manifests.get(version)
        if cached is not None:
            return cached
        name = version_name(version)
        if not self.storage.exists(self._key(name, DONE)):
            raise RepositoryError(f"model {self.model} has no published version {version}")
        try:
            m = schemas.parse(VersionManifest, self.manifest_bytes(version), f"{self.storage.url}/{self._key(name, MANIFEST)}")
        except StorageUnreachable:
            raise  # S3 did not answer: the version is not broken, the storage is away
        except (SchemaError, OSError) as e:
            raise RepositoryError(f"version {version} is broken: {e}") from None
        if m.version != version:
            raise RepositoryError(f"version {version} is broken: its manifest says version {m.version}")
        if self.storage.local_root is None:
            self._manifests[version] = m
        return m

    def manifest(self, version: int) -> dict[str, Any]:
        """The version's manifest, validated, as a dict (RepositoryError when it is not)."""
        return schemas.dump(self.manifest_model(version))

    def broken(self, version: int, files: bool = True) -> str | None:
        """Why a published version cannot be served (its manifest, one in its chain, or, with
        `files`, a file one of them lists missing or of another size), or None."""
        try:
            m = self.manifest_model(version)
            for v in sorted({m.base_version, *m.delta_chain} | {version}):
                missing = self._missing_file(v, self.manifest_model(v)) if files else None
                if missing is not None:
                    return missing
        except RepositoryError as e:
            return str(e)
        return None

    def _missing_file(self, version: int, m: VersionManifest) -> str | None:
        """A file the version's manifest lists that is not in its folder (a retention that was
        cut short, a hand-made deletion); its size where the storage tells it cheaply."""
        root = self.storage.local_root
        if root is not None:
            folder = root / self._key(version_name(version))
            for f in m.files:
                path = folder / f.name
                if not path.is_file():
                    return f"version {version}: {f.name} is listed but missing"
                if path.stat().st_size != f.size:
                    return f"version {version}: {f.name} holds {path.stat().st_size} bytes, the manifest says {f.size}"
            return None
        present = set(self.storage.files(self._key(version_name(version))))
        gone = [f.name for f in m.files if f.name not in present]
        return f"version {version}: {gone[0]} is listed but missing" if gone else None

    def _read(self, name: str) -> bytes | None:
        try:
            return self.storage.read_bytes(self._key(name))
        except FileNotFoundError:
            return None

    def _write_json(self, name: str, obj: Any) -> None:
        self.storage.write_bytes(self._key(name), json.dumps(obj, indent=1).encode())

    def policy(self) -> Policy:
        raw = self._read(POLICY_FILE)
        if raw is None:
            return Policy("latest")
        try:
            d = schemas.parse(PolicyFile, raw, f"{self.storage.url}/{self._key(POLICY_FILE)}")
        except SchemaError as e:
            log.warning("%s; following the latest version", e)
            return Policy("latest", None, f"ignored: {e}")
        return Policy(d.mode, d.version, d.reason)

    def set_policy(self, policy: Policy) -> None:
        if policy.mode == "pinned":
            if policy.version is None or policy.version not in self.versions():
                raise RepositoryError(f"cannot pin {self.model} to {policy.version}: no such published version")
            why = self.broken(policy.version)
            if why is not None:
                raise RepositoryError(f"cannot pin {self.model} to {policy.version}: {why}")
        elif policy.mode != "latest":
            raise RepositoryError(f"unknown policy mode {policy.mode!r}")
        body = PolicyFile(mode=policy.mode, version=policy.version, set_at=time.time(), reason=policy.reason)  # type: ignore[arg-type]
        self._write_json(POLICY_FILE, schemas.dump(body))

    def routing(self) -> dict[str, LabelEntry]:
        """The version labels (ROUTING.json): none when the file is absent or unreadable."""
        raw = self._read(ROUTING_FILE)
        if raw is None:
            return {}
        try:
            return schemas.parse(RoutingFile, raw, f"{self.storage.url}/{self._key(ROUTING_FILE)}").labels
        except SchemaError as e:
            log.warning("%s; no version labels", e)
            return {}

    def set_label(self, label: str, version: int, share: float = 0.0, shadow: float = 0.0) -> dict[str, LabelEntry]:
        """Labels a published, unbroken version; the shares of all labels add up to at most 1
        (the rest of the routed requests go to the policy's version)."""
        if not label or not label.replace("-", "").replace("_", "").isalnum() or label == "stable":
            raise RepositoryError(f"label {label!r}: letters, digits, - and _ ('stable' is the policy's version)")
        if version not in self.versions():
            raise RepositoryError(f"cannot label {self.model} version {version}: no such published version")
        why = self.broken(version)
        if why is not None:
            raise RepositoryError(f"cannot label {self.model} version {version}: {why}")
        labels = {**self.routing(), label: LabelEntry(version=version, share=share, shadow=shadow)}
        if sum(e.share for e in labels.values()) > 1.0 + 1e-9:
            raise RepositoryError(f"label {label}: the labels' shares would add up to more than 1")
        self._write_json(ROUTING_FILE, schemas.dump(RoutingFile(labels=labels, set_at=time.time())))
        return labels

    def remove_label(self, label: str) -> dict[str, LabelEntry]:
        labels = self.routing()
        if label not in labels:
            raise RepositoryError(f"{self.model} has no label {label!r} (labels: {', '.join(labels) or 'none'})")
        del labels[label]
        self._write_json(ROUTING_FILE, schemas.dump(RoutingFile(labels=labels, set_at=time.time())))
        return labels

    def target(self, policy: Policy | None = None) -> int | None:
        """The version serving should load under the policy (`policy`, as already read, or
        read now): the pinned one, else the newest that is not broken; None when there is none."""
        pol = policy if policy is not None else self.policy()
        versions = self.versions()
        if pol.mode == "pinned" and pol.version in versions:
            return pol.version
        for v in reversed(versions):
            # serving asks this at every poll: files are checked where that costs stats, not
            # an S3 listing per version (serving checks each file it downloads anyway)
            if self.broken(v, files=self.storage.local_root is not None) is None:
                return v
        return None

    # the publisher's side

    def counter(self) -> CounterFile:
        """The version counter; rebuilt from what is on disk when the file is bad or absent."""
        numbered = sorted((int(x) for x in self.storage.children(self.model) if x.isdigit()), reverse=True)
        on_disk = numbered[0] if numbered else 0
        stored = CounterFile()
        raw = self._read(COUNTER_FILE)
        if raw is not None:
            try:
                stored = schemas.parse(CounterFile, raw, f"{self.storage.url}/{self._key(COUNTER_FILE)}")
            except SchemaError as e:
                log.warning("%s; the counter goes on from the versions on disk", e)
        # the newest rejection, in place before the file could say so: its record is named after
        # its export id, so the names tell it without reading every record
        records = [n[: -len(".json")] for n in self.storage.files(self._key(REJECTED)) if n.endswith(".json")]
        handled = [stored.handled_through, max(records, default="")]
        for v in numbered:  # the newest version's export, in place before the file could say so (a full disk)
            try:
                handled.append(self.manifest_model(v).export_id)
                break
            except RepositoryError:  # unfinished (no DONE yet) or damaged: the one before
                continue
        return CounterFile(next_version=max(stored.next_version, on_disk + 1), handled_through=max(handled))

    def next_version(self) -> int:
        """The number the next version takes: never one used before (a deleted version's is
        not reused)."""
        return self.counter().next_version

    def record_published(self, version: int, export_id: str) -> None:
        """Counts `version` as used and its export as handled (after it is in place, so a
        failure before leaves the export to be tried again)."""
        c = self.counter()
        body = CounterFile(next_version=max(c.next_version, version + 1), handled_through=max(c.handled_through, export_id))
        self._write_json(COUNTER_FILE, schemas.dump(body))

    def mark_handled(self, export_id: str) -> None:
        c = self.counter()
        if export_id > c.handled_through:
            self._write_json(COUNTER_FILE, schemas.dump(CounterFile(next_version=c.next_version, handled_through=export_id)))

    def clean_unfinished(self) -> list[str]:
        """Removes version folders a crash left without DONE (and local temporary folders)."""
        gone = []
        for name in self.storage.children(self.model):
            if name.isdigit() and not self.storage.exists(self._key(name, DONE)):
                self.storage.delete_tree(self._key(name))
                gone.append(name)
        if self.dir.is_dir():
            for p in self.dir.iterdir():
                if p.is_dir() and p.name.startswith(".tmp-"):
                    shutil.rmtree(p, ignore_errors=True)
                    gone.append(p.name)
        return gone

    def publish_staged(self, staged: Path, version: int) -> None:
        """Moves a staged version (files, manifest.json, DONE) into place: a rename locally;
        on S3 every file is uploaded and checked, and DONE goes last."""
        name = version_name(version)
        if self.storage.local_root is not None:
            for f in staged.iterdir():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
            fsync_dir(staged)
            os.replace(staged, self.path(version))
            fsync_dir(self.dir)
            return
        for f in sorted(staged.iterdir()):
            if f.name != DONE:
                self.storage.put_file(self._key(name, f.name), f)
        self.storage.write_bytes(self._key(name, DONE), (staged / DONE).read_bytes())
        cached = self.dir / "cache" / name
        shutil.rmtree(cached, ignore_errors=True)
        cached.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, cached)  # the staged files are the version's, checked: the local cache

    def write_evidence(self, folder: str, name: str, obj: Any) -> None:
        self._write_json(f"{folder}/{name}", obj)

    def gc(self, keep_full: int, dry_run: bool = False) -> list[int]:
        """Retention: keeps the newest `keep_full` full versions with their delta chains, the
        newest version, and whatever the policy's version, serving's target and every
        label's version (a canary, a shadow) need; removes the rest (their folders) and
        returns them."""
        versions = self.versions()
        if not versions or keep_full < 1:
            return []
        ok = {}
        for v in versions:
            try:
                ok[v] = self.manifest_model(v)
            except RepositoryError:
                continue  # broken: kept only while it is newer than the kept full versions
        fulls = [v for v, m in ok.items() if m.kind == "full"]
        bases = set(fulls[-keep_full:])
        keep = {v for v, m in ok.items() if (m.version if m.kind == "full" else m.base_version) in bases}
        keep.add(versions[-1])
        labelled = [entry.version for entry in self.routing().values()]  # what serving scores canaries and shadows with
        for needed in (self.policy().version, self.target(), *labelled):
            if needed is not None and needed in ok:
                keep |= {needed, ok[needed].base_version, *ok[needed].delta_chain}
        oldest_kept = min(keep)
        gone = [v for v in versions if v not in keep and (v in ok or v < oldest_kept)]
        if not dry_run:
            for v in gone:
                # out of what readers see first (they list only versions with DONE), then deleted:
                # cut short, it leaves a folder no one serves, which the next gc removes
                self.storage.delete(self._key(version_name(v), DONE))
                self.storage.delete_tree(self._key(version_name(v)))
                self._manifests.pop(v, None)
            for name in self.storage.children(self.model):  # what an earlier gc left half deleted
                if name.isdigit() and int(name) < oldest_kept and not self.storage.exists(self._key(name, DONE)):
                    self.storage.delete_tree(self._key(name))
        return gone

    def rejected(self) -> list[dict[str, Any]]:
        out = []
        for name in self.storage.files(self._key(REJECTED)):
            if not name.endswith(".json"):
                continue
            try:
                r = json.loads(self.storage.read_bytes(self._key(REJECTED, name)))
            except (OSError, ValueError) as e:
                r = {"export_id": name[:-5], "reason": f"(the rejection record is unreadable: {e})"}
            out.append(r if isinstance(r, dict) else {"export_id": name[:-5], "reason": "(a bad rejection record)"})
        return out

    def prune_rejections(self, keep: int) -> list[str]:
        """Keeps the newest `keep` rejection records (by export id, which is time); returns
        the ids whose records went. Their exports stay handled (the counter says so)."""
        names = sorted(n for n in self.storage.files(self._key(REJECTED)) if n.endswith(".json"))
        gone = names[: max(0, len(names) - keep)]
        for name in gone:
            self.storage.delete(self._key(REJECTED, name))
        return [n[:-5] for n in gone]

    def record_rejection(self, export_id: str, reason: str, manifest: dict[str, Any] | None, evidence: Any = None) -> None:
        kind = manifest.get("kind") if isinstance(manifest, dict) else None
        metrics = manifest.get("metrics") if isinstance(manifest, dict) else None
        record = {"export_id": export_id, "reason": reason, "rejected_at": time.time(), "kind": kind}
        record |= {"metrics": metrics if isinstance(metrics, dict) else None, "evidence": evidence}
        self._write_json(f"{REJECTED}/{export_id}.json", record)
        self.mark_handled(export_id)

    def processed_exports(self) -> set[str]:
        """Exports published or rejected (a version removed since still counts as handled
        through the counter: `counter().handled_through`)."""
        done = {str(r.get("export_id")) for r in self.rejected()}
        for v in self.versions():
            try:
                done.add(self.manifest_model(v).export_id)
            except RepositoryError:
                continue
        return done

    def version_of_export(self, export_id: str) -> int | None:
        for v in reversed(self.versions()):
            try:
                if self.manifest_model(v).export_id == export_id:
                    return v
            except RepositoryError:
                continue
        return None
