"""How a worker syncs the MLP's dense Adam table with the shards (`--dense-codec`):

- `fp32`: pull the weights every step, push the fp32 gradient; the shard runs Adam.
- `onebit-adam[:WARMUP]` (1-bit Adam, Tang et al. 2021): plain Adam for WARMUP steps; then
  the variance stays frozen on the shard, and the worker pushes its own momentum divided by
  the frozen denominator, 1-bit with error feedback (ps.client.PSClient.push_dense onebit=True); the
  shard steps with it (ctr.model.optim.frozen_adam_rows).
- `zeroone-adam[:WARMUP]` (0/1 Adam, Lu et al. 2022), after the same warm-up:
  * adaptive variance freezing: the variance is refreshed (an fp32 gradient push, a full
    Adam step on the shard) only at steps 1, 2, 4, 8... after warm-up, frozen in between;
  * 1-bit sync with skipped rounds: between syncs the worker steps its own copy of the MLP
    with its momentum over the frozen variance and pulls nothing; at a sync it pushes the
    mean update of the steps since the last one, 1-bit, standing for that many steps, then
    pulls the shards' weights. The interval between syncs doubles every 8 syncs, up to 16.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ps.api import GRADIENT, MOMENTUM
from ps.client import PSClient
from trainer.json_arrays import array_text, text_array

DEFAULT_WARMUP = 100
# |m / frozen denominator| is capped: a weight whose variance froze near 0 (a unit with no
# gradient during warm-up) would otherwise take an unbounded step once its gradient returns;
# Adam's own ratio stays within (1 - beta1) / sqrt(1 - beta2), about 3.2 at the defaults
MAX_UPDATE = 10.0
MAX_INTERVAL = 16
SYNCS_PER_DOUBLING = 8
F64 = npt.NDArray[np.float64]


class DenseSync(Protocol):
    def weights(self, client: PSClient) -> npt.NDArray[np.floating]:
        """The MLP's weights for this step."""

    def push(self, client: PSClient, grad: npt.NDArray[np.floating], samples: int = 0) -> None:
        """Sends (or keeps) this step's mean gradient, over `samples` samples."""

    def flush(self, client: PSClient) -> None:
        """Sends the steps kept back, if any."""

    def state(self, client: PSClient) -> dict[str, Any]:
        """What this worker keeps of the sync, JSON-ready, for a checkpoint cut (its 1-bit
        residual included): a worker that takes up at the cut goes on as this one would."""

    def take_up(self, client: PSClient, state: dict[str, Any]) -> None:
        """Goes on from a cut's `state` (empty: from the start)."""


def parse_dense_codec(text: str) -> tuple[str, int]:
    """('fp32' | 'onebit-adam' | 'zeroone-adam', warm-up steps)."""
    name, _, steps = text.partition(":")
    if name == "fp32" and not steps:
        return name, 0
    if name not in ("onebit-adam", "zeroone-adam"):
        raise ValueError(f"--dense-codec {text!r}: expected fp32, onebit-adam[:WARMUP] or zeroone-adam[:WARMUP]")
    try:
        warmup = int(steps) if steps else DEFAULT_WARMUP
    except ValueError:
        raise ValueError(f"--dense-codec {text!r}: the warm-up is a number of steps") from None
    if warmup < 1:
        raise ValueError(f"--dense-codec {text!r}: the warm-up needs at least 1 step (it sets the variance)")
    return name, warmup


def dense_sync(text: str, table: str, lr: float, beta1: float, beta2: float, eps: float) -> DenseSync:
    name, warmup = parse_dense_codec(text)
    if name == "onebit-adam":
        return OneBitAdam(table, warmup, beta1, beta2, eps)
    if name == "zeroone-adam":
        return ZeroOneAdam(table, warmup, lr, beta1, beta2, eps)
    return PlainDense(table)


class PlainDense:
    def __init__(self, table: str) -> None:
        self.table = table

    def weights(self, client: PSClient) -> npt.NDArray[np.floating]:
        return client.pull_dense(self.table)

    def push(self, client: PSClient, grad: npt.NDArray[np.floating], samples: int = 0) -> None:
        client.push_dense(self.table, np.asarray(grad, dtype=np.float32), kind=GRADIENT, samples=samples)

    def flush(self, client: PSClient) -> None:
        pass  # every step was sent

    def state(self, client: PSClient) -> dict[str, Any]:
        return {}  # the shards hold it all

    def take_up(self, client: PSClient, state: dict[str, Any]) -> None:
        pass


class OneBitAdam(PlainDense):
    def __init__(self, table: str, warmup: int, beta1: float, beta2: float, eps: float) -> None:
        super().__init__(table)
        self.warmup, self.beta1, self.beta2, self.eps = warmup, beta1, beta2, eps
        self.steps = 0
        self.momentum: F64 | None = None
        self.denominator: F64 | None = None  # sqrt(v / (1 - beta2^t)) + eps, frozen

    def push(self, client: PSClient, grad: npt.NDArray[np.floating], samples: int = 0) -> None:
        self.steps += 1
        if self.steps <= self.warmup:
            super().push(client, grad, samples)
            return
        if self.momentum is None:  # warm-up over: continue from the shards' momentum
            self.momentum, self.denominator, _ = frozen_state(client, self.table, self.beta2, self.eps)
        assert self.denominator is not None
        self.momentum = self.beta1 * self.momentum + (1.0 - self.beta1) * np.asarray(grad, dtype=np.float64)
        client.push_dense(self.table, bounded(self.momentum / self.denominator), kind=MOMENTUM, onebit=True, samples=samples)

    def state(self, client: PSClient) -> dict[str, Any]:
        arrays = {"momentum": self.momentum, "denominator": self.denominator, "residual": client.dense_residual(self.table)}
        return {"steps": self.steps, **{k: array_text(v) for k, v in arrays.items()}}

    def take_up(self, client: PSClient, state: dict[str, Any]) -> None:
        self.steps = int(state.get("steps", 0))
        self.momentum, self.denominator = text_array(state.get("momentum")), text_array(state.get("denominator"))
        client.set_dense_residual(self.table, text_array(state.get("residual")))


def bounded(update: F64) -> F64:
    return np.clip(update, -MAX_UPDATE, MAX_UPDATE)


def frozen_state(client: PSClient, table: str, beta2: float, eps: float) -> tuple[F64, F64, F64]:
    """(momentum, frozen denominator sqrt(v / (1 - beta2^t)) + eps, weights) of the shards."""
    state = client.pull_dense(table, state=True)  # [n, 4]: w, m, v, t
    t = np.maximum(state[:, 3], 1.0)
    denominator = np.sqrt(state[:, 2] / (1.0 - beta2**t)) + eps
    return np.array(state[:, 1], dtype=np.float64), denominator, np.array(state[:, 0], dtype=np.float64)


class ZeroOneAdam(PlainDense):
    def __init__(self, table: str, warmup: int, lr: float, beta1: float, beta2: float, eps: float) -> None:
        super().__init__(table)
        self.warmup, self.lr, self.beta1, self.beta2, self.eps = warmup, lr, beta1, beta2, eps
        self.steps = 0
        self.syncs = 0
        self.since_sync = 0  # local steps since the last sync
        self.unsynced_samples = 0  # their samples
        self.momentum: F64 | None = None
        self.update_sum: F64 | None = None  # the local steps' momentum / denominator since the last sync
        self.local: F64 | None = None  # this worker's copy of the weights between syncs
        self.denominator: F64 | None = None  # sqrt(v / (1 - beta2^t)) + eps, frozen

    def weights(self, client: PSClient) -> npt.NDArray[np.floating]:
        if self.local is None:
            pulled = super().weights(client)
            if self.momentum is not None:  # past warm-up: local steps start from the shards' weights
                self.local = np.array(pulled, dtype=np.float64)
            return pulled
        return self.local

    def push(self, client: PSClient, grad: npt.NDArray[np.floating], samples: int = 0) -> None:
        self.steps += 1
        g = np.asarray(grad, dtype=np.float64)
        if self.steps <= self.warmup:
            super().push(client, g, samples)
            return
        if self.momentum is None:
            self._load_state(client)
        assert self.momentum is not None and self.update_sum is not None and self.denominator is not None
        self.momentum = self.beta1 * self.momentum + (1.0 - self.beta1) * g
        update = bounded(self.momentum / self.denominator)
        self.update_sum += update
        self.since_sync += 1
        self.unsynced_samples += samples
        after = self.steps - self.warmup
        if self.since_sync < self._interval() and after & (after - 1):  # neither a sync nor a refresh
            self.local = self._local() - self.lr * update
            return
        self._sync(client)
        if after & (after - 1) == 0:  # a power of two: refresh the variance with a full Adam step
            super().push(client, g)  # its samples went with the sync
            self._load_state(client)  # which brings the shards' weights for the next step too
        else:
            self.local = None  # the next step pulls the shards' weights

    def flush(self, client: PSClient) -> None:
        if self.since_sync:
            self._sync(client)
            self.local = None

    def _sync(self, client: PSClient) -> None:
        """Pushes the mean update of the local steps since the last sync, standing for them."""
        assert self.update_sum is not None
        client.push_dense(
            self.table,
            self.update_sum / self.since_sync,
            kind=MOMENTUM,
            onebit=True,
            steps=self.since_sync,
            samples=self.unsynced_samples,
        )
        self.unsynced_samples = 0
        self.syncs += 1
        self.since_sync = 0
        self.update_sum = np.zeros_like(self.update_sum)

    def state(self, client: PSClient) -> dict[str, Any]:
        counts = {k: getattr(self, k) for k in ("steps", "syncs", "since_sync", "unsynced_samples")}
        arrays = {k: getattr(self, k) for k in ("momentum", "update_sum", "local", "denominator")}
        arrays["residual"] = client.dense_residual(self.table)
        return {**counts, **{k: array_text(v) for k, v in arrays.items()}}

    def take_up(self, client: PSClient, state: dict[str, Any]) -> None:
        for k in ("steps", "syncs", "since_sync", "unsynced_samples"):
            setattr(self, k, int(state.get(k, 0)))
        for k in ("momentum", "update_sum", "local", "denominator"):
            setattr(self, k, text_array(state.get(k)))
        client.set_dense_residual(self.table, text_array(state.get("residual")))

    def _interval(self) -> int:
        return min(MAX_INTERVAL, 1 << (self.syncs // SYNCS_PER_DOUBLING))

    def _local(self) -> F64:
        if self.local is None:
            raise RuntimeError("no local copy of the weights")  # weights() ran before every push
        return np.asarray(self.local, dtype=np.float64)

    def _load_state(self, client: PSClient) -> None:
        momentum, self.denominator, self.local = frozen_state(client, self.table, self.beta2, self.eps)
        if self.momentum is None:
            self.momentum = momentum
        self.update_sum = np.zeros_like(self.momentum)
