"""numba kernels of the token-dictionary client: the request's unique (block, token) pairs
in ascending order, with a plain reference used in the tests."""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.unique import unique_inverse

U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]


@nb.njit(cache=True, nogil=True)
def _composite_unique(code: I64, z: U64, shift: int) -> tuple[U64, I64]:
    n = code.shape[0]
    comp = np.empty(n, dtype=np.uint64)
    for i in range(n):
        comp[i] = (np.uint64(code[i]) << np.uint64(shift)) | z[i]
    return unique_inverse(comp)  # type: ignore[no-any-return]


@nb.njit(cache=True, nogil=True)
def _ranked(order: I64, inverse: I64) -> I64:
    rank = np.empty(order.shape[0], dtype=np.int64)
    for r in range(order.shape[0]):
        rank[order[r]] = r
    idx = np.empty(inverse.shape[0], dtype=np.int64)
    for i in range(inverse.shape[0]):
        idx[i] = rank[inverse[i]]
    return idx


def ordered_unique(code: I64, z: U64, shift: int) -> tuple[U64, I64]:
    """(the unique values of code << shift | z, ascending; each feature's index among them).
    The caller guarantees every z < 2**shift. Unique by hashing in numba, then numpy's sort
    of the few unique values (faster than numba's)."""
    uniq, inverse = _composite_unique(code, z, shift)
    order = np.argsort(uniq)
    return uniq[order], _ranked(order, inverse)


def ordered_unique_reference(code: I64, z: U64, shift: int) -> tuple[U64, I64]:
    comp = (code.astype(np.uint64) << np.uint64(shift)) | z
    uniq, inverse = np.unique(comp, return_inverse=True)
    return uniq, inverse.reshape(-1).astype(np.int64)
