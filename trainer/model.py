"""The trainer's side of a model: for a batch, pull its rows, predict (progressive), compute
the updates and push them. `build_model` picks the implementation of a ModelSpec.

With `update: example` (the default) the worker pulls optimizer state, steps it once per
example on its copy and pushes the change (docs/design/per-example-updates.md); with
`update: batch` it pulls weights and pushes summed gradients, and the shard steps once.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from ctr.batch import SampleBatch
from ctr.factorization import MODEL_CODES, train_batch
from ctr.modelspec import ModelSpec
from ctr.optim import PLAIN, plain_state
from ps.client import DELTA, GRADIENT, PSClient


class TrainableModel(Protocol):
    spec: ModelSpec

    def prepare(self, client: PSClient) -> None:
        """Declares the tables; initializes those that start empty and need it."""

    def train(self, client: PSClient, batch: SampleBatch) -> npt.NDArray[np.float32]:
        """Trains on a batch; returns each example's probability predicted before training on it."""


def declare(client: PSClient, spec: ModelSpec) -> dict[str, bool]:
    return client.declare(spec.tables())


class FactorizationModel:
    """LR, FM and FFM: sparse tables w (and v) plus the dense bias, numba kernels."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.code = MODEL_CODES[spec.type]
        self.tables = {t.name: t for t in spec.tables()}
        self.sequential = spec.update == "example"
        self.sparse = [t for t in ("w", "v") if t in self.tables]
        self.params = {name: t.optimizer.params() for name, t in self.tables.items()}

    def prepare(self, client: PSClient) -> None:
        declare(client, self.spec)

    def train(self, client: PSClient, batch: SampleBatch) -> npt.NDArray[np.float32]:
        uniq, inv = np.unique(batch.keys, return_inverse=True)
        uidx = inv.astype(np.int64).reshape(-1)
        pulled = {t: client.pull(t, uniq, state=self.sequential) for t in self.sparse}
        bias = client.pull_dense("bias", state=self.sequential)
        if self.sequential:
            states = {t: np.array(rows, dtype=np.float64) for t, (rows, _) in pulled.items()}
            bias_state = np.array(bias, dtype=np.float64).reshape(1, -1)
            params = self.params
        else:
            states = {t: plain_state(rows) for t, (rows, _) in pulled.items()}
            bias_state = plain_state(np.asarray(bias).reshape(1, 1))
            params = {name: PLAIN.params() for name in self.params}
        v_state = states.get("v", np.zeros((uniq.shape[0], 0)))
        dv = self.tables["v"].dim if "v" in self.tables else 0
        probs, gw, gv, gbias = train_batch(
            self.code,
            self.sequential,
            batch.offsets,
            uidx,
            batch.fields,
            batch.values,
            batch.labels,
            states["w"],
            params["w"],
            v_state,
            dv,
            params.get("v", params["w"]),
            bias_state,
            params["bias"],
            self.spec.k,
            self.spec.pair_norm,
        )
        if self.sequential:
            for t, (rows, session) in pulled.items():
                client.push(t, uniq, states[t] - rows, session, kind=DELTA)
            client.push_dense("bias", bias_state - np.asarray(bias).reshape(1, -1), kind=DELTA)
        else:
            grads = {"w": gw, "v": gv}
            for t, (_, session) in pulled.items():
                client.push(t, uniq, grads[t].astype(np.float32), session, kind=GRADIENT)
            client.push_dense("bias", np.array([gbias], dtype=np.float32), kind=GRADIENT)
        return probs  # type: ignore[no-any-return]


def build_model(spec: ModelSpec) -> TrainableModel:
    if spec.is_dnn:
        from trainer.deep_model import DeepModel  # torch loads only for DNN models

        return DeepModel(spec)
    return FactorizationModel(spec)
