"""A folder's (or an S3 prefix's) positions taken by one number of ranks, read by another
(docs/design/ranks-rescaled.md).

A rank of W reads its share of a folder's files (a prefix's objects) in name order
(trainer.input.file_split), and its position (file, offset) says: every file of its share
named before `file` is read, `file` is read up to `offset`, the rest is not. A group of W' != W ranks deals the files otherwise,
so no single position says what a new rank has left to read. The cut's W positions say it
together: a file's state is what the position of the rank that read it under W says. A new
rank's position carries them as its `prior` ({"ranks": W, "positions": [...]}, JSON-ready)
until its own file sorts at or past every file they name: from there on nothing they say
differs from "not read", and the prior is dropped. A prior's positions may carry a prior of
their own (ranks rescaled twice before the first passed it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# the rank of `ranks` that reads the file (its path) under the folder's dealing
Owner = Callable[[str, int], int]


@dataclass(frozen=True)
class FileState:
    """What a prior says of a file: read whole, or read from `offset` (line `line`) on;
    `by`: the file of the position that says it was read whole (it sorts after it)."""

    done: bool
    offset: int = 0
    line: int = 0
    by: str = ""


NEW = FileState(False)


def prior_of(ranks: int, positions: list[dict[str, Any]]) -> dict[str, Any]:
    """The prior of a cut whose `ranks` ranks stood at `positions` (each a Position's vars)."""
    if len(positions) != ranks:
        raise ValueError(f"a prior of {ranks} rank(s) needs as many positions, got {len(positions)}")
    return {"ranks": ranks, "positions": positions}


def state_of(name: str, prior: dict[str, Any] | None, owner: Owner) -> FileState:
    """A file's state by the prior (NEW where there is none)."""
    while prior is not None:
        ranks = int(prior["ranks"])
        pos = prior["positions"][owner(name, ranks) if ranks > 1 else 0]
        file = str(pos.get("file") or "")
        if file and name < file:
            return FileState(True, by=file)
        if name == file:
            return FileState(False, int(pos.get("offset", 0)), int(pos.get("line", 0)))
        prior = pos.get("prior")
    return NEW


def positions(prior: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
    """Every position of the prior, and of its positions' priors."""
    for pos in (prior or {}).get("positions", []):
        yield pos
        yield from positions(pos.get("prior"))


def stands(prior: dict[str, Any] | None) -> dict[str, tuple[int, int]]:
    """The files the prior's positions (its priors' too) stand in, each with the furthest
    (offset, line) any of them reached in it: positions only advance."""
    out: dict[str, tuple[int, int]] = {}
    for pos in positions(prior):
        if pos.get("file"):
            at = (int(pos.get("offset", 0)), int(pos.get("line", 0)))
            out[str(pos["file"])] = max(out.get(str(pos["file"]), at), at)
    return dict(sorted(out.items()))


def last_file(prior: dict[str, Any] | None) -> str:
    """The file named last (in name order) by any position of the prior, its priors' too."""
    return max((str(pos.get("file") or "") for pos in positions(prior)), default="")


def passed(file: str, last: str) -> bool:
    """Whether a rank standing in `file` (its files before it read) has passed `last`, the
    prior's last_file: from there on the prior says "not read" of every file after `file`."""
    return bool(file) and file >= last


def rebased(prior: dict[str, Any] | None, rebase: Callable[[str], str]) -> dict[str, Any] | None:
    """The prior with every position's file spelled by `rebase` (the source's spelling)."""
    if prior is None:
        return None
    positions = []
    for pos in prior["positions"]:
        moved = dict(pos)
        if moved.get("file"):
            moved["file"] = rebase(str(moved["file"]))
        moved["prior"] = rebased(pos.get("prior"), rebase)
        positions.append(moved)
    return {**prior, "positions": positions}
