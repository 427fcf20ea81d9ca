"""The MLP of a served wdl or deepfm version on a CUDA device.

A request's pooled embeddings are copied into page-locked host buffers (one numpy copy, no
torch CPU op: torch's would wake its OpenMP pool, which then spins on every core), sent to
the device asynchronously on a stream of its own, and scored by a replayed CUDA graph of
the smallest captured batch size that holds them (a graph launches the ~8 kernels of a
small MLP at once; padded rows are computed and ignored). A large batch goes in chunks, so
filling the host buffer overlaps the device's copies and kernels. The graphs are captured
when the version loads, never while serving. One lock per process orders every CUDA call
of serving: a capture must see no other work on the device, and the GPU runs one batch at
a time anyway.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import torch

from ctr.model.mlp import DeepCTR

CUDA_LOCK = threading.Lock()
SMALLEST_BUCKET = 64
CHUNK = 4096  # items per copy-and-score step of a large batch


def bucket_sizes(max_items: int) -> list[int]:
    """Powers of two from SMALLEST_BUCKET up to the first that holds max_items."""
    sizes = [SMALLEST_BUCKET]
    while sizes[-1] < max_items:
        sizes.append(sizes[-1] * 2)
    return sizes


def bucket_for(n: int, sizes: Sequence[int]) -> int:
    """The smallest size that holds n items (n ≤ sizes[-1])."""
    for s in sizes:
        if s >= n:
            return s
    raise ValueError(f"{n} items exceed the largest batch {sizes[-1]}")


class CudaMLP:
    def __init__(self, net: DeepCTR, max_items: int, graphs: bool) -> None:
        if net.device.type != "cuda":
            raise ValueError(f"CudaMLP needs a CUDA net, not one on {net.device}")
        self.net = net
        self.sizes = bucket_sizes(max_items)
        top, width, dev = self.sizes[-1], net.spec.field_count * net.spec.k, net.device
        self.host_in = torch.zeros((top, width), dtype=torch.float32, pin_memory=True)
        self.host_partial = torch.zeros(top, dtype=torch.float32, pin_memory=True)
        self.host_out = torch.zeros(top, dtype=torch.float32, pin_memory=True)
        self.dev_in = torch.zeros((top, width), dtype=torch.float32, device=dev)
        self.dev_partial = torch.zeros(top, dtype=torch.float32, device=dev)
        self.stream = torch.cuda.Stream(dev)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        if graphs:
            with CUDA_LOCK:
                self._capture()

    @property
    def capacity(self) -> int:
        return self.sizes[-1]

    def scores(
        self, pooled: Sequence[npt.NDArray[np.float32]], partial: Sequence[npt.NDArray[np.float32]]
    ) -> npt.NDArray[np.float32]:
        """sigmoid(partial + MLP(pooled)) of the parts' items, in order: pooled[i] is
        [n_i, F, k], partial[i] is [n_i]; at most `capacity` items in all. The items go to
        the device in chunks: the host fills chunk c+1 while the device copies and scores
        chunk c (the stream orders each chunk's copies after the last one's graph)."""
        n = sum(p.shape[0] for p in pooled)
        if n > self.capacity:
            raise ValueError(f"{n} items exceed the batch capacity {self.capacity}")
        host_in, host_partial = self.host_in.numpy(), self.host_partial.numpy()
        chunk = min(CHUNK, self.capacity)
        with CUDA_LOCK, torch.inference_mode(), torch.cuda.stream(self.stream):
            at = launched = 0
            for p, z in zip(pooled, partial, strict=True):
                m, off, src = p.shape[0], 0, p.reshape(p.shape[0], -1)
                while off < m:
                    take = min(m - off, launched + chunk - at)
                    host_in[at : at + take] = src[off : off + take]
                    host_partial[at : at + take] = z[off : off + take]
                    at, off = at + take, off + take
                    if at - launched == chunk:
                        self._launch(launched, at)
                        launched = at
            if at > launched:
                self._launch(launched, at)
            self.stream.synchronize()
            return self.host_out.numpy()[:n].copy()

    def _launch(self, lo: int, hi: int) -> None:
        """Queues items [lo, hi) of the host buffers: copy in, score, copy out."""
        m = hi - lo
        self.dev_in[:m].copy_(self.host_in[lo:hi], non_blocking=True)
        self.dev_partial[:m].copy_(self.host_partial[lo:hi], non_blocking=True)
        if self.graphs:
            graph, out = self.graphs[bucket_for(m, self.sizes)]
            graph.replay()
        else:
            out = self._forward(m)
        self.host_out[lo:hi].copy_(out[:m], non_blocking=True)

    def _forward(self, n: int) -> torch.Tensor:
        return torch.sigmoid(self.net(self.dev_in[:n]) + self.dev_partial[:n])

    def _capture(self) -> None:
        """One graph per bucket size, largest first, all in one memory pool (a smaller
        graph reuses the larger's blocks: replays never overlap)."""
        pool = None
        with torch.inference_mode(), torch.cuda.stream(self.stream):
            for n in reversed(self.sizes):
                for _ in range(2):  # cuBLAS picks and caches its kernels outside the capture
                    self._forward(n)
                self.stream.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=self.stream):
                    out = self._forward(n)
                pool = graph.pool()
                self.graphs[n] = (graph, out)
        self.stream.synchronize()
