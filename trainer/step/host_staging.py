"""The host side of an MLP's copies to and from a GPU: page-locked buffers kept from batch to
batch. A copy from pageable memory goes through a driver bounce buffer and blocks the
thread; from page-locked memory it is one DMA the stream runs in order (`non_blocking`), so
a step's inputs go up together and its outputs come back behind one synchronize. Pinning
a fresh tensor every batch would cost more than it saves, hence the reuse. On the CPU it
hands the arrays through without a copy, as before."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch


class HostStaging:
    """Not thread-safe: the training thread's MLP step alone uses it. A buffer is written
    again only in a later step, after that step's `to_host` synchronized the stream behind
    every copy out of it."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pinned = device.type == "cuda"
        self._up: dict[str, torch.Tensor] = {}
        self._down: dict[str, torch.Tensor] = {}

    def to_device(self, name: str, array: npt.NDArray[np.float32]) -> torch.Tensor:
        """`array` on the device (on the CPU: the array itself, as a tensor)."""
        src = torch.from_numpy(array)
        if not self.pinned:
            return src
        staged = _buffer(self._up, name, src)
        staged.copy_(src)
        return staged.to(self.device, non_blocking=True)

    def to_host(self, tensors: dict[str, torch.Tensor]) -> dict[str, npt.NDArray[np.float32]]:
        """The tensors as arrays of their own, after one wait for the stream."""
        if not self.pinned:
            return {name: t.detach().cpu().numpy() for name, t in tensors.items()}
        staged = {}
        for name, t in tensors.items():
            staged[name] = _buffer(self._down, name, t)
            staged[name].copy_(t.detach(), non_blocking=True)
        torch.cuda.current_stream(self.device).synchronize()
        return {name: s.numpy().copy() for name, s in staged.items()}  # the buffers serve the next step


def _buffer(store: dict[str, torch.Tensor], name: str, like: torch.Tensor) -> torch.Tensor:
    """`store`'s page-locked buffer `name`, grown to hold `like`, viewed in its shape."""
    n = like.numel()
    buf = store.get(name)
    if buf is None or buf.numel() < n or buf.dtype != like.dtype:
        buf = torch.empty(n, dtype=like.dtype, pin_memory=True)
        store[name] = buf
    return buf[:n].view(like.shape)
