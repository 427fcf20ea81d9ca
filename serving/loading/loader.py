"""Loads one version (TF Serving's Loader): constructing it is cheap and touches nothing;
`load()` checks the delta chain's links, makes serving's own checked copies of the files,
maps the images and applies the deltas (serving.loading.servable)."""

from __future__ import annotations

import hashlib

from ctr.repository.versions import Repository
from serving.config import DnnBatching
from serving.loading.local_copies import LocalCopies
from serving.loading.servable import NO_BATCHING, ServableModel, load
from serving.loading.shard_part import WHOLE, ShardPart
from serving.scoring.parallel import SERIAL, Splitter


class OverBudget(ValueError):
    """A version whose files would pass the model's memory budget: not loaded."""


class VersionLoader:
    def __init__(
        self,
        repo: Repository,
        version: int,
        copies: LocalCopies,
        splitter: Splitter = SERIAL,
        part: ShardPart = WHOLE,
        batching: DnnBatching = NO_BATCHING,
    ) -> None:
        self.repo = repo
        self.version = version
        self.copies = copies
        self.splitter = splitter
        self.part = part
        self.batching = batching

    def load(self, current: ServableModel | None = None, spare: ServableModel | None = None) -> ServableModel:
        """The servable version; `current` lends the images and overlay its chain shares, and
        `spare` (a retired version no request uses) its overlay's memory."""
        manifest = self.repo.manifest(self.version)
        base = int(manifest["base_version"])
        self.check_links()
        base_manifest = self.repo.manifest(base)
        base_dir = self.copies.version_dir(self.repo.path(base), base, base_manifest)
        chain = []
        for v in manifest["delta_chain"]:
            m = self.repo.manifest(v)
            chain.append((self.copies.version_dir(self.repo.path(v), v, m), m))
        version_dir = base_dir if manifest["kind"] == "full" else chain[-1][0]
        return load(
            version_dir, manifest, base_manifest, base_dir, chain, current, spare, self.splitter, self.part, self.batching
        )

    def footprint(self) -> int:
        """The bytes of every file the version is built from (its base and delta chain):
        what its images, overlay and dense weights take once mapped and loaded."""
        manifest = self.repo.manifest(self.version)
        versions = [int(manifest["base_version"]), *(int(v) for v in manifest["delta_chain"])]
        return sum(int(f["size"]) for v in versions for f in self.repo.manifest(v)["files"])

    def check_budget(self, budget: int) -> None:
        """Raises OverBudget when the version's files take more than `budget` bytes (0: none)."""
        if budget > 0 and (size := self.footprint()) > budget:
            raise OverBudget(
                f"its files take {size / 2**20:.1f} MiB, above the model's budget of {budget / 2**20:.1f} MiB"
                " (--model-memory-mb); not loaded"
            )

    def check_links(self) -> None:
        """Each delta of the chain names its predecessor by the checksum of its manifest: a
        predecessor replaced or missing is refused (ValueError)."""
        m = self.repo.manifest(self.version)
        while m["kind"] == "delta":
            link = m.get("previous")
            if not link:
                return  # published before deltas named their predecessor
            raw = self.repo.manifest_bytes(int(link["version"]))
            if hashlib.sha256(raw).hexdigest() != link["manifest_sha256"]:
                raise ValueError(f"version {m['version']}: its predecessor {link['version']} is not the one it was built on")
            m = self.repo.manifest(int(link["version"]))
