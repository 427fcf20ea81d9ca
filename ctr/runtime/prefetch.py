"""Software prefetches for numba kernels: `prefetch_word(table, row, col)` asks the CPU to
bring the cache line holding table[row, col] (a 2-D C-contiguous array) into the cache
without waiting for it; `prefetch_span` does so for every line of table[row, first:last+1],
`prefetch_item(array, i)` for the line holding a 1-D array's element i.

A plain load that misses holds its instruction in the reorder buffer until the line
arrives, so a loop of them keeps only as many misses in flight as that buffer holds; a
prefetch retires at once. The hash map kernels issue them for a key's buckets, and then
for its row, some lookups ahead of reading them (ctr.format.bucket_kernels); the compact
hashmap's finds, the shard's row kernels and the client's residual and kept-row kernels do
the same for their keys' home slots and their rows (docs/design/prefetched-gathers.md).
They are hints: no result depends on them.
"""

from __future__ import annotations

from typing import Any

import llvmlite.ir as ir
import numba as nb
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_I8P = ir.IntType(8).as_pointer()
_I32 = ir.IntType(32)
_READ, _KEEP_IN_ALL_LEVELS, _DATA = 0, 3, 1  # llvm.prefetch's rw, locality and cache type
LINE_WORDS = 16  # 32-bit words per 64-byte cache line
# rows prefetched ahead of a gather or scatter at random row ids: 80k ids into a 16 MB
# array took 2.0 ms plain, 0.55-0.65 ms at 32 or 64 ahead, 0.7-1.5 at 16 (2026-12-06)
GATHER_AHEAD = 32


@intrinsic
def prefetch_word(typingctx: Any, table: Any, row: Any, col: Any) -> Any:
    if not isinstance(table, types.Array) or table.ndim != 2:
        return None
    if not isinstance(row, types.Integer) or not isinstance(col, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        arrty = signature.args[0]
        arr = context.make_array(arrty)(context, builder, args[0])
        at = [context.cast(builder, args[i], signature.args[i], types.intp) for i in (1, 2)]
        ptr = cgutils.get_item_pointer(context, builder, arrty, arr, at, wraparound=False)
        _emit_prefetch(builder, ptr)
        return context.get_dummy_value()

    return types.void(table, row, col), codegen


@intrinsic
def prefetch_item(typingctx: Any, array: Any, index: Any) -> Any:
    """prefetch_word for a 1-D array: the line holding array[index]."""
    if not isinstance(array, types.Array) or array.ndim != 1 or not isinstance(index, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        arrty = signature.args[0]
        arr = context.make_array(arrty)(context, builder, args[0])
        at = [context.cast(builder, args[1], signature.args[1], types.intp)]
        ptr = cgutils.get_item_pointer(context, builder, arrty, arr, at, wraparound=False)
        _emit_prefetch(builder, ptr)
        return context.get_dummy_value()

    return types.void(array, index), codegen


def _emit_prefetch(builder: Any, ptr: Any) -> None:
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [_I8P, _I32, _I32, _I32]), "llvm.prefetch.p0i8"
    )
    hints = [ir.Constant(_I32, _READ), ir.Constant(_I32, _KEEP_IN_ALL_LEVELS), ir.Constant(_I32, _DATA)]
    builder.call(fn, [builder.bitcast(ptr, _I8P), *hints])


@nb.njit(cache=True, inline="always")
def prefetch_ends(table: Any, row: int) -> None:
    """The lines holding table[row]'s first and last element (2-D, any dtype): a narrow
    row's one or two lines; a wide row's middle the hardware's own prefetcher streams."""
    prefetch_word(table, row, 0)  # type: ignore[call-arg]
    prefetch_word(table, row, table.shape[1] - 1)  # type: ignore[call-arg]


@nb.njit(cache=True, inline="always")
def prefetch_span(table: Any, row: int, first: int, last: int) -> None:
    """Every cache line of table[row, first:last+1] (32-bit words)."""
    for col in range(first, last, LINE_WORDS):
        prefetch_word(table, row, col)  # type: ignore[call-arg]
    prefetch_word(table, row, last)  # type: ignore[call-arg]
