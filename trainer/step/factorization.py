"""The trainer's side of a model: for a batch, pull its rows, predict (progressive), compute
the updates and push them. `build_model` picks the implementation of a ModelSpec.

With `update: example` (the default) the worker pulls optimizer state, steps it once per
example on its copy and pushes the change (docs/design/per-example-updates.md); with
`update: batch` it pulls weights and pushes summed gradients, and the shard steps once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ctr.data.batch import SampleBatch
from ctr.data.unique import sorted_unique_inverse
from ctr.model.factorization import train_batch
from ctr.model.optim import FP32_MANTISSA, PLAIN, plain_state
from ctr.model.spec import ModelSpec
from ctr.runtime.extras import require
from ps.api import DELTA, GRADIENT
from ps.client import PSClient, PullSession
from trainer.step.own_view import own_view
from trainer.step.row_cache import RowCache


@dataclass
class Fetched:
    """A batch's unique keys, each feature's index into them, and the rows pulled for them:
    all of them, or with bounded staleness those the row cache cannot serve (`cached`)."""

    uniq: npt.NDArray[np.uint64]
    uidx: npt.NDArray[np.int64]
    rows: dict[str, tuple[npt.NDArray[Any], PullSession | None]]
    bias: npt.NDArray[Any] | None  # None: served from the row cache
    step: int
    cached: npt.NDArray[np.bool_]


@dataclass
class Trained:
    """What training a batch leaves to push: the rows' new state (per-example updates) or
    the summed gradients (batch updates)."""

    uniq: npt.NDArray[np.uint64]
    start: dict[str, npt.NDArray[np.float64]]  # the rows' state before the batch
    states: dict[str, npt.NDArray[np.float64]]
    bias_start: npt.NDArray[np.float64]
    bias_state: npt.NDArray[np.float64]
    grads: dict[str, npt.NDArray[np.float64]]
    bias_grad: float
    samples: int  # the batch's, counted by the shards per table


def carry_previous(
    uniq: npt.NDArray[np.uint64], rows: dict[str, npt.NDArray[np.float64]], previous: Trained
) -> npt.NDArray[np.float64]:
    """Sets the rows a batch shares with `previous` (trained just before, its push perhaps not
    landed when this batch was pulled) to what the shards hold once it lands, and returns
    the bias likewise: start + (new - start), the shards' arithmetic, bit for bit."""
    _, here, there = np.intersect1d(uniq, previous.uniq, assume_unique=True, return_indices=True)
    for t, r in rows.items():
        was = previous.start[t][there]
        r[here] = was + (previous.states[t][there] - was)
    return previous.bias_start + (previous.bias_state - previous.bias_start)


def push_trained(client: PSClient, got: Fetched, done: Trained, sequential: bool) -> None:
    """A trained batch to the shards: each table's state deltas (per-example updates) or
    summed gradients (batch updates), under its pull's session, and the bias's."""
    calls: list[Callable[[], None]] = []
    if sequential:
        for t, (_, session) in got.rows.items():
            delta = done.states[t] - done.start[t]
            calls.append(functools.partial(client.push, t, got.uniq, delta, session, kind=DELTA, samples=done.samples))
        bias: npt.NDArray[Any] = done.bias_state - done.bias_start
        calls.append(functools.partial(client.push_dense, "bias", bias, kind=DELTA, samples=done.samples))
    else:
        for t, (_, session) in got.rows.items():
            grad = done.grads[t].astype(np.float32)
            calls.append(functools.partial(client.push, t, got.uniq, grad, session, kind=GRADIENT, samples=done.samples))
        bias = np.array([done.bias_grad], dtype=np.float32)
        calls.append(functools.partial(client.push_dense, "bias", bias, kind=GRADIENT, samples=done.samples))
    client.concurrently(*calls)  # every table's push has landed (or raised) on return


class Stepwise(Protocol):
    """A model that trains a batch in three steps the pipeline can overlap
    (trainer.step.pipeline): fetch its rows, compute (taking the rows it shares with the
    batch before from that batch's result), push."""

    @property
    def pipelined(self) -> bool: ...

    def fetch(self, client: PSClient, batch: SampleBatch) -> Fetched: ...

    def compute(
        self, batch: SampleBatch, got: Fetched, previous: Trained | None = None
    ) -> tuple[npt.NDArray[np.float32], Trained]: ...

    def push(self, client: PSClient, got: Fetched, done: Trained) -> None: ...


class TrainableModel(Protocol):
    spec: ModelSpec
    device: str  # where it trains: "cpu", or "cuda" for an MLP on the GPU

    def prepare(self, client: PSClient) -> None:
        """Declares the tables; initializes those that start empty and need it."""

    def train(self, client: PSClient, batch: SampleBatch) -> npt.NDArray[np.float32]:
        """Trains on a batch; returns each example's probability predicted before training on it."""

    def finish(self, client: PSClient) -> None:
        """Sends what the model holds back (0/1 Adam's local steps, the MLP a worker trains):
        at the end of a run and before a checkpoint."""

    @property
    def finish_is_dense(self) -> bool:
        """Whether finish writes dense tables only: then a cut runs it while the sparse
        residuals drain (a sparse push from it would leave residuals of its own)."""

    def mlp_for_export(self) -> dict[str, npt.NDArray[np.float32]] | None:
        """The MLP's tensors as an export writes them, where this worker holds the MLP
        (hybrid training): the exporter takes them from here, so the MLP crosses no wire at
        an export. None: the exporter reads the dense tables from the shards."""

    def reset(self) -> None:
        """Forgets what it keeps between batches (rows cached for staleness, the MLP sync's
        momentum): the shards went back to a checkpoint cut."""

    def state(self, client: PSClient) -> dict[str, Any]:
        """What it keeps on the worker past finish() (1-bit Adam's momentum and residual),
        JSON-ready, for a checkpoint cut."""

    def take_up(self, client: PSClient, state: dict[str, Any]) -> None:
        """Goes on from what a cut recorded with state() (empty: from the start)."""


class FactorizationModel:
    """LR, FM and FFM: sparse tables w (and v) plus the dense bias, numba kernels.

    With `staleness` s > 0 a row (and the bias) pulled at step t serves this worker up to
    step t + s with its own updates applied (trainer.step.row_cache); s = 0 pulls every batch."""

    def __init__(self, spec: ModelSpec, staleness: int = 0) -> None:
        self.spec = spec
        self.device = "cpu"
        self.code = spec.family.train_code
        self.tables = {t.name: t for t in spec.tables()}
        self.sequential = spec.update == "example"
        self.sparse: list[str] = [t for t in ("w", "v") if t in self.tables]
        self.params = {name: t.optimizer.params() for name, t in self.tables.items()}
        self.cache = RowCache(staleness, self.sparse)
        self._steps = 0

    def prepare(self, client: PSClient) -> None:
        client.control.declare(self.spec.tables())

    @property
    def pipelined(self) -> bool:
        """Per-example updates can run pipelined and stay exact (trainer.step.pipeline)."""
        return self.sequential

    def fetch(self, client: PSClient, batch: SampleBatch) -> Fetched:
        step = self._steps
        self._steps += 1
        uniq, inv = sorted_unique_inverse(batch.keys)
        cached = self.cache.fresh(uniq, step)
        some_cached = bool(cached.any())
        need = uniq[~cached] if some_cached else uniq
        # a push that also carries cached keys cannot name the pull's session
        pulled_tables = list(self.sparse) if need.shape[0] else []
        calls: list[Callable[[], Any]] = [
            functools.partial(client.pull, t, need, session=not some_cached, state=self.sequential) for t in pulled_tables
        ]
        pull_bias = not self.cache.bias_fresh(step)
        if pull_bias:
            calls.append(functools.partial(client.pull_dense, "bias", state=self.sequential))
        results = client.concurrently(*calls)
        bias = results.pop() if pull_bias else None
        rows: dict[str, tuple[npt.NDArray[Any], PullSession | None]] = {t: (np.zeros((0, 0)), None) for t in self.sparse}
        rows.update(zip(pulled_tables, results, strict=True))
        if self.sequential:  # this worker's updates that compression has not sent yet (its own view)
            for t in pulled_tables:
                own_view(client, self.tables[t], need, rows[t][0])
        return Fetched(uniq, inv, rows, bias, step, cached)

    def _start_rows(self, got: Fetched, table: str) -> npt.NDArray[np.float64]:
        """The batch's rows as pulled, with the cached ones from the row cache. A pull's rows
        are the batch's own (PSClient.pull returns a fresh array): trained as they are, not
        copied first (an FFM batch's state is hundreds of MB)."""
        pulled, _ = got.rows[table]
        if not got.cached.any():
            return np.require(pulled, np.float64, ["C", "W"])
        cached = self.cache.rows(table, got.uniq[got.cached])
        full = np.empty((got.uniq.shape[0], cached.shape[1]), dtype=np.float64)
        full[got.cached] = cached
        if pulled.shape[0]:
            full[~got.cached] = pulled
        return full

    def compute(
        self, batch: SampleBatch, got: Fetched, previous: Trained | None = None
    ) -> tuple[npt.NDArray[np.float32], Trained]:
        """Trains a fetched batch. `previous` is the batch trained just before, whose push may
        not have reached the shards when this batch was fetched: the rows both batches hold
        are taken from its result as the shards compute it once it lands (they add the
        delta), so the model's bits do not depend on where the pipeline was flushed."""
        raw = {t: self._start_rows(got, t) for t in self.sparse}
        raw_bias = self.cache.bias.copy() if got.bias is None else np.array(got.bias, dtype=np.float64).reshape(1, -1)
        if self.sequential:
            if previous is not None:
                raw_bias = carry_previous(got.uniq, raw, previous)
            start, bias_start = raw, raw_bias
            params = self.params
        else:
            start = {t: plain_state(rows) for t, rows in raw.items()}
            bias_start = plain_state(raw_bias.reshape(1, 1))
            params = {name: PLAIN.params() for name in self.params}
        states = {t: rows.copy() for t, rows in start.items()}
        bias_state = bias_start.copy()
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
        self._remember(got, states if self.sequential else raw, bias_state if self.sequential else raw_bias)
        if self.sequential:
            return probs, Trained(got.uniq, start, states, bias_start, bias_state, {}, 0.0, len(batch))
        return probs, Trained(got.uniq, {}, {}, bias_start, bias_state, {"w": gw, "v": gv}, gbias, len(batch))

    def _remember(self, got: Fetched, rows: dict[str, npt.NDArray[np.float64]], bias: npt.NDArray[np.float64]) -> None:
        """Keeps the batch's rows for the steps to come (with per-example updates: as trained,
        so cached rows carry this worker's own updates; with batch updates: as pulled)."""
        if self.cache.staleness == 0:
            return
        pulled = np.full(got.uniq.shape[0], got.step, dtype=np.int64)
        if got.cached.any():
            pulled[got.cached] = self.cache.pulled_at(got.uniq[got.cached])
        bias_pulled = got.step if got.bias is not None else self.cache.bias_pulled
        self.cache.store(got.uniq, rows, pulled, bias, bias_pulled, got.step)

    def push(self, client: PSClient, got: Fetched, done: Trained) -> None:
        push_trained(client, got, done, self.sequential)

    def finish(self, client: PSClient) -> None:
        pass  # nothing held back: every batch is pushed

    @property
    def finish_is_dense(self) -> bool:
        return True  # it sends nothing

    def mlp_for_export(self) -> dict[str, npt.NDArray[np.float32]] | None:
        return None

    def reset(self) -> None:
        self.cache = RowCache(self.cache.staleness, self.sparse)

    def state(self, client: PSClient) -> dict[str, Any]:
        return {}  # the row cache refills from the shards

    def take_up(self, client: PSClient, state: dict[str, Any]) -> None:
        pass

    def train(self, client: PSClient, batch: SampleBatch) -> npt.NDArray[np.float32]:
        got = self.fetch(client, batch)
        probs, done = self.compute(batch, got)
        self.push(client, got, done)
        return probs


def build_model(
    spec: ModelSpec,
    staleness: int = 0,
    dense_codec: str = "fp32",
    replicated: bool = True,
    device: str = "auto",
    batch_size: int = 256,
    ranks: tuple[int, int] = (0, 1),
    moment_bits: int = FP32_MANTISSA,
    weight_bits: int = FP32_MANTISSA,
    low_rank: tuple[int, int] | None = None,
    step_positives: int = 0,
) -> TrainableModel:
    """dense_codec: how the MLP syncs through the PS (trainer.step.dense_sync) when it is not
    `replicated` on the worker (hybrid training, trainer.step.dense_replica); device: where
    it trains (trainer.step.device), at batch_size examples a step; ranks: (this rank, the
    group's size) of a run of several ranks (trainer.run.group); moment_bits: the mantissa
    bits a replicated MLP's Adam moments keep at each cut write (FP32_MANTISSA: whole),
    weight_bits those its weights keep at each cut and export write;
    low_rank: PowerSGD's (rank, warm-up rounds) for the ranks' MLP gradients (None: whole);
    step_positives: the positives and negatives an MLP step waits for (docs/design/mlp-step.md)."""
    if spec.is_dnn:
        if staleness:
            raise ValueError(f"--staleness applies to lr, fm and ffm; {spec.type} pulls every batch")
        require("torch")  # torch loads only for DNN models
        from trainer.step.device import choose, local_rank
        from trainer.step.dnn import DeepModel

        placed = choose(device, spec, batch_size, local_rank())
        return DeepModel(
            spec,
            dense_codec,
            replicated,
            device=placed,
            rank=ranks[0],
            world=ranks[1],
            moment_bits=moment_bits,
            weight_bits=weight_bits,
            low_rank=low_rank,
            step_positives=step_positives,
        )
    if dense_codec != "fp32":
        raise ValueError(f"--dense-codec {dense_codec} applies to the MLP of wdl and deepfm, not {spec.type}")
    if device == "cuda":
        raise ValueError(f"--device cuda: {spec.type} trains with numba kernels on the CPU; only wdl and deepfm use a GPU")
    if device not in ("auto", "cpu"):
        raise ValueError(f"--device {device!r}: expected auto, cpu or cuda")
    return FactorizationModel(spec, staleness)
