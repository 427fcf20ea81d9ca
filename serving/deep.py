"""The MLP of a served wdl or deepfm version, in torch inference mode (CUDA when present)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch

from ctr.deep import DeepCTR, device
from ctr.modelspec import ModelSpec

if TYPE_CHECKING:
    from serving.batcher import DynamicBatcher


class DeepScorer:
    def __init__(self, spec: ModelSpec, dense: dict[str, npt.NDArray[np.float32]], batcher: DynamicBatcher | None = None) -> None:
        self.batcher = batcher
        self.net = DeepCTR(spec).to(device()).eval()
        missing = [n for n, _ in spec.mlp_shapes() if n not in dense]
        if missing:
            raise ValueError(f"dense file lacks MLP tensors {missing}")
        with torch.no_grad():
            for p, (name, shape) in zip(self.net.params, spec.mlp_shapes(), strict=True):
                if dense[name].shape != shape:
                    raise ValueError(f"dense tensor {name} has shape {dense[name].shape}, the spec says {shape}")
                p.copy_(torch.from_numpy(dense[name]))

    def predict(self, pooled: npt.NDArray[np.float32], partial: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """sigmoid(partial logit + MLP(pooled)) per item (in a shared batch with a batcher)."""
        if self.batcher is not None:
            return self.batcher.predict(self.net, pooled, partial)
        return mlp_scores(self.net, pooled, partial)


def mlp_scores(
    net: DeepCTR,
    pooled: npt.NDArray[np.float32],
    partial: npt.NDArray[np.float32],
    stage: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> npt.NDArray[np.float32]:
    """sigmoid(partial + MLP(pooled)) on the net's device; `stage` may first place the host
    tensor (in pinned memory, say) so the copy to the device is asynchronous."""
    dev = net.device
    with torch.inference_mode():
        host = torch.from_numpy(np.ascontiguousarray(pooled))
        if stage is not None:
            host = stage(host)
        z = net(host.to(dev, non_blocking=True)) + torch.from_numpy(partial).to(dev, non_blocking=True)
        return torch.sigmoid(z).cpu().numpy().astype(np.float32)  # type: ignore[no-any-return]
