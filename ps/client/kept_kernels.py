"""numba kernels of the rows a PS client keeps (ps.client.kept_rows), each with a plain
reference its tests compare against. Entries live in a CompactHashMap whose two row words
hold an int64 entry index; `row_id` its row's id on the shard (-1: unknown for the shard's
layout); `valid` whether the entry's copy is still the shard's row.

Each kernel finds its keys' entries first (find_ids, its probes prefetched), then visits
the entries with their row prefetched GATHER_AHEAD ahead: entries sit at random places in
the arrays, and one loop that probed and then read each entry kept few misses in flight
(docs/design/prefetched-gathers.md). leased_copies does so a chunk at a time, as it
stops at the first key without a copy."""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.format.hashmap_kernels import find_ids
from ctr.runtime.prefetch import GATHER_AHEAD, prefetch_ends, prefetch_item

U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
B = npt.NDArray[np.bool_]
LEASE_CHUNK = 512  # keys leased_copies finds at a time before checking them


@nb.njit(cache=True, inline="always")
def _prefetch_copy(rows: F64, valid: B, stamp: I64, e: int) -> None:
    """Entry e's row, flag and stamp (the caller tests the bounds in its loop: a test
    inside a helper kept LLVM from dropping the loop's bounds work)."""
    prefetch_ends(rows, e)
    prefetch_item(valid, e)  # type: ignore[call-arg]
    prefetch_item(stamp, e)  # type: ignore[call-arg]


@nb.njit(cache=True, nogil=True)
def take_known(slots: U32, valid: B, row_id: I64, rows: F64, keys: U64) -> tuple[B, B, I64, F64]:
    """(which keys have an entry with a row id, whether each of those holds a valid copy,
    their row ids, their rows), the last three over the known keys in key order; an
    invalid copy's row is whatever the entry last held."""
    found = find_ids(slots, keys)
    known = np.zeros(keys.shape[0], dtype=np.bool_)
    entries = np.empty(keys.shape[0], dtype=np.int64)
    n = 0
    m = keys.shape[0]
    for i in range(m):
        if i + GATHER_AHEAD < m and found[i + GATHER_AHEAD] >= 0:
            prefetch_item(row_id, found[i + GATHER_AHEAD])  # type: ignore[call-arg]
        e = found[i]
        if e >= 0 and row_id[e] >= 0:
            known[i] = True
            entries[n] = e
            n += 1
    fresh = np.empty(n, dtype=np.bool_)
    ids = np.empty(n, dtype=np.int64)
    out = np.empty((n, rows.shape[1]), dtype=np.float64)
    for j in range(n):
        if j + GATHER_AHEAD < n:
            prefetch_ends(rows, entries[j + GATHER_AHEAD])
            prefetch_item(valid, entries[j + GATHER_AHEAD])  # type: ignore[call-arg]
        fresh[j] = valid[entries[j]]
        ids[j] = row_id[entries[j]]
        out[j] = rows[entries[j]]
    return known, fresh, ids, out


@nb.njit(cache=True, nogil=True)
def add_deltas(slots: U32, valid: B, rows: F64, keys: U64, deltas: F64, drop: B, stamp: I64, epoch: int) -> None:
    """A push landed: rows of valid copies take the delta (row + delta, the shard's
    arithmetic) where not `drop`, and are stamped with the table's `epoch` after the push
    (write-leases.md); copies of `drop` keys become invalid."""
    found = find_ids(slots, keys)
    n = keys.shape[0]
    for i in range(n):
        if i + GATHER_AHEAD < n and found[i + GATHER_AHEAD] >= 0:
            _prefetch_copy(rows, valid, stamp, found[i + GATHER_AHEAD])
        e = found[i]
        if e < 0:
            continue
        if drop[i]:
            valid[e] = False
        elif valid[e]:
            for j in range(rows.shape[1]):
                rows[e, j] = rows[e, j] + deltas[i, j]
            stamp[e] = epoch


@nb.njit(cache=True, nogil=True)
def set_rows(slots: U32, valid: B, rows: F64, stamp: I64, keys: U64, new_rows: F64) -> None:
    """Another writer changed these rows: kept keys' copies become `new_rows`, valid, at no
    known epoch (stamp 0); keys with no entry are skipped. One pass: the masked gathers and
    scatters it replaces cost a two-rank LR pull several times its lookups."""
    found = find_ids(slots, keys)
    n = keys.shape[0]
    for i in range(n):
        if i + GATHER_AHEAD < n and found[i + GATHER_AHEAD] >= 0:
            _prefetch_copy(rows, valid, stamp, found[i + GATHER_AHEAD])
        e = found[i]
        if e < 0:
            continue
        for j in range(rows.shape[1]):
            rows[e, j] = new_rows[i, j]
        valid[e] = True
        stamp[e] = 0


@nb.njit(cache=True, nogil=True)
def leased_copies(slots: U32, valid: B, row_id: I64, stamp: I64, rows: F64, keys: U64, epoch: int) -> tuple[bool, F64]:
    """(whether every key holds a valid copy with a row id, stamped at `epoch`; their rows
    in key order when it does, else none): a pull a write lease makes unnecessary."""
    # found a chunk at a time: a leased pull ends at its first key without a copy (a key new
    # to this worker, early in most batches of a long tail), so a find over every key first
    # cost that case the whole pull's finds; within a chunk the probes and entries prefetch
    n = keys.shape[0]
    entries = np.empty(n, dtype=np.int64)
    for lo in range(0, n, LEASE_CHUNK):
        hi = min(n, lo + LEASE_CHUNK)
        entries[lo:hi] = find_ids(slots, keys[lo:hi])
        for i in range(lo, hi):
            if i + GATHER_AHEAD < hi and entries[i + GATHER_AHEAD] >= 0:
                prefetch_item(row_id, entries[i + GATHER_AHEAD])  # type: ignore[call-arg]
                prefetch_item(valid, entries[i + GATHER_AHEAD])  # type: ignore[call-arg]
                prefetch_item(stamp, entries[i + GATHER_AHEAD])  # type: ignore[call-arg]
            e = entries[i]
            if e < 0 or row_id[e] < 0 or not valid[e] or stamp[e] != epoch:
                return False, np.empty((0, rows.shape[1]), dtype=np.float64)
    out = np.empty((n, rows.shape[1]), dtype=np.float64)
    for i in range(n):
        if i + GATHER_AHEAD < n:
            prefetch_ends(rows, entries[i + GATHER_AHEAD])
        out[i] = rows[entries[i]]
    return True, out


def take_known_reference(entries: dict[int, int], valid: B, row_id: I64, rows: F64, keys: U64) -> tuple[B, B, I64, F64]:
    """Plain reference of take_known over a dict key -> entry."""
    known = [int(k) in entries and int(row_id[entries[int(k)]]) >= 0 for k in keys.tolist()]
    chosen = [entries[int(k)] for k, h in zip(keys.tolist(), known, strict=True) if h]
    return (
        np.array(known, dtype=np.bool_),
        valid[chosen].astype(np.bool_),
        row_id[chosen].astype(np.int64),
        rows[chosen].reshape(-1, rows.shape[1]),
    )


def add_deltas_reference(
    entries: dict[int, int], valid: B, rows: F64, keys: U64, deltas: F64, drop: B, stamp: I64, epoch: int
) -> None:
    """Plain reference of add_deltas over a dict key -> entry."""
    for i, k in enumerate(keys.tolist()):
        e = entries.get(int(k), -1)
        if e < 0:
            continue
        if drop[i]:
            valid[e] = False
        elif valid[e]:
            rows[e] = rows[e] + deltas[i]
            stamp[e] = epoch


def set_rows_reference(entries: dict[int, int], valid: B, rows: F64, stamp: I64, keys: U64, new_rows: F64) -> None:
    """Plain reference of set_rows over a dict key -> entry."""
    for i, k in enumerate(keys.tolist()):
        e = entries.get(int(k), -1)
        if e >= 0:
            rows[e] = new_rows[i]
            valid[e] = True
            stamp[e] = 0


def leased_copies_reference(
    entries: dict[int, int], valid: B, row_id: I64, stamp: I64, rows: F64, keys: U64, epoch: int
) -> tuple[bool, F64]:
    """Plain reference of leased_copies over a dict key -> entry."""
    chosen = [entries.get(int(k), -1) for k in keys.tolist()]
    if not all(e >= 0 and row_id[e] >= 0 and valid[e] and stamp[e] == epoch for e in chosen):
        return False, np.empty((0, rows.shape[1]), dtype=np.float64)
    return True, rows[chosen].reshape(-1, rows.shape[1])
