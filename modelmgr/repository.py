"""The model repository: `<root>/<model>/<version>/` folders with manifest.json and DONE,
rejected exports with their reasons, the version policy (latest or pinned) and the version
counter.

This module is the reader API that serving uses, and the writer the publisher uses. Every
file is validated when read (modelmgr.schemas): a damaged one never crashes a reader. A bad
policy reads as "latest" (with the reason in `policy_error`), a bad manifest makes its
version unservable (`broken`), and every write is atomic (a temporary file, fsync, rename).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelmgr import schemas
from modelmgr.schemas import CounterFile, PolicyFile, SchemaError, VersionManifest

POLICY_FILE = "POLICY.json"
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


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Readers see the old file or the whole new one, also across a power cut."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_json_atomic(path: Path, obj: Any) -> None:
    write_bytes_atomic(path, json.dumps(obj, indent=1).encode())


class Repository:
    def __init__(self, root: Path, model: str) -> None:
        self.root = root
        self.model = model
        self.dir = root / model

    def versions(self) -> list[int]:
        """Published versions (folders with DONE), ascending; a broken one included."""
        if not self.dir.is_dir():
            return []
        out = []
        for p in self.dir.iterdir():
            if p.name.isdigit() and (p / DONE).exists():
                out.append(int(p.name))
        return sorted(out)

    def path(self, version: int) -> Path:
        return self.dir / version_name(version)

    def manifest_model(self, version: int) -> VersionManifest:
        p = self.path(version)
        if not (p / DONE).exists():
            raise RepositoryError(f"model {self.model} has no published version {version}")
        try:
            m = schemas.read(VersionManifest, p / MANIFEST)
        except SchemaError as e:
            raise RepositoryError(f"version {version} is broken: {e}") from None
        if m.version != version:
            raise RepositoryError(f"version {version} is broken: its manifest says version {m.version}")
        return m

    def manifest(self, version: int) -> dict[str, Any]:
        """The version's manifest, validated, as a dict (RepositoryError when it is not)."""
        return schemas.dump(self.manifest_model(version))

    def broken(self, version: int) -> str | None:
        """Why a published version cannot be served (its manifest, or one in its chain), or None."""
        try:
            m = self.manifest_model(version)
            for v in {m.base_version, *m.delta_chain} - {version}:
                self.manifest_model(v)
        except RepositoryError as e:
            return str(e)
        return None

    def policy(self) -> Policy:
        p = self.dir / POLICY_FILE
        if not p.exists():
            return Policy("latest")
        try:
            d = schemas.read(PolicyFile, p)
        except SchemaError as e:
            log.warning("%s; following the latest version", e)
            return Policy("latest", None, f"ignored: {e}")
        return Policy(d.mode, d.version, d.reason)

    def policy_error(self) -> str | None:
        reason = self.policy().reason
        return reason if reason.startswith("ignored: ") else None

    def set_policy(self, policy: Policy) -> None:
        if policy.mode == "pinned":
            if policy.version is None or policy.version not in self.versions():
                raise RepositoryError(f"cannot pin {self.model} to {policy.version}: no such published version")
            why = self.broken(policy.version)
            if why is not None:
                raise RepositoryError(f"cannot pin {self.model} to {policy.version}: {why}")
        elif policy.mode != "latest":
            raise RepositoryError(f"unknown policy mode {policy.mode!r}")
        self.dir.mkdir(parents=True, exist_ok=True)
        body = PolicyFile(mode=policy.mode, version=policy.version, set_at=time.time(), reason=policy.reason)  # type: ignore[arg-type]
        write_json_atomic(self.dir / POLICY_FILE, schemas.dump(body))

    def target(self) -> int | None:
        """The version serving should load under the policy: the pinned one, else the newest
        that is not broken; None when there is none."""
        pol = self.policy()
        versions = self.versions()
        if pol.mode == "pinned" and pol.version in versions:
            return pol.version
        for v in reversed(versions):
            if self.broken(v) is None:
                return v
        return None

    # the publisher's side

    def counter(self) -> CounterFile:
        """The version counter; rebuilt from what is on disk when the file is bad or absent."""
        p = self.dir / COUNTER_FILE
        on_disk = max([int(x.name) for x in self.dir.iterdir() if x.name.isdigit()], default=0) if self.dir.is_dir() else 0
        stored = CounterFile()
        if p.exists():
            try:
                stored = schemas.read(CounterFile, p)
            except SchemaError as e:
                log.warning("%s; the counter goes on from the versions on disk", e)
        handled = max([stored.handled_through, *(str(r.get("export_id", "")) for r in self.rejected())])
        return CounterFile(next_version=max(stored.next_version, on_disk + 1), handled_through=handled)

    def allocate_version(self, export_id: str) -> int:
        """A version number never used before (a deleted version's is not reused), and the
        export counted as handled."""
        c = self.counter()
        self.dir.mkdir(parents=True, exist_ok=True)
        body = CounterFile(next_version=c.next_version + 1, handled_through=max(c.handled_through, export_id))
        write_json_atomic(self.dir / COUNTER_FILE, schemas.dump(body))
        return c.next_version

    def mark_handled(self, export_id: str) -> None:
        c = self.counter()
        if export_id > c.handled_through:
            self.dir.mkdir(parents=True, exist_ok=True)
            body = CounterFile(next_version=c.next_version, handled_through=export_id)
            write_json_atomic(self.dir / COUNTER_FILE, schemas.dump(body))

    def clean_unfinished(self) -> list[str]:
        """Removes version folders a crash left without DONE (and temporary folders)."""
        if not self.dir.is_dir():
            return []
        gone = []
        for p in self.dir.iterdir():
            if p.is_dir() and (p.name.startswith(".tmp-") or (p.name.isdigit() and not (p / DONE).exists())):
                shutil.rmtree(p, ignore_errors=True)
                gone.append(p.name)
        return gone

    def gc(self, keep_full: int, dry_run: bool = False) -> list[int]:
        """Retention: keeps the newest `keep_full` full versions with their delta chains, the
        newest version, and whatever the policy's version and serving's target need; removes
        the rest (their folders) and returns them."""
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
        for needed in (self.policy().version, self.target()):
            if needed is not None and needed in ok:
                keep |= {needed, ok[needed].base_version, *ok[needed].delta_chain}
        oldest_kept = min(keep)
        gone = [v for v in versions if v not in keep and (v in ok or v < oldest_kept)]
        if not dry_run:
            for v in gone:
                shutil.rmtree(self.path(v), ignore_errors=True)
        return gone

    def rejected(self) -> list[dict[str, Any]]:
        d = self.dir / REJECTED
        if not d.is_dir():
            return []
        out = []
        for p in sorted(d.glob("*.json")):
            try:
                r = json.loads(p.read_text())
            except (OSError, ValueError) as e:
                r = {"export_id": p.stem, "reason": f"(the rejection record is unreadable: {e})"}
            out.append(r if isinstance(r, dict) else {"export_id": p.stem, "reason": "(a bad rejection record)"})
        return out

    def record_rejection(self, export_id: str, reason: str, manifest: dict[str, Any] | None, evidence: Any = None) -> None:
        d = self.dir / REJECTED
        d.mkdir(parents=True, exist_ok=True)
        kind = manifest.get("kind") if isinstance(manifest, dict) else None
        metrics = manifest.get("metrics") if isinstance(manifest, dict) else None
        record = {"export_id": export_id, "reason": reason, "rejected_at": time.time(), "kind": kind}
        record |= {"metrics": metrics if isinstance(metrics, dict) else None, "evidence": evidence}
        write_json_atomic(d / f"{export_id}.json", record)
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
