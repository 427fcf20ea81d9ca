"""Which of a folder's files (or a prefix's objects) each rank of a group reads
(docs/design/ranks.md, "A followed folder's files go to ranks by their names").

A followed folder changes under the ranks: files land, and old ones roll away. Dealing the
listing out by position would move every later file to another rank as soon as the first
is deleted, so a rank would take up, after its checkpoint's file, files another rank had
already trained, and leave others untrained. So a followed folder's file goes to the rank
its name hashes to, which no other file's coming or going changes. A folder read once is
a fixed set: its files are dealt out in name order, which gives every rank an equal count."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def owner_of(name: str, count: int) -> int:
    """The rank of `count` that reads the file named `name` in a followed folder: the same on
    every host and in every release (not Python's salted hash)."""
    if count == 1:
        return 0
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little") % count


def share(items: Sequence[T], names: Sequence[str], part: tuple[int, int], follow: bool) -> list[T]:
    """Rank part[0] of part[1]'s items, in their order: by name hash where the folder is
    followed, else every part[1]-th from the part[0]-th (items in name order)."""
    index, count = part
    if count == 1:
        return list(items)
    if not follow:
        return list(items[index::count])
    return [item for item, name in zip(items, names, strict=True) if owner_of(name, count) == index]
