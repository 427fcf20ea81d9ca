"""The torch part of Wide&Deep and DeepFM, shared by the trainer and serving.

The logit of an example is
    bias + sum_j w_j x_j + MLP(pooled)                 (wdl)
    bias + sum_j w_j x_j + FM(pooled) + MLP(pooled)    (deepfm; FM over fields)
where pooled[F, k] are its field embeddings (ctr.model.dnn). Only the MLP runs in torch;
the rest is numba (ctr.model.dnn), on the trainer and in serving alike.
The MLP's parameters live in the PS dense table `mlp`, flattened in ModelSpec.mlp_shapes()
order; this module only loads and reads them. Importing this module imports torch.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

from ctr.model.spec import ModelSpec


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class DeepCTR(torch.nn.Module):
    def __init__(self, spec: ModelSpec, seed: int = 0) -> None:
        super().__init__()
        if not spec.is_dnn:
            raise ValueError(f"model.type: {spec.type} has no MLP")
        self.spec = spec
        gen = torch.Generator().manual_seed(seed)
        layers = []
        for name, shape in spec.mlp_shapes():
            p = torch.empty(shape, dtype=torch.float32)
            if name.endswith(".weight"):
                bound = float(np.sqrt(6.0 / (shape[1] + shape[0])))  # Glorot uniform
                p.uniform_(-bound, bound, generator=gen)
            else:
                p.zero_()
            layers.append(torch.nn.Parameter(p))
        self.params = torch.nn.ParameterList(layers)
        self.names = [n for n, _ in spec.mlp_shapes()]

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        """MLP output [n] of pooled field embeddings [n, F, k]."""
        h = pooled.reshape(pooled.shape[0], -1)
        n_layers = len(self.params) // 2
        for i in range(n_layers):
            h = torch.nn.functional.linear(h, self.params[2 * i], self.params[2 * i + 1])
            if i < n_layers - 1:
                h = torch.relu(h)
        return h.squeeze(1)

    def flat(self) -> npt.NDArray[np.float32]:
        return torch.nn.utils.parameters_to_vector(self.params).detach().cpu().numpy()

    def load_flat(self, values: npt.NDArray[np.float32]) -> None:
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(
                torch.from_numpy(np.ascontiguousarray(values, np.float32)).to(self.device), self.params
            )

    def flat_grad(self) -> npt.NDArray[np.float32]:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        return torch.cat([g.reshape(-1) for g in grads]).detach().cpu().numpy()

    def named_arrays(self) -> dict[str, npt.NDArray[np.float32]]:
        return {n: p.detach().cpu().numpy() for n, p in zip(self.names, self.params, strict=True)}

    @property
    def device(self) -> torch.device:
        return self.params[0].device
