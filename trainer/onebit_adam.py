"""1-bit Adam on the worker (Tang et al. 2021) for a dense Adam table: plain Adam on the
shard during warm-up (fp32 gradients), then the variance stays frozen on the shard and the
worker pushes its own momentum, 1-bit compressed with error feedback (ps.client.push_dense
onebit=True); the shard steps with it over the frozen variance (ctr.optim.frozen_adam_rows).

    spec := "fp32" | "onebit-adam" [":" WARMUP_STEPS]
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ps.client import GRADIENT, MOMENTUM, PSClient

DEFAULT_WARMUP = 100


def parse_dense_codec(text: str) -> int | None:
    """The warm-up steps of 'onebit-adam[:N]', or None for 'fp32' (plain gradients)."""
    name, _, steps = text.partition(":")
    if name == "fp32" and not steps:
        return None
    if name != "onebit-adam":
        raise ValueError(f"--dense-codec {text!r}: expected fp32 or onebit-adam[:WARMUP_STEPS]")
    try:
        warmup = int(steps) if steps else DEFAULT_WARMUP
    except ValueError:
        raise ValueError(f"--dense-codec {text!r}: the warm-up is a number of steps") from None
    if warmup < 1:
        raise ValueError(f"--dense-codec {text!r}: the warm-up needs at least 1 step (it sets the variance)")
    return warmup


class OneBitAdam:
    def __init__(self, table: str, warmup: int, beta1: float) -> None:
        self.table = table
        self.warmup = warmup
        self.beta1 = beta1
        self.steps = 0
        self.momentum: npt.NDArray[np.float64] | None = None

    def push(self, client: PSClient, grad: npt.NDArray[np.floating]) -> None:
        """Pushes one step's mean gradient of the whole vector."""
        self.steps += 1
        if self.steps <= self.warmup:
            client.push_dense(self.table, np.asarray(grad, dtype=np.float32), kind=GRADIENT)
            return
        if self.momentum is None:  # warm-up over: continue from the shard's momentum
            self.momentum = np.array(client.pull_dense(self.table, state=True)[:, 1], dtype=np.float64)
        self.momentum = self.beta1 * self.momentum + (1.0 - self.beta1) * np.asarray(grad, dtype=np.float64)
        client.push_dense(self.table, self.momentum, kind=MOMENTUM, onebit=True)
