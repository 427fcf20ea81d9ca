"""How a worker syncs the MLP's dense Adam table with the shards (`--dense-codec`):

- `fp32`: pull the weights every step, push the fp32 gradient; the shard runs Adam.
- `onebit-adam[:WARMUP]` (1-bit Adam, Tang et al. 2021): plain Adam for WARMUP steps; then
  the variance stays frozen on the shard, and the worker pushes its own momentum 1-bit with
  error feedback (ps.client.push_dense onebit=True), which the shard steps with over the
  frozen variance (ctr.optim.frozen_adam_rows).
- `zeroone-adam[:WARMUP]` (0/1 Adam, Lu et al. 2022), after the same warm-up:
  * adaptive variance freezing: the variance is refreshed (an fp32 gradient push, a full
    Adam step on the shard) only at steps 1, 2, 4, 8... after warm-up, frozen in between;
  * 1-bit sync with skipped rounds: between syncs the worker steps its own copy of the MLP
    with its momentum over the frozen variance and pulls nothing; at a sync it pushes the
    mean momentum of the steps since the last one, 1-bit, standing for that many steps, then
    pulls the shards' weights. The interval between syncs doubles every 8 syncs, up to 16.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from ps.client import GRADIENT, MOMENTUM, PSClient

DEFAULT_WARMUP = 100
MAX_INTERVAL = 16
SYNCS_PER_DOUBLING = 8
F64 = npt.NDArray[np.float64]


class DenseSync(Protocol):
    def weights(self, client: PSClient) -> npt.NDArray[np.floating]:
        """The MLP's weights for this step."""

    def push(self, client: PSClient, grad: npt.NDArray[np.floating]) -> None:
        """Sends (or keeps) this step's mean gradient."""

    def flush(self, client: PSClient) -> None:
        """Sends the steps kept back, if any."""


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
        return OneBitAdam(table, warmup, beta1)
    if name == "zeroone-adam":
        return ZeroOneAdam(table, warmup, lr, beta1, beta2, eps)
    return PlainDense(table)


class PlainDense:
    def __init__(self, table: str) -> None:
        self.table = table

    def weights(self, client: PSClient) -> npt.NDArray[np.floating]:
        return client.pull_dense(self.table)

    def push(self, client: PSClient, grad: npt.NDArray[np.floating]) -> None:
        client.push_dense(self.table, np.asarray(grad, dtype=np.float32), kind=GRADIENT)

    def flush(self, client: PSClient) -> None:
        pass  # every step was sent


class OneBitAdam(PlainDense):
    def __init__(self, table: str, warmup: int, beta1: float) -> None:
        super().__init__(table)
        self.warmup = warmup
        self.beta1 = beta1
        self.steps = 0
        self.momentum: F64 | None = None

    def push(self, client: PSClient, grad: npt.NDArray[np.floating]) -> None:
        self.steps += 1
        if self.steps <= self.warmup:
            super().push(client, grad)
            return
        if self.momentum is None:  # warm-up over: continue from the shard's momentum
            self.momentum = np.array(client.pull_dense(self.table, state=True)[:, 1], dtype=np.float64)
        self.momentum = self.beta1 * self.momentum + (1.0 - self.beta1) * np.asarray(grad, dtype=np.float64)
        client.push_dense(self.table, self.momentum, kind=MOMENTUM, onebit=True)


class ZeroOneAdam(PlainDense):
    def __init__(self, table: str, warmup: int, lr: float, beta1: float, beta2: float, eps: float) -> None:
        super().__init__(table)
        self.warmup, self.lr, self.beta1, self.beta2, self.eps = warmup, lr, beta1, beta2, eps
        self.steps = 0
        self.syncs = 0
        self.since_sync = 0  # local steps since the last sync
        self.momentum: F64 | None = None
        self.momentum_sum: F64 | None = None
        self.local: F64 | None = None  # this worker's copy of the weights between syncs
        self.denominator: F64 | None = None  # sqrt(v / (1 - beta2^t)) + eps, frozen

    def weights(self, client: PSClient) -> npt.NDArray[np.floating]:
        if self.local is None:
            pulled = super().weights(client)
            if self.momentum is not None:  # past warm-up: local steps start from the shards' weights
                self.local = np.array(pulled, dtype=np.float64)
            return pulled
        return self.local

    def push(self, client: PSClient, grad: npt.NDArray[np.floating]) -> None:
        self.steps += 1
        g = np.asarray(grad, dtype=np.float64)
        if self.steps <= self.warmup:
            super().push(client, g)
            return
        if self.momentum is None:
            self._load_state(client)
        assert self.momentum is not None and self.momentum_sum is not None and self.denominator is not None
        self.momentum = self.beta1 * self.momentum + (1.0 - self.beta1) * g
        self.momentum_sum += self.momentum
        self.since_sync += 1
        after = self.steps - self.warmup
        if self.since_sync < self._interval() and after & (after - 1):  # neither a sync nor a refresh
            self.local = self._local() - self.lr * self.momentum / self.denominator
            return
        self._sync(client)
        if after & (after - 1) == 0:  # a power of two: refresh the variance with a full Adam step
            super().push(client, g)
            self._load_state(client)
        self.local = None  # the next step pulls the shards' weights

    def flush(self, client: PSClient) -> None:
        if self.since_sync:
            self._sync(client)
            self.local = None

    def _sync(self, client: PSClient) -> None:
        """Pushes the mean momentum of the local steps since the last sync, standing for them."""
        assert self.momentum_sum is not None
        client.push_dense(self.table, self.momentum_sum / self.since_sync, kind=MOMENTUM, onebit=True, steps=self.since_sync)
        self.syncs += 1
        self.since_sync = 0
        self.momentum_sum = np.zeros_like(self.momentum_sum)

    def _interval(self) -> int:
        return min(MAX_INTERVAL, 1 << (self.syncs // SYNCS_PER_DOUBLING))

    def _local(self) -> F64:
        if self.local is None:
            raise RuntimeError("no local copy of the weights")  # weights() ran before every push
        return np.asarray(self.local, dtype=np.float64)

    def _load_state(self, client: PSClient) -> None:
        state = client.pull_dense(self.table, state=True)  # [n, 4]: w, m, v, t
        t = np.maximum(state[:, 3], 1.0)
        if self.momentum is None:
            self.momentum = np.array(state[:, 1], dtype=np.float64)
        self.momentum_sum = np.zeros_like(self.momentum)
        self.denominator = np.sqrt(state[:, 2] / (1.0 - self.beta2**t)) + self.eps
        self.local = np.array(state[:, 0], dtype=np.float64)
