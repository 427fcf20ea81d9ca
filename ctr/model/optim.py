"""Optimizers of PS tables: settings, row layout, and the numba kernels that step them.

Every row's optimizer state is float64, so accumulators keep growing past 2^24 steps and
FTRL's sigma = (sqrt(n + g^2) - sqrt(n)) / alpha is computed as g^2 / (sqrt(n + g^2) + sqrt(n))
/ alpha, which loses no digits. The layouts, for a row of d weights:

    ftrl     z[d] | n[d]                 weight derived from z, n (McMahan et al. 2013)
    adagrad  w[d] | acc[d]               acc starts at initial_accumulator
    adam     w[d] | m[d] | v[d] | t      lazy sparse Adam: t counts this row's own steps
    sgd      w[d] | mom[d]               SGD with momentum

The same `step` kernel runs on the shard (one step with a pushed gradient) and on a worker
(one step per example on its copy of the pulled rows; it then pushes the state delta).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import numba as nb
import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]

KINDS = ("ftrl", "adagrad", "adam", "sgd")
FTRL, ADAGRAD, ADAM, SGD = 0, 1, 2, 3
# index of each setting in the float64 parameter vector the kernels take
P_KIND, P_LR, P_BETA, P_L1, P_L2, P_ACC0, P_B1, P_B2, P_EPS, P_MOM, P_INIT, P_SEED = range(12)
N_PARAMS = 12
# a float32's mantissa bits: an Adam moment rounded to this many is kept whole (--mlp-moment-bits)
FP32_MANTISSA = 23


class OptimizerError(ValueError):
    """An optimizer setting that cannot work, named."""


@dataclass(frozen=True)
class OptimizerSpec:
    """One table's optimizer. `lr` is FTRL's alpha. `init_std` > 0 draws initial weights
    uniformly with that standard deviation from a hash of (key, seed), so every process
    derives the same initial row without storing it. `max_abs` bounds every pushed gradient
    (a pushed state delta must instead keep the state finite: ps.server.tables.STATE_LIMIT).
    `clip_norm` > 0 (the MLP's only) scales each step's mean gradient down to that global L2
    norm where it is larger, before Adam (trainer.step.dense_replica: docs/design/mlp-step.md)."""

    kind: str = "ftrl"
    lr: float = 0.05
    beta: float = 1.0
    l1: float = 0.0
    l2: float = 0.0
    initial_accumulator: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    momentum: float = 0.9
    init_std: float = 0.0
    seed: int = 0
    max_abs: float = 1e6
    clip_norm: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise OptimizerError(f"optimizer: unknown kind {self.kind!r}; expected one of {', '.join(KINDS)}")
        for name in ("lr", "max_abs"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise OptimizerError(f"optimizer {self.kind}: {name} must be a positive number, got {v}")
        for name in ("beta", "l1", "l2", "initial_accumulator", "eps", "init_std", "clip_norm"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise OptimizerError(f"optimizer {self.kind}: {name} must be >= 0, got {v}")
        for name in ("beta1", "beta2", "momentum"):
            v = getattr(self, name)
            if not 0 <= v < 1:
                raise OptimizerError(f"optimizer {self.kind}: {name} must be in [0, 1), got {v}")

    def state_width(self, dim: int) -> int:
        return state_width(self.kind, dim)

    def params(self) -> F64:
        p = np.zeros(N_PARAMS, dtype=np.float64)
        p[P_KIND] = KINDS.index(self.kind)
        p[P_LR], p[P_BETA], p[P_L1], p[P_L2] = self.lr, self.beta, self.l1, self.l2
        p[P_ACC0], p[P_B1], p[P_B2], p[P_EPS], p[P_MOM] = (
            self.initial_accumulator,
            self.beta1,
            self.beta2,
            self.eps,
            self.momentum,
        )
        p[P_INIT], p[P_SEED] = self.init_std, float(self.seed)
        return p

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "optimizer") -> OptimizerSpec:
        known = {f.name: f.type for f in fields(cls)}
        unknown = set(d) - set(known)
        if unknown:
            raise OptimizerError(f"{where}: unknown settings {sorted(unknown)}; known: {sorted(known)}")
        out: dict[str, Any] = {}
        for k, v in d.items():
            try:
                out[k] = str(v) if k == "kind" else (int(v) if k == "seed" else float(v))
            except (TypeError, ValueError):
                raise OptimizerError(f"{where}.{k}: {v!r} is not a number") from None
        try:
            return cls(**out)
        except OptimizerError as e:
            raise OptimizerError(f"{where}: {e}") from None


def state_width(kind: str, dim: int) -> int:
    return 3 * dim + 1 if kind == "adam" else 2 * dim


@nb.njit(cache=True, inline="always")
def _splitmix(x: np.uint64) -> np.uint64:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@nb.njit(cache=True, inline="always")
def init_weight(key: np.uint64, i: int, p: F64) -> float:
    """The initial weight i of a row: uniform with std init_std, from (key, i, seed)."""
    if p[P_INIT] == 0.0:
        return 0.0
    h = _splitmix(key ^ _splitmix(np.uint64(i) + np.uint64(int(p[P_SEED])) * np.uint64(0x100000001B3)))
    u = float(h >> np.uint64(11)) / 9007199254740992.0  # [0, 1)
    return (2.0 * u - 1.0) * 1.7320508075688772 * p[P_INIT]


@nb.njit(cache=True, inline="always")
def _ftrl_weight(z: float, n: float, p: F64) -> float:
    l1 = p[P_L1]
    if abs(z) <= l1:
        return 0.0
    sign = 1.0 if z > 0 else -1.0
    return -(z - sign * l1) / ((p[P_BETA] + np.sqrt(max(n, 0.0))) / p[P_LR] + p[P_L2])


@nb.njit(cache=True, inline="always")
def weight_of(state: F64, d: int, i: int, p: F64) -> float:
    """Weight i of a row from its state."""
    if int(p[P_KIND]) == FTRL:
        return _ftrl_weight(state[i], state[d + i], p)
    return state[i]


@nb.njit(cache=True, inline="always")
def set_weight(state: F64, d: int, i: int, w: float, p: F64) -> None:
    """Puts the row's weight i at w with empty slots (the state a fresh row starts in)."""
    kind = int(p[P_KIND])
    if kind == FTRL:
        if w == 0.0:
            state[i] = 0.0
        else:
            sign = 1.0 if w > 0 else -1.0
            state[i] = -(w * (p[P_BETA] / p[P_LR] + p[P_L2]) + sign * p[P_L1])
        state[d + i] = 0.0
    else:
        state[i] = w
        state[d + i] = p[P_ACC0] if kind == ADAGRAD else 0.0
        if kind == ADAM:
            state[2 * d + i] = 0.0
    if kind == ADAM:
        state[3 * d] = 0.0


@nb.njit(cache=True, inline="always")
def init_row(state: F64, d: int, key: np.uint64, p: F64) -> None:
    for i in range(d):
        set_weight(state, d, i, init_weight(key, i, p), p)


@nb.njit(cache=True, inline="always")
def _adam(state: F64, g: F64, d: int, p: F64, t: float, c1: float, c2: float) -> None:
    """Adam's step t, with its bias corrections c1 = 1 - beta1^t, c2 = 1 - beta2^t."""
    state[3 * d] = t
    b1, b2, lr = p[P_B1], p[P_B2], p[P_LR]
    for i in range(d):
        gi = g[i] + p[P_L2] * state[i]
        m = b1 * state[d + i] + (1.0 - b1) * gi
        v = b2 * max(state[2 * d + i], 0.0) + (1.0 - b2) * gi * gi
        state[d + i] = m
        state[2 * d + i] = v
        state[i] -= lr * (m / c1) / (np.sqrt(v / c2) + p[P_EPS])


@nb.njit(cache=True, inline="always")
def _adagrad_at(state: F64, g: F64, d: int, i: int, lr: float, l2: float, eps: float) -> float:
    """Adagrad's step of weight i of a row ([w | acc]); returns the new weight."""
    gi = g[i] + l2 * state[i]
    acc = max(state[d + i], 0.0) + gi * gi
    state[d + i] = acc
    state[i] -= lr * gi / (np.sqrt(acc) + eps)
    return state[i]  # type: ignore[no-any-return]


@nb.njit(cache=True, inline="always")
def step(state: F64, g: F64, d: int, p: F64) -> None:
    """One optimizer step of a row with gradient g[d]."""
    kind = int(p[P_KIND])
    lr = p[P_LR]
    if kind == FTRL:
        for i in range(d):
            z = state[i]
            n = max(state[d + i], 0.0)  # a lossy delta push may leave it just below 0
            gi = g[i]
            w = _ftrl_weight(z, n, p)
            g2 = gi * gi
            n2 = n + g2
            sigma = g2 / (np.sqrt(n2) + np.sqrt(n)) / lr if g2 > 0 else 0.0
            state[i] = z + gi - sigma * w
            state[d + i] = n2
    elif kind == ADAGRAD:
        for i in range(d):
            _adagrad_at(state, g, d, i, lr, p[P_L2], p[P_EPS])
    elif kind == ADAM:
        t = state[3 * d] + 1.0
        _adam(state, g, d, p, t, 1.0 - p[P_B1] ** t, 1.0 - p[P_B2] ** t)
    else:
        for i in range(d):
            gi = g[i] + p[P_L2] * state[i]
            mom = p[P_MOM] * state[d + i] + gi
            state[d + i] = mom
            state[i] -= lr * mom


@nb.njit(cache=True, inline="always")
def step_into(state: F64, g: F64, d: int, p: F64, w: F64) -> None:
    """`step`, then w[i] = weight_of(state, d, i, p) and g[i] = 0 for every i: for Adagrad
    in one pass over the row (an FFM row holds F k-vectors: three passes were a third of
    its training kernel), the same expressions, so the same bits."""
    if int(p[P_KIND]) == ADAGRAD:
        lr, l2, eps = p[P_LR], p[P_L2], p[P_EPS]
        for i in range(d):
            w[i] = _adagrad_at(state, g, d, i, lr, l2, eps)
            g[i] = 0.0
        return
    step(state, g, d, p)
    for i in range(d):
        w[i] = weight_of(state, d, i, p)
        g[i] = 0.0


@nb.njit(cache=True, inline="always")
def ftrl_step_1d(state: F64, g: float, w: float, sqrt_n: F64, r: int, p: F64) -> float:
    """`step` then `weight_of` of a 1-wide FTRL row whose weight w and sqrt(n) (in
    sqrt_n[r], updated here) the caller keeps: one square root instead of four, the same
    expressions, so the same bits as the generic pair. Returns the new weight."""
    z = state[0]
    n = max(state[1], 0.0)  # as `step` reads it: a lossy push or pull may leave it below 0
    sn = sqrt_n[r]
    g2 = g * g
    if g2 > 0:
        n2 = n + g2
        sn2 = np.sqrt(n2)
        sigma = g2 / (sn2 + sn) / p[P_LR]
    else:
        n2, sn2, sigma = n, sn, 0.0
    z2 = z + g - sigma * w
    state[0] = z2
    state[1] = n2
    sqrt_n[r] = sn2
    l1 = p[P_L1]
    if abs(z2) <= l1:
        return 0.0
    sign = 1.0 if z2 > 0 else -1.0
    return -(z2 - sign * l1) / ((p[P_BETA] + sn2) / p[P_LR] + p[P_L2])


@nb.njit(cache=True, nogil=True)
def weights_of_rows(state: F64, d: int, p: F64) -> F64:
    """Weights [n, d] of n state rows."""
    out = np.empty((state.shape[0], d), dtype=np.float64)
    for r in range(state.shape[0]):
        for i in range(d):
            out[r, i] = weight_of(state[r], d, i, p)
    return out


@nb.njit(cache=True, nogil=True)
def init_rows(keys: U64, width: int, d: int, p: F64) -> F64:
    """Initial state rows [n, width] of keys."""
    out = np.zeros((keys.shape[0], width), dtype=np.float64)
    for r in range(keys.shape[0]):
        init_row(out[r], d, keys[r], p)
    return out


@nb.njit(cache=True, nogil=True)
def rows_with_weights(weights: F64, width: int, p: F64) -> F64:
    """State rows [n, width] whose weights are weights[n, d], slots empty."""
    d = weights.shape[1]
    out = np.zeros((weights.shape[0], width), dtype=np.float64)
    for r in range(weights.shape[0]):
        for i in range(d):
            set_weight(out[r], d, i, weights[r, i], p)
    return out


@nb.njit(cache=True, nogil=True)
def step_rows(state: F64, grads: F64, d: int, p: F64) -> None:
    """One step per row: state[r] with gradient grads[r]. Adam's bias corrections are
    computed once per distinct step count (every element of a dense table shares one)."""
    if int(p[P_KIND]) != ADAM:
        for r in range(state.shape[0]):
            step(state[r], grads[r], d, p)
        return
    last = -1.0
    c1 = c2 = 1.0
    for r in range(state.shape[0]):
        t = state[r, 3 * d] + 1.0
        if t != last:
            last, c1, c2 = t, 1.0 - p[P_B1] ** t, 1.0 - p[P_B2] ** t
        _adam(state[r], grads[r], d, p, t, c1, c2)


@nb.njit(cache=True, nogil=True)
def frozen_adam_rows(state: F64, update: F64, p: F64, steps: int = 1) -> None:
    """1-bit Adam's step after warm-up (Tang et al. 2021) on rows of one Adam weight each
    ([w, m, v, t]) with v and t frozen. The worker sends its momentum already divided by the
    frozen denominator, u = m / (sqrt(v / (1 - beta2^t)) + eps): a 1-bit code gives every
    value about the mean magnitude, which, divided by a tiny frozen denominator, would throw
    a weight far off; u has Adam's even scale. w -= steps * lr * u (0/1 Adam's u is the mean
    of `steps` local steps) and m = u * denominator."""
    lr, eps, b2 = p[P_LR], p[P_EPS], p[P_B2]
    for r in range(state.shape[0]):
        t = max(state[r, 3], 1.0)
        u = update[r, 0]
        state[r, 1] = u * (np.sqrt(state[r, 2] / (1.0 - b2**t)) + eps)
        state[r, 0] -= steps * lr * u


PLAIN = OptimizerSpec("sgd", lr=1.0, momentum=0.0)  # state [w | mom]: weights read as they are


def plain_state(weights: npt.NDArray[np.floating]) -> F64:
    """Weights [n, d] as a state whose weight_of is the weight itself (with PLAIN.params())."""
    w = np.asarray(weights, dtype=np.float64)
    return np.concatenate([w, np.zeros_like(w)], axis=1)


def accumulator_columns(kind: str, dim: int) -> slice:
    """Columns that only grow (n, acc, v, t): read as max(value, 0), since a lossy delta
    push may leave them just below 0 until error feedback sends the rest."""
    if kind == "adam":
        return slice(2 * dim, 3 * dim + 1)
    if kind in ("ftrl", "adagrad"):
        return slice(dim, 2 * dim)
    return slice(0, 0)


def weights_read_accumulators(kind: str) -> bool:
    """Whether a row's weights are computed from its accumulator columns (FTRL's w from z
    and n): a served version then needs them as current as the rest of the row. Adagrad's
    and Adam's weights are a column of their own; their accumulators only scale steps."""
    return kind == "ftrl"


# ---- plain references used by the tests --------------------------------------------------


def weights_reference(kind: str, state: F64, d: int, spec: OptimizerSpec) -> F64:
    if kind != "ftrl":
        return np.asarray(state[..., :d], dtype=np.float64)
    z, n = state[..., :d], state[..., d : 2 * d]
    w = -(z - np.sign(z) * spec.l1) / ((spec.beta + np.sqrt(n)) / spec.lr + spec.l2)
    return np.where(np.abs(z) <= spec.l1, 0.0, w)


def step_reference(state: F64, g: F64, d: int, spec: OptimizerSpec) -> F64:
    """One step of one row, written as the papers write it; returns the new state."""
    s = np.array(state, dtype=np.float64)
    g = np.asarray(g, dtype=np.float64)
    if spec.kind == "ftrl":
        z, n = s[:d], s[d : 2 * d]
        w = weights_reference("ftrl", s, d, spec)
        sigma = (np.sqrt(n + g * g) - np.sqrt(n)) / spec.lr
        s[:d], s[d : 2 * d] = z + g - sigma * w, n + g * g
    elif spec.kind == "adagrad":
        g = g + spec.l2 * s[:d]
        s[d : 2 * d] += g * g
        s[:d] -= spec.lr * g / (np.sqrt(s[d : 2 * d]) + spec.eps)
    elif spec.kind == "adam":
        g = g + spec.l2 * s[:d]
        t = s[3 * d] + 1
        m = spec.beta1 * s[d : 2 * d] + (1 - spec.beta1) * g
        v = spec.beta2 * s[2 * d : 3 * d] + (1 - spec.beta2) * g * g
        s[:d] -= spec.lr * (m / (1 - spec.beta1**t)) / (np.sqrt(v / (1 - spec.beta2**t)) + spec.eps)
        s[d : 2 * d], s[2 * d : 3 * d], s[3 * d] = m, v, t
    else:
        g = g + spec.l2 * s[:d]
        s[d : 2 * d] = spec.momentum * s[d : 2 * d] + g
        s[:d] -= spec.lr * s[d : 2 * d]
    return s


def frozen_adam_reference(state: F64, momentum: F64, spec: OptimizerSpec, steps: int = 1) -> F64:
    """frozen_adam_rows as the paper writes it; returns the new state."""
    s = np.array(state, dtype=np.float64)
    t = np.maximum(s[:, 3], 1.0)
    s[:, 1] = momentum[:, 0] * (np.sqrt(s[:, 2] / (1 - spec.beta2**t)) + spec.eps)
    s[:, 0] -= steps * spec.lr * momentum[:, 0]
    return s
