"""The trainer's side of a model: for a batch, pull its rows, predict (progressive), compute
the updates and push them. `build_model` picks the implementation of a ModelSpec.

With `update: example` (the default) the worker pulls optimizer state, steps it once per
example on its copy and pushes the change (docs/design/per-example-updates.md); with
`update: batch` it pulls weights and pushes summed gradients, and the shard steps once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ctr.batch import SampleBatch
from ctr.factorization import MODEL_CODES, train_batch
from ctr.modelspec import ModelSpec
from ctr.optim import PLAIN, plain_state
from ctr.unique import sorted_unique_inverse
from ps.client import DELTA, GRADIENT, PSClient, PullSession


@dataclass
class Fetched:
    """A batch's unique keys, each feature's index into them, and the rows pulled for them."""

    uniq: npt.NDArray[np.uint64]
    uidx: npt.NDArray[np.int64]
    rows: dict[str, tuple[npt.NDArray[Any], PullSession]]
    bias: npt.NDArray[Any]


@dataclass
class Trained:
    """What training a batch leaves to push: the rows' new state (per-example updates) or
    the summed gradients (batch updates)."""

    uniq: npt.NDArray[np.uint64]
    states: dict[str, npt.NDArray[np.float64]]
    bias_state: npt.NDArray[np.float64]
    grads: dict[str, npt.NDArray[np.float64]]
    bias_grad: float


class TrainableModel(Protocol):
    spec: ModelSpec

    def prepare(self, client: PSClient) -> None:
        """Declares the tables; initializes those that start empty and need it."""

    def train(self, client: PSClient, batch: SampleBatch) -> npt.NDArray[np.float32]:
        """Trains on a batch; returns each example's probability predicted before training on it."""


class FactorizationModel:
    """LR, FM and FFM: sparse tables w (and v) plus the dense bias, numba kernels."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.code = MODEL_CODES[spec.type]
        self.tables = {t.name: t for t in spec.tables()}
        self.sequential = spec.update == "example"
        self.sparse: list[str] = [t for t in ("w", "v") if t in self.tables]
        self.params = {name: t.optimizer.params() for name, t in self.tables.items()}

    def prepare(self, client: PSClient) -> None:
        client.declare(self.spec.tables())

    @property
    def pipelined(self) -> bool:
        """Per-example updates can run pipelined and stay exact (trainer.pipeline)."""
        return self.sequential

    def fetch(self, client: PSClient, batch: SampleBatch) -> Fetched:
        uniq, inv = sorted_unique_inverse(batch.keys)
        rows: dict[str, tuple[npt.NDArray[Any], PullSession]] = {
            t: client.pull(t, uniq, state=self.sequential) for t in self.sparse
        }
        return Fetched(uniq, inv, rows, client.pull_dense("bias", state=self.sequential))

    def compute(
        self, batch: SampleBatch, got: Fetched, previous: Trained | None = None
    ) -> tuple[npt.NDArray[np.float32], Trained]:
        """Trains a fetched batch. `previous` is the batch trained just before, whose push may
        not have reached the shards when this batch was fetched: the rows both batches hold
        are taken from its result, which is what the shards hold once it lands."""
        if self.sequential:
            if previous is not None:
                _, here, there = np.intersect1d(got.uniq, previous.uniq, assume_unique=True, return_indices=True)
                for t, (rows, _) in got.rows.items():
                    rows[here] = previous.states[t][there]
                got.bias[:] = previous.bias_state.reshape(got.bias.shape)
            states = {t: np.array(rows, dtype=np.float64) for t, (rows, _) in got.rows.items()}
            bias_state = np.array(got.bias, dtype=np.float64).reshape(1, -1)
            params = self.params
        else:
            states = {t: plain_state(rows) for t, (rows, _) in got.rows.items()}
            bias_state = plain_state(np.asarray(got.bias).reshape(1, 1))
            params = {name: PLAIN.params() for name in self.params}
        v_state = states.get("v", np.zeros((got.uniq.shape[0], 0)))
        dv = self.tables["v"].dim if "v" in self.tables else 0
        probs, gw, gv, gbias = train_batch(
            self.code,
            self.sequential,
            batch.offsets,
            got.uidx,
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
            return probs, Trained(got.uniq, states, bias_state, {}, 0.0)
        return probs, Trained(got.uniq, {}, bias_state, {"w": gw, "v": gv}, gbias)

    def push(self, client: PSClient, got: Fetched, done: Trained) -> None:
        if self.sequential:
            for t, (rows, session) in got.rows.items():
                client.push(t, got.uniq, done.states[t] - rows, session, kind=DELTA)
            client.push_dense("bias", done.bias_state - np.asarray(got.bias).reshape(1, -1), kind=DELTA)
        else:
            for t, (_, session) in got.rows.items():
                client.push(t, got.uniq, done.grads[t].astype(np.float32), session, kind=GRADIENT)
            client.push_dense("bias", np.array([done.bias_grad], dtype=np.float32), kind=GRADIENT)

    def train(self, client: PSClient, batch: SampleBatch) -> npt.NDArray[np.float32]:
        got = self.fetch(client, batch)
        probs, done = self.compute(batch, got)
        self.push(client, got, done)
        return probs


def build_model(spec: ModelSpec) -> TrainableModel:
    if spec.is_dnn:
        from trainer.deep_model import DeepModel  # torch loads only for DNN models

        return DeepModel(spec)
    return FactorizationModel(spec)
