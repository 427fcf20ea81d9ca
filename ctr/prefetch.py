"""A software prefetch for numba kernels: `prefetch_row(table, b)` asks the CPU to bring row
b of a 2-D C-contiguous array into the cache (its first and last word, so a row spanning
two 64-byte lines arrives whole) without waiting for it.

A plain load that misses holds its instruction in the reorder buffer until the line
arrives, so a loop of them keeps only as many misses in flight as that buffer holds; a
prefetch retires at once. The hash map kernels issue one for a key's buckets some lookups
ahead of probing them (ctr.bucket_kernels). It is a hint: no result depends on it.
"""

from __future__ import annotations

from typing import Any

import llvmlite.ir as ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_I8P = ir.IntType(8).as_pointer()
_I32 = ir.IntType(32)
_READ, _KEEP_IN_ALL_LEVELS, _DATA = 0, 3, 1  # llvm.prefetch's rw, locality and cache type


@intrinsic
def prefetch_row(typingctx: Any, table: Any, row: Any) -> Any:
    if not isinstance(table, types.Array) or table.ndim != 2 or not isinstance(row, types.Integer):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        arrty = signature.args[0]
        arr = context.make_array(arrty)(context, builder, args[0])
        width = builder.extract_value(arr.shape, 1)
        row_at = context.cast(builder, args[1], signature.args[1], types.intp)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [_I8P, _I32, _I32, _I32]), "llvm.prefetch.p0i8"
        )
        last = builder.sub(width, ir.Constant(width.type, 1))
        hints = [ir.Constant(_I32, _READ), ir.Constant(_I32, _KEEP_IN_ALL_LEVELS), ir.Constant(_I32, _DATA)]
        for col in (ir.Constant(width.type, 0), last):
            ptr = cgutils.get_item_pointer(context, builder, arrty, arr, [row_at, col], wraparound=False)
            builder.call(fn, [builder.bitcast(ptr, _I8P), *hints])
        return context.get_dummy_value()

    return types.void(table, row), codegen
