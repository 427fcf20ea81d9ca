"""The worker's row cache for bounded staleness (SSP, Ho et al. 2013).

A row pulled at step t is reused, with this worker's own updates applied to it, up to step
t + s; then it is pulled again, and the pull brings every other worker's pushes. Rows that
have gone stale are dropped after each step, so the cache holds at most the keys of the
last s + 1 batches, never the model. With s = 0 nothing is reused: the synchronous path.

The cache is read by the pipeline's pull thread and replaced by the training thread: each
step swaps in a new immutable snapshot, so a reader always sees a consistent one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Keys = npt.NDArray[np.uint64]


@dataclass(frozen=True)
class CacheSnapshot:
    keys: Keys  # sorted
    rows: dict[str, npt.NDArray[np.float64]]
    pulled: npt.NDArray[np.int64]  # the step at which each row was pulled
    bias: npt.NDArray[np.float64] | None
    bias_pulled: int


def _positions(sorted_keys: Keys, keys: Keys) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Where each key sits in sorted_keys, and whether it is there at all."""
    pos = np.searchsorted(sorted_keys, keys)
    found = np.zeros(keys.shape[0], dtype=np.bool_)
    inside = pos < sorted_keys.shape[0]
    found[inside] = sorted_keys[pos[inside]] == keys[inside]
    return pos.astype(np.int64), found


class RowCache:
    def __init__(self, staleness: int, tables: list[str]) -> None:
        if staleness < 0:
            raise ValueError(f"staleness {staleness} must be >= 0")
        self.staleness = staleness
        empty = np.zeros(0, dtype=np.uint64)
        self._snap = CacheSnapshot(empty, {t: np.zeros((0, 0)) for t in tables}, np.zeros(0, dtype=np.int64), None, -1)

    @property
    def size(self) -> int:
        return int(self._snap.keys.shape[0])

    def fresh(self, keys: Keys, step: int) -> npt.NDArray[np.bool_]:
        """Which of the sorted unique keys may be served from the cache at `step`."""
        snap = self._snap
        if self.staleness == 0 or snap.keys.shape[0] == 0:
            return np.zeros(keys.shape[0], dtype=np.bool_)
        pos, found = _positions(snap.keys, keys)
        ok = found.copy()
        ok[found] = step - snap.pulled[pos[found]] <= self.staleness
        return ok

    def bias_fresh(self, step: int) -> bool:
        snap = self._snap
        return self.staleness > 0 and snap.bias is not None and step - snap.bias_pulled <= self.staleness

    def rows(self, table: str, keys: Keys) -> npt.NDArray[np.float64]:
        """The cached rows of keys that `fresh` accepted at an earlier or equal step."""
        snap = self._snap
        pos, found = _positions(snap.keys, keys)
        assert found.all(), "a key judged fresh left the cache"
        return snap.rows[table][pos]

    def pulled_at(self, keys: Keys) -> npt.NDArray[np.int64]:
        snap = self._snap
        pos, _ = _positions(snap.keys, keys)
        return snap.pulled[pos]

    @property
    def bias_pulled(self) -> int:
        return self._snap.bias_pulled

    @property
    def bias(self) -> npt.NDArray[np.float64]:
        assert self._snap.bias is not None
        return self._snap.bias

    def store(
        self,
        keys: Keys,
        rows: dict[str, npt.NDArray[np.float64]],
        pulled: npt.NDArray[np.int64],
        bias: npt.NDArray[np.float64],
        bias_pulled: int,
        step: int,
    ) -> None:
        """Records a step's rows (sorted unique keys) and drops rows too stale for step + 1."""
        if self.staleness == 0:
            return
        snap = self._snap
        _, seen = _positions(keys, snap.keys) if keys.shape[0] else (None, np.zeros(snap.keys.shape[0], dtype=np.bool_))
        keep = ~seen & (step + 1 - snap.pulled <= self.staleness)
        live = pulled >= step + 1 - self.staleness
        all_keys = np.concatenate([snap.keys[keep], keys[live]])
        order = np.argsort(all_keys, kind="stable")
        new_rows = {}
        for t, r in rows.items():
            old = snap.rows[t]
            old = old[keep] if old.shape[0] else np.zeros((0, r.shape[1]))
            new_rows[t] = np.concatenate([old, r[live]])[order]
        new_pulled = np.concatenate([snap.pulled[keep], pulled[live]])[order]
        self._snap = CacheSnapshot(all_keys[order], new_rows, new_pulled, bias.copy(), bias_pulled)
