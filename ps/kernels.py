"""numba kernels of the shard's sparse tables, over the hashmap's slot array.

A slot of a table with W state values is uint32[2 + 2W + 4]: the key, W float64 state
values, then metadata words: update count | last update time (s) | update sequence lo | hi.
`state` below is the slot array viewed as float64 ([capacity, W + 3]: key, state, meta), so
state value c of slot s is state[s, 1 + c]. Slots < 0 stand for absent keys, which read as
their deterministic initial rows (ctr.optim.init_row) and are never inserted by a pull.
"""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.optim import init_row, step, weight_of

F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]
U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
META_WORDS = 4


@nb.njit(cache=True, nogil=True)
def gather_state(state: F64, slots: I64, keys: U64, width: int, d: int, p: F64) -> F64:
    """State rows [n, width] of keys: stored, or initial where absent."""
    out = np.empty((slots.shape[0], width), dtype=np.float64)
    for i in range(slots.shape[0]):
        s = slots[i]
        if s < 0:
            init_row(out[i], d, keys[i], p)
        else:
            for c in range(width):
                out[i, c] = state[s, 1 + c]
    return out


@nb.njit(cache=True, nogil=True)
def gather_weights(state: F64, slots: I64, keys: U64, width: int, d: int, p: F64) -> F32:
    """Weights [n, d] of keys: from stored state, or the initial weights where absent."""
    out = np.empty((slots.shape[0], d), dtype=np.float32)
    row = np.empty(width, dtype=np.float64)
    for i in range(slots.shape[0]):
        s = slots[i]
        if s < 0:
            init_row(row, d, keys[i], p)
        else:
            for c in range(width):
                row[c] = state[s, 1 + c]
        for j in range(d):
            out[i, j] = weight_of(row, d, j, p)
    return out


@nb.njit(cache=True, nogil=True)
def init_slots(state: F64, slots: I64, fresh: npt.NDArray[np.bool_], keys: U64, width: int, d: int, p: F64) -> None:
    """Writes the initial row of each freshly inserted key."""
    row = np.empty(width, dtype=np.float64)
    for i in range(slots.shape[0]):
        if fresh[i]:
            init_row(row, d, keys[i], p)
            for c in range(width):
                state[slots[i], 1 + c] = row[c]


@nb.njit(cache=True, inline="always")
def _stamp(words: U32, s: int, meta: int, seq: int, now: int) -> None:
    words[s, meta] += np.uint32(1)
    words[s, meta + 1] = np.uint32(now & 0xFFFFFFFF)
    words[s, meta + 2] = np.uint32(seq & 0xFFFFFFFF)
    words[s, meta + 3] = np.uint32(seq >> 32)


@nb.njit(cache=True, nogil=True)
def apply_gradients(state: F64, words: U32, slots: I64, grads: F64, width: int, d: int, p: F64, seq: int, now: int) -> None:
    """One optimizer step per row with its pushed gradient, and the metadata stamp."""
    row = np.empty(width, dtype=np.float64)
    meta = 2 * width  # words exclude the key: state words, then metadata
    for i in range(slots.shape[0]):
        s = slots[i]
        for c in range(width):
            row[c] = state[s, 1 + c]
        step(row, grads[i], d, p)
        for c in range(width):
            state[s, 1 + c] = row[c]
        _stamp(words, s, meta, seq, now)


@nb.njit(cache=True, nogil=True)
def merge_deltas(
    state: F64, words: U32, slots: I64, deltas: F64, width: int, acc_lo: int, acc_hi: int, seq: int, now: int
) -> None:
    """Adds each row's state delta; accumulator columns [acc_lo, acc_hi) never go below 0."""
    meta = 2 * width  # words exclude the key: state words, then metadata
    for i in range(slots.shape[0]):
        s = slots[i]
        for c in range(width):
            v = state[s, 1 + c] + deltas[i, c]
            if acc_lo <= c < acc_hi and v < 0.0:
                v = 0.0
            state[s, 1 + c] = v
        _stamp(words, s, meta, seq, now)


@nb.njit(cache=True, nogil=True)
def rows_updated_after(words: U32, occupied: I64, width: int, seq: int) -> I64:
    """Occupied slots whose update sequence is greater than seq."""
    meta = 2 * width  # words exclude the key: state words, then metadata
    out = np.empty(occupied.shape[0], dtype=np.int64)
    n = 0
    for i in range(occupied.shape[0]):
        s = occupied[i]
        row_seq = np.int64(words[s, meta + 2]) | (np.int64(words[s, meta + 3]) << 32)
        if row_seq > seq:
            out[n] = s
            n += 1
    return out[:n].copy()


@nb.njit(cache=True, nogil=True)
def all_within(values: F64, limit: float) -> bool:
    """Every value finite and |value| <= limit (NaN fails every comparison)."""
    flat = values.reshape(-1)
    for i in range(flat.shape[0]):  # noqa: SIM110 - numba compiles the loop, not all()
        if not abs(flat[i]) <= limit:
            return False
    return True
