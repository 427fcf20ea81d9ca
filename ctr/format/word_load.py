"""Word-at-a-time byte kernels for numba: `load_u64_le(buf, pos)` reads buf[pos:pos+8] of a
uint8 array as one little-endian uint64 (an unaligned load, not eight), and
`trailing_zeros(x)` counts a uint64's low zero bits (64 for 0) in one instruction.

The varint decoder (ctr.format.varint.read_varints) finds where each varint ends from such
words, so its loop has no branch per byte. The caller keeps pos + 8 <= len(buf): the
load is not bounds-checked.
"""

from __future__ import annotations

import sys
from typing import Any

import llvmlite.ir as ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_I1 = ir.IntType(1)
_I64 = ir.IntType(64)


@intrinsic
def load_u64_le(typingctx: Any, buf: Any, pos: Any) -> Any:
    if not (isinstance(buf, types.Array) and buf.ndim == 1 and buf.dtype == types.uint8 and isinstance(pos, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        arrty = signature.args[0]
        arr = context.make_array(arrty)(context, builder, args[0])
        at = context.cast(builder, args[1], signature.args[1], types.intp)
        ptr = cgutils.get_item_pointer(context, builder, arrty, arr, [at], wraparound=False)
        word = builder.load(builder.bitcast(ptr, _I64.as_pointer()), align=1)
        if sys.byteorder == "big":  # the bytes' order, not the machine's
            swap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I64, [_I64]), "llvm.bswap.i64")
            word = builder.call(swap, [word])
        return word

    return types.uint64(buf, pos), codegen


@intrinsic
def trailing_zeros(typingctx: Any, x: Any) -> Any:
    if x != types.uint64:
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        cttz = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_I64, [_I64, _I1]), "llvm.cttz.i64")
        return builder.call(cttz, [args[0], ir.Constant(_I1, 0)])  # 0 is defined: 64

    return types.uint64(x), codegen
