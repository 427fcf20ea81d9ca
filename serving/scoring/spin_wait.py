"""Waiting for another thread without sleeping: `spin_while(flags, i, value, spins)` reads
flags[i] until it is no longer `value`, up to `spins` times, with the GIL released.

Waking a sleeping thread costs 50-150 us on this kind of VM (the idle vCPU must be
rescheduled), several times a request's hand-offs between the scoring threads; a thread
that spins a little first sees the change within a microsecond. The read is an atomic
acquire load, so the compiler cannot hoist it out of the loop, and each turn executes the
CPU's spin-loop hint (x86 `pause`), which leaves the core's resources to its sibling.
"""

from __future__ import annotations

import functools
import platform
import time
from typing import Any

import llvmlite.ir as ir
import numba as nb
import numpy as np
import numpy.typing as npt
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


def _int64_vector(flags: Any) -> bool:
    return isinstance(flags, types.Array) and flags.ndim == 1 and flags.dtype == types.int64


def _item_pointer(context: Any, builder: Any, signature: Any, args: Any) -> Any:
    """The address of flags[i], for an intrinsic whose first two arguments are flags, i."""
    arrty = signature.args[0]
    arr = context.make_array(arrty)(context, builder, args[0])
    at = context.cast(builder, args[1], signature.args[1], types.intp)
    return cgutils.get_item_pointer(context, builder, arrty, arr, [at], wraparound=False)


@intrinsic
def load_acquire(typingctx: Any, flags: Any, i: Any) -> Any:
    """flags[i] of an int64 array, read with acquire ordering on every call."""
    if not (_int64_vector(flags) and isinstance(i, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.load_atomic(_item_pointer(context, builder, signature, args), "acquire", 8)

    return types.int64(flags, i), codegen


@intrinsic
def compare_exchange(typingctx: Any, flags: Any, i: Any, expected: Any, new: Any) -> Any:
    """Atomically: if flags[i] == expected, flags[i] = new; returns the old flags[i]."""
    if not (_int64_vector(flags) and all(isinstance(a, types.Integer) for a in (i, expected, new))):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ptr = _item_pointer(context, builder, signature, args)
        want = context.cast(builder, args[2], signature.args[2], types.int64)
        put = context.cast(builder, args[3], signature.args[3], types.int64)
        pair = builder.cmpxchg(ptr, want, put, "acq_rel", "acquire")
        return builder.extract_value(pair, 0)

    return types.int64(flags, i, expected, new), codegen


@intrinsic
def cpu_relax(typingctx: Any) -> Any:
    """The spin-loop hint: x86 `pause` (nothing elsewhere)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        if _X86:
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
            builder.call(fn, [])
        return context.get_dummy_value()

    return types.void(), codegen


@nb.njit(cache=True, nogil=True)
def spin_while(flags: npt.NDArray[np.int64], i: int, value: int, spins: int) -> int:
    """flags[i] once it differs from value, or value after `spins` reads."""
    for _ in range(spins):
        seen: int = load_acquire(flags, i)  # type: ignore[call-arg]
        if seen != value:
            return seen
        cpu_relax()  # type: ignore[call-arg]
    return load_acquire(flags, i)  # type: ignore[call-arg,no-any-return]


@nb.njit(cache=True, nogil=True)
def swap_if(flags: npt.NDArray[np.int64], i: int, expected: int, new: int) -> int:
    """compare_exchange with the GIL released: the old flags[i]."""
    return compare_exchange(flags, i, expected, new)  # type: ignore[call-arg,no-any-return]


@nb.njit(cache=True, nogil=True)
def finish_then_spin(
    state: npt.NDArray[np.int64], running: int, done: int, posted: npt.NDArray[np.int64], seen: int, spins: int
) -> tuple[int, int]:
    """A worker's end of a task: state[0] running -> done (unless a waiter has changed it),
    then spin_while(posted, 0, seen, spins) unless it had. Returns (the old state[0],
    posted[0]). The GIL is released before the waiter can see `done`, so the waiter never
    has to sleep on the GIL while this thread goes back to its loop."""
    old: int = compare_exchange(state, 0, running, done)  # type: ignore[call-arg]
    if old != running:
        return old, load_acquire(posted, 0)  # type: ignore[call-arg]
    return old, spin_while(posted, 0, seen, spins)


def spin_while_reference(flags: npt.NDArray[np.int64], i: int, value: int, spins: int) -> int:
    """Plain reference of spin_while (without the hint), for the tests."""
    for _ in range(spins):
        if int(flags[i]) != value:
            return int(flags[i])
    return int(flags[i])


@functools.cache
def _ns_per_spin() -> float:
    """One spin_while read's time, measured once per process."""
    flags = np.zeros(1, dtype=np.int64)
    spin_while(flags, 0, 0, 1000)  # compiled and warm
    start = time.perf_counter()
    spin_while(flags, 0, 0, 100_000)
    return max(1.0, (time.perf_counter() - start) * 1e9 / 100_000)


def spins_for(seconds: float) -> int:
    """How many spin_while reads last about `seconds`."""
    if seconds <= 0:
        return 0
    return max(1, int(seconds * 1e9 / _ns_per_spin()))
