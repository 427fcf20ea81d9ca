"""The MLP of a served wdl or deepfm version, in torch inference mode: on a CUDA device
through serving.scoring.mlp_cuda (pinned buffers, CUDA graphs) when one is present, else on the CPU."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch

from ctr.model.mlp import DeepCTR, device
from ctr.model.spec import ModelSpec
from serving.config import DnnBatching

if TYPE_CHECKING:
    from serving.scoring.batcher import DynamicBatcher


class DeepScorer:
    def __init__(
        self,
        spec: ModelSpec,
        dense: dict[str, npt.NDArray[np.float32]],
        batcher: DynamicBatcher | None = None,
        cuda_graphs: bool = True,
        capacity: int = DnnBatching.max_items,  # most items in one pass on the device
        on: torch.device | None = None,
    ) -> None:
        self.batcher = batcher
        self.net = DeepCTR(spec).to(on or device()).eval()
        missing = [n for n, _ in spec.mlp_shapes() if n not in dense]
        if missing:
            raise ValueError(f"dense file lacks MLP tensors {missing}")
        with torch.no_grad():
            for p, (name, shape) in zip(self.net.params, spec.mlp_shapes(), strict=True):
                if dense[name].shape != shape:
                    raise ValueError(f"dense tensor {name} has shape {dense[name].shape}, the spec says {shape}")
                p.copy_(torch.from_numpy(dense[name]))
        self.cuda = None
        if self.net.device.type == "cuda":
            from serving.scoring.mlp_cuda import CudaMLP

            self.cuda = CudaMLP(self.net, capacity, cuda_graphs)

    def predict(self, pooled: npt.NDArray[np.float32], partial: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """sigmoid(partial logit + MLP(pooled)) per item (in a shared batch with a batcher)."""
        if self.batcher is not None:
            return self.batcher.predict(self, pooled, partial)
        return self.run([pooled], [partial])

    def run(
        self, pooled: Sequence[npt.NDArray[np.float32]], partial: Sequence[npt.NDArray[np.float32]]
    ) -> npt.NDArray[np.float32]:
        """The scores of several requests' items in one pass (in order), in passes of at
        most the device's capacity."""
        if self.cuda is None:
            return mlp_scores(self.net, _joined(pooled), _joined(partial))
        n = sum(p.shape[0] for p in pooled)
        if n <= self.cuda.capacity:
            return self.cuda.scores(pooled, partial)
        x, z, cap = _joined(pooled), _joined(partial), self.cuda.capacity
        return np.concatenate([self.cuda.scores([x[i : i + cap]], [z[i : i + cap]]) for i in range(0, n, cap)])


def _joined(parts: Sequence[npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def mlp_scores(net: DeepCTR, pooled: npt.NDArray[np.float32], partial: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """sigmoid(partial + MLP(pooled)) on the net's device, eagerly (the CPU path, and the
    reference the CUDA path is tested against)."""
    dev = net.device
    with torch.inference_mode():
        z = net(torch.from_numpy(np.ascontiguousarray(pooled)).to(dev)) + torch.from_numpy(partial).to(dev)
        return torch.sigmoid(z).cpu().numpy().astype(np.float32)  # type: ignore[no-any-return]
