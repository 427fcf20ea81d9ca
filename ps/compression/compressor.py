"""One compressor per worker and table (docs/ps-compression.md): a value codec, optionally
behind top-k row selection, with error feedback for lossy codecs. A push's rows plus their
residuals are compressed; what the shard will not receive stays in the residual store for
the next push of those keys.

    spec := value | "topk:" RATIO "+" value | "topk:" RATIO      (top-k alone sends fp32)
          | value ":rounded"                                   (fp16, bf16, bf16z: no error feedback)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ps.compression.payload import VALUE_CODECS, Compressed, ValueCodec, coarse_bf16z
from ps.compression.quantize import rows_past_bound
from ps.compression.residuals import ResidualStore
from ps.compression.topk import mstopk_threshold, row_scores, rows_at_least

Keys = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]
MSTOPK_ROUNDS = 25
# codecs whose rounding is small enough to send without error feedback (at most 2**-8 of a
# value for bf16, 2**-11 for fp16); 1-bit, int8 and the 8-11-bit formats need the feedback or bias what they send
ROUNDABLE = ("fp16", "bf16", "bf16z")
ROUNDED = ":rounded"


@dataclass(frozen=True)
class CodecSpec:
    """rounded: each push's rows go as the codec rounds them and the rounding is not kept
    (no error feedback): the shard's row moves by exactly what the worker's copy of it does,
    so nothing is owed to any cut or export (`auto`'s bf16z state deltas:
    docs/design/rounded-pushes.md)."""

    value: str
    topk: float | None = None
    rounded: bool = False

    def __post_init__(self) -> None:
        if self.rounded and (self.topk is not None or self.value not in ROUNDABLE):
            raise ValueError(f"only {', '.join(ROUNDABLE)} go rounded (no error feedback), alone, not behind top-k")

    @property
    def name(self) -> str:
        """As --push-codec spells it."""
        top = f"topk:{self.topk:g}+" if self.topk is not None else ""
        return top + self.value + (ROUNDED if self.rounded else "")

    @property
    def feedback(self) -> bool:
        """Whether unsent parts of rows are kept for the next push (top-k, lossy values)."""
        return not self.rounded and (self.topk is not None or VALUE_CODECS[self.value].feedback)


def parse_codec(text: str) -> CodecSpec:
    """'onebit', 'topk:0.01+onebit', 'topk:0.05' (fp32 values), 'bf16z:rounded'."""
    text = text.strip()
    if text.endswith(ROUNDED):
        spec = parse_codec(text.removesuffix(ROUNDED))
        try:
            return CodecSpec(spec.value, spec.topk, rounded=True)
        except ValueError as e:
            raise ValueError(f"codec {text!r}: {e}") from None
    head, _, tail = text.partition("+")
    if head.startswith("topk:"):
        try:
            ratio = float(head[5:])
        except ValueError:
            raise ValueError(f"codec {text!r}: topk needs a ratio, e.g. topk:0.01") from None
        if not 0.0 < ratio <= 1.0:
            raise ValueError(f"codec {text!r}: the topk ratio must be in (0, 1]")
        value = tail or "fp32"
    else:
        if tail:
            raise ValueError(f"codec {text!r}: only topk combines with a value codec (topk:RATIO+CODEC)")
        ratio, value = None, head  # type: ignore[assignment]
    if value not in VALUE_CODECS:
        raise ValueError(f"codec {text!r}: unknown value codec {value!r}; known: {', '.join(VALUE_CODECS)}")
    return CodecSpec(value, ratio)


class Compressor:
    """residual_bound: None keeps every residual until its row's next push or a drain; a
    number B sends a row exactly, update and residual, in the push that would leave its
    residual above B times its column's mean sent magnitude (in the push's own payload,
    Compressed.with_exact; a row top-k does not carry goes after it with its key). Several ranks pushing the same rows
    need the bound: 1-bit sends every value of a column as that column's mean, so a hot
    row's residual grows push after push, and the other ranks train that row without it
    (docs/design/residual-bound.md).

    coarse: (columns, bits) of bf16z:rounded: those columns (a state delta's accumulators)
    keep only `bits` mantissa bits of bf16's 7 (docs/design/rounded-pushes.md,
    "Accumulators at 4 mantissa bits").

    held: columns (a state delta's accumulators) that a codec with error feedback does not
    push: they stay in the residuals until a drain sends them, and the push carries them as
    zeros, which onebit's sign planes send for a few bytes a push (docs/design/sign-planes.md)."""

    def __init__(
        self,
        spec: CodecSpec,
        residual_rows: int,
        seed: int = 0,
        residual_bound: float | None = None,
        coarse: tuple[slice, int] | None = None,
        held: slice | None = None,
    ) -> None:
        if coarse is not None and spec.name != "bf16z:rounded":
            raise ValueError(f"codec {spec.name}: only bf16z:rounded rounds columns further (no error feedback to keep it)")
        if held is not None and not spec.feedback:
            raise ValueError(f"codec {spec.name}: only a codec with error feedback holds columns back for the drains")
        self.spec = spec
        self.coarse = coarse
        self.held = held
        self.codec: ValueCodec = VALUE_CODECS[spec.value] if coarse is None else coarse_bf16z(*coarse)
        self.residuals = ResidualStore(residual_rows) if spec.feedback else None
        self.residual_bound = residual_bound if spec.feedback else None
        self.rng = np.random.default_rng(seed)
        self.flushed_rows = 0
        self.bound_rows = 0  # rows sent exactly because their residual passed the bound
        self._drained_at = 0  # the residual store's tick at the last export's drain
        self._lock = threading.Lock()  # the pull thread reads residuals while a push writes them

    def unsent(self, keys: Keys, cols: int) -> F64:
        """What the shards lack of these sorted unique keys' rows: their residuals."""
        if self.residuals is None:
            return np.zeros((keys.shape[0], cols))
        with self._lock:
            return self.residuals.take(keys, cols)

    def drain(self) -> tuple[Keys, F64]:
        """Every residual (keys, rows), leaving the store empty: the caller sends them exactly."""
        if self.residuals is None:
            return np.zeros(0, dtype=np.uint64), np.zeros((0, 0))
        with self._lock:
            r = self.residuals
            out = r.items()
            self.residuals = ResidualStore(r.capacity)
            self.residuals.peak_rows = r.peak_rows
            self.flushed_rows += int(out[0].shape[0])
            self._drained_at = 0
            return out

    def drain_pushed(self) -> tuple[Keys, F64]:
        """The residuals of the rows pushed since the last call (keys, rows), taken from the
        store: an export's drain. A row only what that drain's codec rounded off (kept
        back with `keep`) stays owed until it is pushed again or a cut drains everything,
        so each export sends what changed since the last, not every row the memory holds."""
        if self.residuals is None:
            return np.zeros(0, dtype=np.uint64), np.zeros((0, 0))
        with self._lock:
            r = self.residuals
            out = r.take_pushed_since(self._drained_at)
            self._drained_at = r.tick
            self.flushed_rows += int(out[0].shape[0])
            return out

    def keep(self, keys: Keys, rows: F64) -> None:
        """Puts residuals back after a drain that sent them in a lossy codec (an export's):
        what that codec lost is owed to the shards still. keys sorted, unique, and among
        those the drain took, so nothing is evicted."""
        if self.residuals is None or not keys.shape[0]:
            return
        nonzero = np.any(rows != 0.0, axis=1)
        with self._lock:
            gone, _ = self.residuals.put(keys[nonzero], rows[nonzero], touch=False)
        assert not gone.shape[0], "a drain's keys fit the store they came from"

    def compress(self, keys: Keys, rows: F64) -> tuple[Compressed, Keys, F64]:
        """(the push's rows compressed, keys and residuals evicted from the residual store,
        which the caller sends exactly). keys are sorted and unique."""
        x = np.ascontiguousarray(rows, dtype=np.float64).reshape(keys.shape[0], -1)
        with self._lock:
            return self._compress(keys, x)

    def _compress(self, keys: Keys, x: F64) -> tuple[Compressed, Keys, F64]:
        n, d = x.shape
        slots = None
        if self.residuals is not None:
            owed, slots = self.residuals.take_slots(keys, d)
            x = x + owed
        sent = None
        chosen = x
        if self.spec.topk is not None and n:
            k = max(1, int(np.ceil(self.spec.topk * n)))
            if k < n:
                scores = row_scores(x)
                sent = rows_at_least(scores, mstopk_threshold(scores, k, MSTOPK_ROUNDS))
                chosen = x[sent]
        if self.held is not None:
            chosen = chosen.copy() if chosen is x else chosen
            chosen[:, self.held] = 0.0  # decoded as exact zeros: the residual keeps them whole
        body, decoded = self.codec.encode(chosen, self.rng)
        packed = Compressed(self.codec, n, d, sent, body, decoded)
        gone_keys, gone_rows = np.zeros(0, dtype=np.uint64), np.zeros((0, d))
        if self.residuals is not None:
            if sent is None:
                residual = x - decoded
            else:
                residual = x.copy()
                residual[sent] -= decoded
            over = self._over_bound(residual, decoded)
            if over.shape[0]:  # these leave the memory now, before put() could evict their old rows
                kept = np.ones(n, dtype=bool)
                kept[over] = False
                # take_slots' slots still hold: dropping rows frees only their own slots (a
                # second lookup of a large push's keys cost two-rank LR pushes a tenth)
                assert slots is not None
                self.residuals.drop_slots(slots[over])
                gone_keys, gone_rows = self.residuals.put(keys[kept], residual[kept], slots=slots[kept])
                self.bound_rows += int(over.shape[0])
                # the rows the push carries go exactly in it (one call, no keys: their
                # positions); a row top-k left out goes after it, exactly, with its key
                in_push = np.ones(over.shape[0], dtype=bool) if sent is None else np.isin(over, sent)
                carried, left = over[in_push], over[~in_push]
                if carried.shape[0]:
                    packed = packed.with_exact(carried if sent is None else np.searchsorted(sent, carried), x[carried])
                    self.flushed_rows += int(carried.shape[0])
                if left.shape[0]:
                    gone_keys = np.concatenate([gone_keys, keys[left]])
                    gone_rows = np.concatenate([gone_rows, residual[left]])
            else:
                gone_keys, gone_rows = self.residuals.put(keys, residual, slots=slots)
            self.flushed_rows += int(gone_keys.shape[0])
        return packed, gone_keys, gone_rows

    def _over_bound(self, residual: F64, decoded: F64) -> npt.NDArray[np.int64]:
        """The rows (indices) whose residual passes the bound in any column."""
        if self.residual_bound is None or not decoded.shape[0]:
            return np.zeros(0, dtype=np.int64)
        skip = np.zeros(decoded.shape[1], dtype=np.bool_)
        if self.held is not None:  # a held column's residual is all of it, by design, until a drain
            skip[self.held] = True
        return rows_past_bound(residual, np.ascontiguousarray(decoded), self.residual_bound, skip)  # type: ignore[no-any-return]

    def stats(self) -> dict[str, float]:
        r = self.residuals
        return {
            "residual_rows": float(len(r)) if r is not None else 0.0,  # a count: another thread may be pushing
            "residual_rows_peak": float(r.peak_rows) if r else 0.0,
            "residual_bytes": float(r.nbytes) if r else 0.0,
            "residual_rows_cap": float(r.capacity) if r else 0.0,
            "residual_flushed_rows": float(self.flushed_rows),
            "residual_bound_rows": float(self.bound_rows),
        }
