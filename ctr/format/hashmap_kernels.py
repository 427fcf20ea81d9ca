"""numba kernels of the compact hashmap: open addressing with linear probing.

A table is a uint32 array `slots[capacity, 2 + row_words]`: words 0-1 hold the uint64 key
(little-endian halves), the rest the row (float32 bits or uint32 metadata). Key 0 marks an
empty slot. Key and row share a slot so one probe touches one cache line. The home slot is
`(((key * FIB mod 2^64) >> 32) * capacity) >> 32` (Fibonacci mix, then multiply-shift range
reduction), so any capacity works and
images can be sized to a load factor of about 0.88.
"""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.runtime.prefetch import prefetch_word

U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
FIB = np.uint64(0x9E3779B97F4A7C15)
# keys whose home slot a find prefetches before probing the current one: 75k finds in a
# 400k-key map (8 MB) took 2.8-3.7 ms plain, 1.5-2.2 at 16 ahead, 1.7-2.5 at 32 (2026-12-06)
FIND_AHEAD = 16


@nb.njit(cache=True, inline="always")
def slot_key(slots: U32, i: int) -> np.uint64:
    return np.uint64(slots[i, 0]) | (np.uint64(slots[i, 1]) << np.uint64(32))


@nb.njit(cache=True, inline="always")
def home_slot(key: np.uint64, capacity: int) -> int:
    mixed = key * FIB  # Fibonacci hashing: structured keys (small ids) still spread
    return int(np.int64(((mixed >> np.uint64(32)) * np.uint64(capacity)) >> np.uint64(32)))


@nb.njit(cache=True, nogil=True)
def find_ahead(slots: U32, keys: U64) -> None:
    """Prefetches the home slots of the first FIND_AHEAD keys: a find loop's start. The
    loop then prefetches key q + FIND_AHEAD's under an explicit `q + FIND_AHEAD < n` (the
    same test inside a helper took twice as long: LLVM no longer drops the bounds work)."""
    for q in range(min(FIND_AHEAD, keys.shape[0])):
        prefetch_word(slots, home_slot(keys[q], slots.shape[0]), 0)  # type: ignore[call-arg]


@nb.njit(cache=True, inline="always")
def probe(slots: U32, key: np.uint64) -> int:
    """The slot holding key, -1 when absent (linear probing from its home slot)."""
    cap = slots.shape[0]
    i = home_slot(key, cap)
    for _ in range(cap):
        k = slot_key(slots, i)
        if k == key:
            return i
        if k == np.uint64(0):
            return -1
        i += 1
        if i == cap:
            i = 0
    return -1


@nb.njit(cache=True, nogil=True)
def find_slots(slots: U32, keys: U64) -> I64:
    """Slot index of each key, -1 where absent."""
    n = keys.shape[0]
    out = np.empty(n, dtype=np.int64)
    find_ahead(slots, keys)
    for q in range(n):
        if q + FIND_AHEAD < n:
            prefetch_word(slots, home_slot(keys[q + FIND_AHEAD], slots.shape[0]), 0)  # type: ignore[call-arg]
        out[q] = probe(slots, keys[q])
    return out


@nb.njit(cache=True, nogil=True, inline="always")
def id_of(slots: U32, key: np.uint64) -> np.int64:
    """For a map of key -> int64 id (the id in the row's two words, low word first): the
    key's id, -1 where absent."""
    i = probe(slots, key)
    if i < 0:
        return np.int64(-1)
    return np.int64(slots[i, 2]) | (np.int64(slots[i, 3]) << np.int64(32))


@nb.njit(cache=True, nogil=True)
def find_ids(slots: U32, keys: U64) -> I64:
    """id_of each key."""
    n = keys.shape[0]
    out = np.empty(n, dtype=np.int64)
    find_ahead(slots, keys)
    for q in range(n):
        if q + FIND_AHEAD < n:
            prefetch_word(slots, home_slot(keys[q + FIND_AHEAD], slots.shape[0]), 0)  # type: ignore[call-arg]
        out[q] = id_of(slots, keys[q])
    return out


@nb.njit(cache=True, nogil=True)
def insert_keys(slots: U32, keys: U64) -> tuple[I64, int]:
    """Slot of each key, claiming an empty slot for new ones; returns (slots, new count).

    The caller keeps the load below 1 so a free slot always exists. Key 0 is invalid.
    """
    cap = slots.shape[0]
    n = keys.shape[0]
    out = np.empty(n, dtype=np.int64)
    added = 0
    find_ahead(slots, keys)
    for q in range(n):
        if q + FIND_AHEAD < n:
            prefetch_word(slots, home_slot(keys[q + FIND_AHEAD], cap), 0)  # type: ignore[call-arg]
        key = keys[q]
        i = home_slot(key, cap)
        while True:
            k = slot_key(slots, i)
            if k == key:
                break
            if k == np.uint64(0):
                slots[i, 0] = np.uint32(key & np.uint64(0xFFFFFFFF))
                slots[i, 1] = np.uint32(key >> np.uint64(32))
                added += 1
                break
            i += 1
            if i == cap:
                i = 0
        out[q] = i
    return out, added


@nb.njit(cache=True, nogil=True)
def delete_keys(slots: U32, keys: U64) -> int:
    """Removes keys (absent ones are skipped) by backward-shift deletion: the entries after a
    freed slot that would no longer be found from their home slot move back into it, so no
    tombstone slows later probes. Returns how many keys were removed."""
    cap = slots.shape[0]
    width = slots.shape[1]
    removed = 0
    for q in range(keys.shape[0]):
        found = probe(slots, keys[q])
        if found < 0:
            continue
        hole = found
        j = found
        while True:
            j += 1
            if j == cap:
                j = 0
            k = slot_key(slots, j)
            if k == np.uint64(0):
                break
            home = home_slot(k, cap)
            # j's entry may fill the hole when its home is not cyclically in (hole, j]
            if (j > hole and (home <= hole or home > j)) or (j < hole and home <= hole and home > j):
                for w in range(width):
                    slots[hole, w] = slots[j, w]
                hole = j
        for w in range(width):
            slots[hole, w] = 0
        removed += 1
    return removed


@nb.njit(cache=True, nogil=True)
def rehash_into(old: U32, new: U32) -> None:
    """Moves every occupied slot of old into the empty table new (same row width)."""
    cap = new.shape[0]
    width = old.shape[1]
    for s in range(old.shape[0]):
        key = slot_key(old, s)
        if key == np.uint64(0):
            continue
        i = home_slot(key, cap)
        while slot_key(new, i) != np.uint64(0):
            i += 1
            if i == cap:
                i = 0
        for w in range(width):
            new[i, w] = old[s, w]


@nb.njit(cache=True, nogil=True)
def occupied_slots(slots: U32) -> I64:
    """Indices of occupied slots, in slot order."""
    n = 0
    for i in range(slots.shape[0]):
        if slots[i, 0] != 0 or slots[i, 1] != 0:
            n += 1
    out = np.empty(n, dtype=np.int64)
    j = 0
    for i in range(slots.shape[0]):
        if slots[i, 0] != 0 or slots[i, 1] != 0:
            out[j] = i
            j += 1
    return out


@nb.njit(cache=True, nogil=True)
def gather_rows(rows: npt.NDArray[np.float32], found: I64) -> npt.NDArray[np.float32]:
    """rows[found[i]] for each i; zeros where found[i] < 0 (an absent key has a zero row)."""
    dim = rows.shape[1]
    out = np.zeros((found.shape[0], dim), dtype=np.float32)
    for i in range(found.shape[0]):
        s = found[i]
        if s >= 0:
            for d in range(dim):
                out[i, d] = rows[s, d]
    return out


def find_slots_reference(slots: U32, keys: U64) -> list[int]:
    """Plain-Python reference of find_slots."""
    cap = slots.shape[0]
    out = []
    for key in keys.tolist():
        i = ((((key * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF) >> 32) * cap) >> 32
        found = -1
        for _ in range(cap):
            k = int(slots[i, 0]) | (int(slots[i, 1]) << 32)
            if k == key:
                found = i
                break
            if k == 0:
                break
            i = (i + 1) % cap
        out.append(found)
    return out
