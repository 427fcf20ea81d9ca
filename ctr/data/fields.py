"""Field indices: every feature belongs to a field 0..F-1 of the schema's field list.

The list comes from the schema: Criteo's I1-I13, C1-C26; a CSV header minus the label and
skipped columns; libffm's field numbers; libsvm's feature positions; kv names in first-seen
order, up to a cap. Crosses come last, one field each. The list is written in the model's
manifest, so the index of a field is stable across runs. A frozen list (models that size
tables by F: ffm, wdl, deepfm) drops features of unknown fields and counts them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ctr.data.hashing import field_id

CROSS_SEP = "x"


def cross_name(a: str, b: str) -> str:
    return f"{a}{CROSS_SEP}{b}"


class FieldIndex:
    """Ordered field names -> index; grows up to `cap` unless frozen."""

    def __init__(self, names: tuple[str, ...] | list[str] = (), cap: int = 256, frozen: bool = False) -> None:
        self.names: list[str] = []
        self._index: dict[str, int] = {}
        self._ids: list[int] = []
        self.cap = cap
        self.frozen = False
        self.dropped = 0  # features of fields outside a frozen or full list
        self.unknown: set[str] = set()  # their field names (the first 100)
        for n in names:
            self.add(n)
        self.frozen = frozen

    def __len__(self) -> int:
        return len(self.names)

    def add(self, name: str) -> int:
        i = self._index.get(name)
        if i is not None:
            return i
        if self.frozen or len(self.names) >= self.cap:
            self._drop(name)
            return -1
        i = self._index[name] = len(self.names)
        self.names.append(name)
        self._ids.append(field_id(name))
        return i

    def get(self, name: str) -> int:
        """Index of a known field, -1 otherwise (never grows)."""
        return self._index.get(name, -1)

    def number(self, n: int) -> int:
        """Index of the field named by number n (libffm, libsvm positions): n itself."""
        if n < len(self.names):
            return n
        if self.frozen or n >= self.cap:
            self._drop(str(n))
            return -1
        for m in range(len(self.names), n + 1):
            self.add(str(m))
        return n

    def can_grow(self) -> bool:
        return not self.frozen and len(self.names) < self.cap

    def drop(self, name: str, count: int = 1) -> None:
        """Counts features of a field the index does not take."""
        self.dropped += count
        if len(self.unknown) < 100:
            self.unknown.add(name)

    def _drop(self, name: str) -> None:
        self.dropped += 1
        if len(self.unknown) < 100:
            self.unknown.add(name)

    def ids(self) -> npt.NDArray[np.uint32]:
        """The hash id of each field (ctr.data.hashing.field_id of its name), by index."""
        return np.asarray(self._ids, dtype=np.uint32)

    def freeze(self) -> None:
        self.frozen = True
