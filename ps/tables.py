"""Sparse and dense tables of one shard, with FTRL applied on push."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from ctr.hashmap import CompactHashMap
from ps import kernels


@dataclass(frozen=True)
class FtrlParams:
    alpha: float = 0.5
    beta: float = 1.0
    l1: float = 0.1
    l2: float = 1.0


class SparseTable:
    """key -> FTRL row (z, n, count, update sequence) in a CompactHashMap."""

    def __init__(self, name: str, dim: int, ftrl: FtrlParams, capacity: int = 1 << 16) -> None:
        self.name = name
        self.dim = dim
        self.ftrl = ftrl
        self.map = CompactHashMap(2 * dim + 3, capacity=capacity)

    def pull(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.float32]:
        """Weights for keys; absent keys read as zeros and are not inserted."""
        slots = self.map.find(keys)
        f = self.ftrl
        return kernels.ftrl_pull(self.map.rows, slots, self.dim, f.alpha, f.beta, f.l1, f.l2)  # type: ignore[no-any-return]

    def push(self, keys: npt.NDArray[np.uint64], grads: npt.NDArray[np.float32], seq: int) -> None:
        slots = self.map.insert(keys)
        f = self.ftrl
        g = np.ascontiguousarray(grads, dtype=np.float32).reshape(keys.shape[0], self.dim)
        kernels.ftrl_push(self.map.rows, self.map.words, slots, g, self.dim, seq, f.alpha, f.beta, f.l1, f.l2)

    def updated_after(self, seq: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
        """(keys, slots) of rows updated after sequence number seq (all rows for seq < 0)."""
        keys, occ = self.map.items()
        if seq < 0:
            return keys, occ
        sel = kernels.rows_updated_after(self.map.words, occ, self.dim, seq)
        return self.map.slots[sel, :2].copy().view(np.uint64).reshape(-1), sel

    def weights_at(self, slots: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        f = self.ftrl
        return kernels.ftrl_pull(self.map.rows, slots, self.dim, f.alpha, f.beta, f.l1, f.l2)  # type: ignore[no-any-return]

    def raw_rows(self, slots: npt.NDArray[np.int64]) -> npt.NDArray[np.uint32]:
        return self.map.words[slots]

    def load_raw(self, keys: npt.NDArray[np.uint64], rows: npt.NDArray[np.uint32]) -> None:
        slots = self.map.insert(keys)
        self.map.words[slots] = rows


class DenseTable:
    """One contiguous range [lo, hi) of a dense vector, FTRL state per element.

    Dense values (biases, layer weights) are not L1/L2-regularized: sparsity is for ids.
    """

    def __init__(self, name: str, lo: int, hi: int, ftrl: FtrlParams) -> None:
        self.name = name
        self.lo = lo
        self.hi = hi
        self.ftrl = replace(ftrl, l1=0.0, l2=0.0)
        self.z = np.zeros(hi - lo, dtype=np.float64)
        self.n = np.zeros(hi - lo, dtype=np.float64)

    def weights(self) -> npt.NDArray[np.float32]:
        f = self.ftrl
        return kernels.ftrl_weights_reference(self.z, self.n, f.alpha, f.beta, f.l1, f.l2).astype(np.float32)

    def push(self, grads: npt.NDArray[np.float32]) -> None:
        if grads.shape[0] != self.hi - self.lo:
            raise ValueError(f"dense table {self.name}: {grads.shape[0]} values, range holds {self.hi - self.lo}")
        f = self.ftrl
        _, self.z, self.n = kernels.ftrl_step_reference(self.z, self.n, grads.astype(np.float64), f.alpha, f.beta, f.l1, f.l2)
