"""The model repository: `<root>/<model>/<version>/` folders with manifest.json and DONE,
rejected exports with their reasons, and the version policy (latest or pinned).

This module is the reader API that serving uses, and the writer the publisher uses.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POLICY_FILE = "POLICY.json"
DONE = "DONE"
MANIFEST = "manifest.json"


class RepositoryError(ValueError):
    """A request the repository cannot satisfy (unknown version, bad policy...)."""


@dataclass(frozen=True)
class Policy:
    mode: str  # "latest" | "pinned"
    version: int | None = None

    def describe(self) -> str:
        return "latest" if self.mode == "latest" else f"pinned {self.version}"


def version_name(v: int) -> str:
    return f"{v:08d}"


def write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


class Repository:
    def __init__(self, root: Path, model: str) -> None:
        self.root = root
        self.model = model
        self.dir = root / model

    def versions(self) -> list[int]:
        """Published versions (folders with DONE), ascending."""
        if not self.dir.is_dir():
            return []
        out = []
        for p in self.dir.iterdir():
            if p.name.isdigit() and (p / DONE).exists():
                out.append(int(p.name))
        return sorted(out)

    def path(self, version: int) -> Path:
        return self.dir / version_name(version)

    def manifest(self, version: int) -> dict[str, Any]:
        p = self.path(version)
        if not (p / DONE).exists():
            raise RepositoryError(f"model {self.model} has no published version {version}")
        return json.loads((p / MANIFEST).read_text())  # type: ignore[no-any-return]

    def policy(self) -> Policy:
        p = self.dir / POLICY_FILE
        if not p.exists():
            return Policy("latest")
        d = json.loads(p.read_text())
        return Policy(str(d.get("mode", "latest")), d.get("version"))

    def set_policy(self, policy: Policy) -> None:
        if policy.mode == "pinned":
            if policy.version is None or policy.version not in self.versions():
                raise RepositoryError(f"cannot pin {self.model} to {policy.version}: no such published version")
        elif policy.mode != "latest":
            raise RepositoryError(f"unknown policy mode {policy.mode!r}")
        self.dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.dir / POLICY_FILE, {"mode": policy.mode, "version": policy.version, "set_at": time.time()})

    def target(self) -> int | None:
        """The version serving should load under the policy; None when nothing is published."""
        pol = self.policy()
        versions = self.versions()
        if pol.mode == "pinned" and pol.version in versions:
            return pol.version
        return versions[-1] if versions else None

    def rejected(self) -> list[dict[str, Any]]:
        d = self.dir / "rejected"
        if not d.is_dir():
            return []
        return [json.loads(p.read_text()) for p in sorted(d.glob("*.json"))]

    def record_rejection(self, export_id: str, reason: str, manifest: dict[str, Any] | None) -> None:
        d = self.dir / "rejected"
        d.mkdir(parents=True, exist_ok=True)
        write_json_atomic(
            d / f"{export_id}.json",
            {
                "export_id": export_id,
                "reason": reason,
                "rejected_at": time.time(),
                "kind": (manifest or {}).get("kind"),
                "metrics": (manifest or {}).get("metrics"),
            },
        )

    def processed_exports(self) -> set[str]:
        done = {str(r["export_id"]) for r in self.rejected()}
        for v in self.versions():
            done.add(str(self.manifest(v).get("export_id")))
        return done

    def version_of_export(self, export_id: str) -> int | None:
        for v in reversed(self.versions()):
            if self.manifest(v).get("export_id") == export_id:
                return v
        return None
