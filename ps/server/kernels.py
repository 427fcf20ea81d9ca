"""numba kernels of the shard's sparse tables.

A table keeps its rows out of line: the hashmap maps a key to a dense row id, `state[id]`
holds the row's W float64 optimizer values and `meta[id]` its metadata words:
update count | last update time (s) | update sequence lo | hi. Probes then touch only
the hashmap's 12-byte slots, whatever the row width (an FFM row can be kilobytes).
Row ids < 0 stand for absent keys, which read as their deterministic initial rows
(ctr.model.optim.init_row) and are never inserted by a pull.

A call's row ids are random in the arrays, so each kernel that visits rows by id
prefetches the row GATHER_AHEAD ids ahead (docs/design/prefetched-gathers.md).
"""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.model.optim import init_row, step, weight_of
from ctr.routing import owner, owner_reference
from ctr.runtime.prefetch import GATHER_AHEAD, prefetch_ends, prefetch_item, prefetch_word

F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]
U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
B = npt.NDArray[np.bool_]
META_WORDS = 4


@nb.njit(cache=True, nogil=True)
def gather_state(state: F64, ids: I64, keys: U64, d: int, p: F64) -> F64:
    """State rows [n, width] of keys: stored, or initial where absent."""
    width = state.shape[1]
    n = ids.shape[0]
    out = np.empty((n, width), dtype=np.float64)
    for i in range(n):
        if i + GATHER_AHEAD < n and ids[i + GATHER_AHEAD] >= 0:
            prefetch_ends(state, ids[i + GATHER_AHEAD])
        r = ids[i]
        if r < 0:
            init_row(out[i], d, keys[i], p)
        else:
            out[i] = state[r]
    return out


@nb.njit(cache=True, nogil=True)
def gather_weights(state: F64, ids: I64, keys: U64, d: int, p: F64) -> F32:
    """Weights [n, d] of keys: from stored state, or the initial weights where absent."""
    n = ids.shape[0]
    out = np.empty((n, d), dtype=np.float32)
    fresh = np.empty(state.shape[1], dtype=np.float64)
    for i in range(n):
        if i + GATHER_AHEAD < n and ids[i + GATHER_AHEAD] >= 0:
            prefetch_ends(state, ids[i + GATHER_AHEAD])
        r = ids[i]
        if r < 0:
            init_row(fresh, d, keys[i], p)
            row = fresh
        else:
            row = state[r]
        for j in range(d):
            out[i, j] = weight_of(row, d, j, p)
    return out


@nb.njit(cache=True, nogil=True)
def init_rows_at(state: F64, ids: I64, keys: U64, d: int, p: F64) -> None:
    """Writes the initial row of each key at its new row id (new ids are consecutive: no
    prefetch)."""
    for i in range(ids.shape[0]):
        init_row(state[ids[i]], d, keys[i], p)


@nb.njit(cache=True, inline="always")
def _stamp(meta: U32, r: int, seq: int, now: int) -> None:
    meta[r, 0] += np.uint32(1)
    meta[r, 1] = np.uint32(now & 0xFFFFFFFF)
    meta[r, 2] = np.uint32(seq & 0xFFFFFFFF)
    meta[r, 3] = np.uint32(seq >> 32)


@nb.njit(cache=True, nogil=True)
def apply_gradients(state: F64, meta: U32, ids: I64, grads: F64, d: int, p: F64, seq: int, now: int) -> None:
    """One optimizer step per row with its pushed gradient, and the metadata stamp."""
    n = ids.shape[0]
    for i in range(n):
        if i + GATHER_AHEAD < n:
            prefetch_ends(state, ids[i + GATHER_AHEAD])
            prefetch_word(meta, ids[i + GATHER_AHEAD], 0)  # type: ignore[call-arg]
        step(state[ids[i]], grads[i], d, p)
        _stamp(meta, ids[i], seq, now)


@nb.njit(cache=True, nogil=True)
def merge_deltas(state: F64, meta: U32, ids: I64, deltas: F64, seq: int, now: int) -> None:
    """Adds each row's state delta, exactly: under a lossy push codec an accumulator column
    (n, acc, v) may dip below 0 until error feedback brings the rest; the optimizer reads
    accumulators as max(value, 0). Clamping here would break the sum the worker's view
    relies on (shard state plus the worker's residual = the uncompressed state)."""
    n = ids.shape[0]
    for i in range(n):
        if i + GATHER_AHEAD < n:
            prefetch_ends(state, ids[i + GATHER_AHEAD])
            prefetch_word(meta, ids[i + GATHER_AHEAD], 0)  # type: ignore[call-arg]
        row = state[ids[i]]
        for c in range(row.shape[0]):
            row[c] += deltas[i, c]
        _stamp(meta, ids[i], seq, now)


@nb.njit(cache=True, nogil=True, inline="always")
def _seq(meta: U32, r: int) -> np.int64:
    """A row's update sequence (meta words 2 and 3: lo, hi)."""
    return np.int64(meta[r, 2]) | (np.int64(meta[r, 3]) << np.int64(32))


@nb.njit(cache=True, nogil=True)
def rows_updated_after(meta: U32, n: int, seq: int) -> I64:
    """Ids among the first n rows whose update sequence is greater than seq."""
    out = np.empty(n, dtype=np.int64)
    m = 0
    for r in range(n):
        if _seq(meta, r) > seq:
            out[m] = r
            m += 1
    return out[:m].copy()


@nb.njit(cache=True, nogil=True)
def merged_within(state: F64, ids: I64, keys: U64, deltas: F64, d: int, p: F64, limit: float) -> bool:
    """Whether every row stays finite and within +-limit once its delta is added (absent
    keys start from their initial row): checked before anything is applied."""
    base = np.empty(deltas.shape[1], dtype=np.float64)
    n = ids.shape[0]
    for i in range(n):
        if i + GATHER_AHEAD < n and ids[i + GATHER_AHEAD] >= 0:
            prefetch_ends(state, ids[i + GATHER_AHEAD])
        if ids[i] < 0:
            init_row(base, d, keys[i], p)
        else:
            base[:] = state[ids[i]]
        for c in range(base.shape[0]):
            if not abs(base[c] + deltas[i, c]) <= limit:
                return False
    return True


@nb.njit(cache=True, nogil=True)
def all_within(values: F64, limit: float) -> bool:
    """Every value finite and |value| <= limit (NaN fails every comparison)."""
    flat = values.reshape(-1)
    for i in range(flat.shape[0]):  # noqa: SIM110 - numba compiles the loop, not all()
        if not abs(flat[i]) <= limit:
            return False
    return True


@nb.njit(cache=True, nogil=True)
def gather_raw(state: F64, meta: U32, ids: I64) -> U32:
    """Rows as stored, in one pass: each row's float64 state as uint32 word pairs, then its
    metadata words (a checkpoint's snapshot, taken under the shard lock)."""
    width = state.shape[1]
    words = 2 * width + meta.shape[1]
    out = np.empty((ids.shape[0], words), dtype=np.uint32)
    bits = state.view(np.uint32)
    n = ids.shape[0]
    for i in range(n):
        if i + GATHER_AHEAD < n:
            prefetch_ends(state, ids[i + GATHER_AHEAD])
            prefetch_word(meta, ids[i + GATHER_AHEAD], 0)  # type: ignore[call-arg]
        r = ids[i]
        for c in range(2 * width):
            out[i, c] = bits[r, c]
        for c in range(meta.shape[1]):
            out[i, 2 * width + c] = meta[r, c]
    return out


@nb.njit(cache=True, nogil=True)
def row_seqs(meta: U32, ids: I64) -> I64:
    """The update sequence of each row's last write (0: never written)."""
    n = ids.shape[0]
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        if i + GATHER_AHEAD < n:
            prefetch_word(meta, ids[i + GATHER_AHEAD], 0)  # type: ignore[call-arg]
        out[i] = _seq(meta, ids[i])
    return out


@nb.njit(cache=True, nogil=True)
def push_conflicts(writer: U64, before: U64, meta: U32, found: I64, client: np.uint64, recorded: I64, with_recorded: bool) -> B:
    """Where a push by `client` onto rows `found` (-1: absent) lands on a row its copy is not
    (SparseTable.conflicts says when): one pass where the array form took a dozen."""
    n = found.shape[0]
    out = np.ones(n, dtype=np.bool_)
    for i in range(n):
        if i + GATHER_AHEAD < n and found[i + GATHER_AHEAD] >= 0:
            prefetch_item(writer, found[i + GATHER_AHEAD])  # type: ignore[call-arg]
            if with_recorded:  # only then are a row's `before` and sequence read
                prefetch_item(before, found[i + GATHER_AHEAD])
                prefetch_word(meta, found[i + GATHER_AHEAD], 0)
        r = found[i]
        if r < 0:
            out[i] = recorded[i] >= 0 if with_recorded else True
            continue
        mine = writer[r] == client
        if not with_recorded:
            out[i] = not mine
            continue
        rec = recorded[i]
        only_mine = mine and np.int64(before[r]) <= max(rec, np.int64(0))
        out[i] = not only_mine if rec < 0 else (_seq(meta, r) != rec) and not only_mine
    return out


@nb.njit(cache=True, nogil=True)
def mark_writer(writer: U64, before: U64, meta: U32, ids: I64, client: np.uint64) -> None:
    """Records `client` as the rows' writer, keeping in `before` the sequence of the last
    write by someone else where the writer changes."""
    n = ids.shape[0]
    for i in range(n):
        if i + GATHER_AHEAD < n:
            prefetch_item(writer, ids[i + GATHER_AHEAD])  # type: ignore[call-arg]
            prefetch_item(before, ids[i + GATHER_AHEAD])
            prefetch_word(meta, ids[i + GATHER_AHEAD], 0)
        r = ids[i]
        if writer[r] != client:
            before[r] = np.uint64(_seq(meta, r))
            writer[r] = client


def push_conflicts_reference(writer: U64, before: U64, meta: U32, found: I64, client: np.uint64, recorded: I64 | None) -> B:
    """Plain reference of push_conflicts (recorded None: without)."""
    out = np.ones(found.shape[0], dtype=np.bool_)
    for i, r in enumerate(found.tolist()):
        if r < 0:
            out[i] = True if recorded is None else recorded[i] >= 0
            continue
        mine = writer[r] == client
        if recorded is None:
            out[i] = not mine
            continue
        rec = int(recorded[i])
        seq = int(meta[r, 2]) | (int(meta[r, 3]) << 32)
        only_mine = mine and int(before[r]) <= max(rec, 0)
        out[i] = (not only_mine) if rec < 0 else (seq != rec and not only_mine)
    return out


KEYS_OK, KEYS_UNSORTED, KEYS_ELSEWHERE, KEY_ZERO = 0, 1, 2, 3  # key_fault's answers


@nb.njit(cache=True, nogil=True)
def key_fault(keys: U64, count: int, index: int) -> int:
    """What is wrong with a call's keys for shard `index` of `count`, in one pass (three numpy
    passes cost ~29 us a call of ~300 keys, a tenth of a shard's push): KEYS_UNSORTED when
    they are not strictly ascending, else KEY_ZERO when the first is 0, else KEYS_ELSEWHERE
    when one belongs to another shard, else KEYS_OK."""
    n = keys.shape[0]
    for i in range(1, n):
        if keys[i] <= keys[i - 1]:
            return KEYS_UNSORTED
    if n and keys[0] == 0:
        return KEY_ZERO
    for i in range(n):
        if owner(keys[i], count) != index:
            return KEYS_ELSEWHERE
    return KEYS_OK


def key_fault_reference(keys: U64, count: int, index: int) -> int:
    """key_fault in numpy, for the tests."""
    if keys.shape[0] > 1 and not bool(np.all(keys[1:] > keys[:-1])):
        return KEYS_UNSORTED
    if keys.shape[0] and keys[0] == 0:
        return KEY_ZERO
    if any(owner_reference(int(k), count) != index for k in keys):
        return KEYS_ELSEWHERE
    return KEYS_OK
