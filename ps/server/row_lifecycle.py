"""One shard's state of the row lifecycle (ps/server/lifecycle.py has the policy and its
kernels): the admission filters, the eviction clocks and counts, and the keys evicted since
the last cut and the last export. The shard calls every method under its lock."""

from __future__ import annotations

import logging
import time

import numpy as np
import numpy.typing as npt

from ps.api import Lifecycle
from ps.server.lifecycle import CountingBloom, to_evict
from ps.server.tables import SparseTable

log = logging.getLogger("ps")

U64 = npt.NDArray[np.uint64]


def gone(evicted: list[U64], tables: list[SparseTable]) -> U64:
    """Keys evicted that none of `tables` holds again (a key may come back before the cut or
    export that would carry its tombstone)."""
    if not evicted:
        return np.zeros(0, dtype=np.uint64)
    keys = np.unique(np.concatenate(evicted))
    back = np.zeros(keys.shape[0], dtype=np.bool_)
    for t in tables:
        back |= t.find(keys) >= 0
    return keys[~back]


class RowLifecycle:
    def __init__(self, policy: Lifecycle) -> None:
        self.policy = policy
        self._blooms: dict[str, CountingBloom] = {}
        self.not_admitted: dict[str, int] = {}
        self.evicted: dict[str, int] = {}
        self._last_sweep: dict[str, tuple[float, int]] = {}  # per table: time and update seq
        self._tombstones_cut: dict[str, list[U64]] = {}  # evicted since the last cut
        self._tombstones_export: list[U64] = []  # evicted since the last export

    @property
    def admits(self) -> bool:
        return self.policy.admit_after > 1

    @property
    def drops_rows(self) -> bool:
        """A push may not land on every row it names (admission drops it, eviction follows)."""
        return self.admits or self.policy.evicts

    def load(self, clocks: dict[str, dict[str, float]], counters: dict[str, npt.NDArray[np.uint8]]) -> None:
        """The state a cut recorded: its clocks and counts, and the filters' counters (a
        filter stored at another size than --bloom-mb starts empty). No tombstones."""
        self._last_sweep = {n: (float(c["sweep_time"]), int(c["sweep_seq"])) for n, c in clocks.items()}
        self.not_admitted = {n: int(c["not_admitted"]) for n, c in clocks.items()}
        self.evicted = {n: int(c["evicted"]) for n, c in clocks.items()}
        self._blooms.clear()
        for name, c in counters.items():
            if c.shape[0] != CountingBloom.size(self.policy.bloom_counters):
                log.warning("table %s: the stored admission filter has another size than --bloom-mb; it starts empty", name)
                continue
            self._blooms[name] = CountingBloom.of(c)
        self._tombstones_cut.clear()
        self._tombstones_export.clear()

    def clocks(self, names: list[str]) -> dict[str, dict[str, float]]:
        """What a cut records besides the filters, for the tables `names`."""
        return {
            name: {
                "sweep_time": self._last_sweep.get(name, (0.0, 0))[0],
                "sweep_seq": self._last_sweep.get(name, (0.0, 0))[1],
                "not_admitted": self.not_admitted.get(name, 0),
                "evicted": self.evicted.get(name, 0),
            }
            for name in names
        }

    def counters(self) -> dict[str, npt.NDArray[np.uint8]]:
        """Copies of the filters' counters, for a cut."""
        return {name: b.counters.copy() for name, b in self._blooms.items()}

    def admit(self, t: SparseTable, keys: U64, values: npt.NDArray[np.float64]) -> tuple[U64, npt.NDArray[np.float64]]:
        """The push less the rows of keys the table does not hold and has not seen
        `admit_after` times (this sighting counted)."""
        absent = t.find(keys) < 0
        if not absent.any():
            return keys, values
        bloom = self._blooms.get(t.name)
        if bloom is None:
            bloom = self._blooms[t.name] = CountingBloom(self.policy.bloom_counters)
        keep = ~absent
        keep[absent] = bloom.admitted(keys[absent], self.policy.admit_after)
        self.not_admitted[t.name] = self.not_admitted.get(t.name, 0) + int((~keep).sum())
        return keys[keep], values.reshape(keys.shape[0], -1)[keep]

    def evict(self, t: SparseTable, update_seq: int) -> None:
        """Evicts expired rows (a sweep every sweep_every_s, or every quarter of ttl_updates
        updates) and, once the table is 5% past max_rows, the least recently updated down
        to it; their keys become tombstones for the next cut and export."""
        policy = self.policy
        now = time.time()
        last_time, last_seq = self._last_sweep.get(t.name, (0.0, 0))
        sweep = (policy.ttl_s > 0 and now - last_time >= policy.sweep_every_s) or (
            policy.ttl_updates > 0 and update_seq - last_seq >= max(1, policy.ttl_updates // 4)
        )
        over = policy.max_rows > 0 and t.size > policy.max_rows * 1.05
        if not (sweep or over):
            return
        if sweep:
            self._last_sweep[t.name] = (now, update_seq)
        removed = t.delete_rows(to_evict(t.meta, t.keys, t.size, int(now), update_seq, policy, sweep))
        if removed.shape[0]:
            self.evicted[t.name] = self.evicted.get(t.name, 0) + int(removed.shape[0])
            self._tombstones_cut.setdefault(t.name, []).append(removed)
            self._tombstones_export.append(removed)

    def take_cut_tombstones(self, t: SparseTable) -> U64:
        """The keys of `t` evicted since the last cut and not back; the next cut starts afresh."""
        return gone(self._tombstones_cut.pop(t.name, []), [t])

    def take_export_tombstones(self, tables: list[SparseTable]) -> U64:
        """The keys evicted since the last export that no table holds again."""
        keys = gone(self._tombstones_export, tables)
        self._tombstones_export.clear()
        return keys
