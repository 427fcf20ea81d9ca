"""The version commands that change what serving loads or what the repository keeps:
pin, unpin, rollback and gc. The CLI runs them on a repository it can reach, and the
manager daemon's admin service (modelmgr.admin_service) for callers holding the admin token."""

from __future__ import annotations

from collections.abc import Callable

from ctr.repository.versions import Policy, Repository, RepositoryError

PolicyChange = Callable[[Repository], Policy]


def pin(repo: Repository, version: int, reason: str = "") -> Policy:
    """Serving follows `version` from now on; refused for a version that is not there whole."""
    if version not in repo.versions():
        raise RepositoryError(f"version {version} is not published (versions: {repo.versions() or 'none'})")
    broken = repo.broken(version)
    if broken is not None:
        raise RepositoryError(f"version {version} cannot be served: {broken}")
    policy = Policy("pinned", version, reason)
    repo.set_policy(policy)
    return policy


def unpin(repo: Repository, reason: str = "") -> Policy:
    policy = Policy("latest", None, reason)
    repo.set_policy(policy)
    return policy


def rollback(repo: Repository, version: int | None = None, reason: str = "") -> Policy:
    """Pins `version`, or the newest version older than the one served now."""
    if version is None:
        current = repo.target()
        older = [] if current is None else [v for v in repo.versions() if v < current and repo.broken(v) is None]
        if not older:
            raise RepositoryError("no version older than the served one to roll back to")
        version = older[-1]
    return pin(repo, version, reason or "rollback")


def gc(repo: Repository, keep_full: int, dry_run: bool = False) -> list[int]:
    if keep_full < 1:
        raise RepositoryError(f"keep_full {keep_full}: at least one full version must stay")
    return repo.gc(keep_full, dry_run=dry_run)
