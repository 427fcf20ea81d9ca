"""`--push-codec auto` for one state-delta table on shard processes (docs/design/auto-codec.md).

The table pushes bf16z, rounded (docs/design/rounded-pushes.md: each delta in bf16, no
error feedback, so nothing is owed to cuts or exports), until a window between two
judgements says that 1-bit pushes with error feedback would carry at most AUTO_ENTER of
what bf16z carried, then 1-bit until a window measures more than AUTO_LEAVE of what bf16z
would have. What 1-bit costs is mostly its drains: at a cut, every row pushed since the
last one goes in the cut's drain codec (fp64, or bf16 on shard processes by default:
docs/design/cut-drains.md; key included); at an export, every row pushed since the last
export in bf16. So under bf16z the window counts the bytes its pushes carried, the rows
pushed and, on a sample of the keys, how many distinct rows each cut and each export would
drain; under 1-bit it counts the bytes actually sent, and prices bf16z at the bytes a value
its last window measured. Byte counts are value bytes (plus a drain's keys): a push's keys
or row ids cost the same in either codec.

Starting in bf16z means a stream that never pays (a long tail of rows pushed once between
cuts) never pays a 1-bit window's drains to find out; those drains stall training while a
cut waits for them (1.5-4.5 s a cut on the demo's FFM)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numba as nb
import numpy as np
import numpy.typing as npt

AUTO_CODEC = "onebit"
# the other windows' codec: bf16 in zstd'd byte planes, each push rounded (rounded-pushes.md)
BASE_CODEC = "bf16z"
# ... with a state delta's accumulator columns (FTRL's n, Adagrad's sums of squares) at this
# many mantissa bits: they only scale steps (rounded-pushes.md, "Accumulators at 4 mantissa bits")
BASE_ACCUMULATOR_BITS = 4
BASE_VALUE_BYTES = 2.0  # what bf16z is priced at a value before a window has measured it
# the exact codec of every drain (the end's, a switch's, the memory's evictions): float64 in
# zstd'd byte planes, lossless. The stall limits count fp64's value bytes (as they were tuned)
EXACT_CODEC = "fp64z"
AUTO_ENTER = 0.6  # 1-bit starts when a window's estimate is at most this share of bf16z's bytes
# ... and stops when a window measures more than this share: 0.8 until bf16z's accumulators went
# to 4 mantissa bits (bf16z about 12% cheaper on state deltas); 0.9 keeps the bytes 1-bit must
# save to stay about where they were (rounded-pushes.md, "Accumulators at 4 mantissa bits")
AUTO_LEAVE = 0.9
AUTO_MIN_ROWS = 10_000  # rows pushed before a window is judged (fewer: it runs on to the next judgement)
# a cut's exact drain stalls training while the cut waits (pushes overlap it): 1-bit starts
# only if the window's cut drain is at most this share of fp64's bytes, and stops over the second
AUTO_STALL_ENTER = 0.2
AUTO_STALL_LEAVE = 0.3
# a window judged at a cut holds an export's drain (or this many cuts where exports are rarer):
# 1-bit pays an export drain per export, so windows that hold one and windows that do not
# differ by that drain, and one judged on each kind switched back and forth (DeepFM on
# Criteo 10k, exports every ~16 s: 16 switches in 3 minutes)
AUTO_WINDOW_CUTS = 4
SAMPLE_BITS = 4  # distinct rows are counted on 1 key in 2**SAMPLE_BITS
KEY_BYTES = 8
CODEC_VALUE_BYTES = {"fp64z": 8, "bf16z": 2, "e8m4z": 2}  # a drain's value bytes before the planes' zstd
DRAIN_VALUE_BYTES = {"end": 8, "export": 2}  # fp64 at the end, bf16 at exports; a cut's: AutoChoice.cut_value_bytes
_MIX = np.uint64(0x9E3779B97F4A7C15)  # keys may be raw ids: mixed before the sample is taken
COMPACT_KEYS = 1 << 16  # sampled keys held, repeats included, before they are made distinct
U64 = npt.NDArray[np.uint64]


@nb.njit(cache=True, nogil=True)
def sampled(keys: U64) -> U64:
    """The keys in the distinct-row sample (1 in 2**SAMPLE_BITS, the same keys every time),
    in one pass: the four numpy calls it took cost a DeepFM-sized push about 20 us."""
    out = np.empty(keys.shape[0], dtype=np.uint64)
    m = 0
    for k in keys:
        if (k * _MIX) >> np.uint64(64 - SAMPLE_BITS) == 0:
            out[m] = k
            m += 1
    return out[:m].copy()  # a sample is kept for a window: not the whole push's buffer behind it


def sampled_reference(keys: U64) -> U64:
    with np.errstate(over="ignore"):
        return keys[((keys * _MIX) >> np.uint64(64 - SAMPLE_BITS)) == 0]


class KeySample:
    """Sampled keys pushed since some point, their distinct count taken when asked (at a
    drain or a judgement): arrays kept as pushed, not a Python set of every key (which
    cost a DeepFM batch's pushes about 0.1 ms of CPU)."""

    def __init__(self) -> None:
        self._parts: list[U64] = []
        self._held = 0  # keys in _parts, repeats included
        self._distinct = 0  # distinct keys after the last compaction

    def add(self, keys: U64) -> None:
        if keys.shape[0]:
            self._parts.append(keys)
            self._held += keys.shape[0]
            if self._held > max(COMPACT_KEYS, 2 * self._distinct):  # memory bounded by the distinct keys
                self._compact()

    def __len__(self) -> int:
        self._compact()
        return self._held

    def clear(self) -> None:
        self._parts.clear()
        self._held = self._distinct = 0

    def _compact(self) -> None:
        if len(self._parts) > 1 or (self._parts and self._held != self._distinct):
            whole = np.unique(np.concatenate(self._parts))
            self._parts = [whole]
            self._held = self._distinct = whole.shape[0]


@dataclass
class AutoChoice:
    compress: bool = False
    cut_value_bytes: int = 8  # a value of a cut's drain: fp64 (8), or bf16 (2)
    held_cols: int = 0  # columns 1-bit holds for the drains (a state delta's accumulators): its pushes carry none
    export_held_cols: int = 0  # ... and its export drains, where the weights do not read them (not FTRL's)
    cols: int = 0
    rows: int = 0  # rows pushed in the window
    plain: int = 0  # value bytes fp64 pushes of those rows would carry (the stall's measure)
    base: float = 0.0  # under bf16z: value bytes its pushes carried; under 1-bit: the estimate of that
    base_per_value: float = BASE_VALUE_BYTES  # bf16z's bytes a value, as its last window measured
    sent: int = 0  # under 1-bit: value bytes its pushes and drains carried; under bf16z: the estimate of that
    cut_sent: int = 0  # of `sent`, the cut's drain
    cut_rows: int = 0  # the rows of that drain (a stall grows with rows, whatever codec carries them)
    ratio: float = 0.0  # base / sent (measured or estimated) at the last judgement (0: none yet)
    stall: float = 0.0  # the cut drain's share of fp64's bytes, sent exactly, at the last judgement
    switches: int = 0
    # how far the estimate that sent the table to 1-bit was off: its ratio over the ratio the
    # first whole 1-bit window after it measured (at least 1); it scales every later
    # estimate (two ranks' tables flapped on an estimate 1-bit never met: auto-codec.md)
    miss: float = 1.0
    _entered: float = 0.0  # the estimated ratio that sent the table to 1-bit, until a 1-bit window is measured
    _exported: bool = False  # the window holds an export's drain
    _cuts: int = 0  # ... and this many cuts' drains
    _partial: bool = False  # 1-bit since an export: the coming cut's window is part of an interval
    _since_cut: KeySample = field(default_factory=KeySample)  # sampled keys pushed since the last cut
    _since_export: KeySample = field(default_factory=KeySample)  # ... since the last export

    def pushed(self, keys: npt.NDArray[np.uint64], cols: int, body_bytes: int, evicted: int) -> None:
        """A push of these keys' rows: `body_bytes` of values, `evicted` residual rows sent
        exactly because the error-feedback memory was full (1-bit only)."""
        self.cols = cols
        self.rows += keys.shape[0]
        self.plain += 8 * keys.shape[0] * cols
        if self.compress:
            self.sent += body_bytes + evicted * (8 * cols + KEY_BYTES)
            self.base += self.base_per_value * keys.shape[0] * cols
        else:  # what 1-bit would have sent: a sign a value it pushes (its means are a few bytes a message)
            self.base += body_bytes
            self.sent += -(-keys.shape[0] * (cols - self.held_cols) // 8)
            some = sampled(keys)
            self._since_cut.add(some)
            self._since_export.add(some)

    def drained(self, cause: str, rows: int) -> None:
        """A drain: under 1-bit the rows it sent; under bf16z what 1-bit's would have sent."""
        if not self.compress:
            rows = len(self._since_export if cause == "export" else self._since_cut) << SAMPLE_BITS
        value_bytes = self.cut_value_bytes if cause == "cut" else DRAIN_VALUE_BYTES[cause]
        cols = self.cols - (self.export_held_cols if cause == "export" else 0)
        drain = rows * (value_bytes * cols + KEY_BYTES)
        self.sent += drain
        self._exported |= cause == "export"
        if cause == "cut":
            self._cuts += 1
            self.cut_sent += drain
            self.cut_rows += rows
        if self.compress:
            return
        self._since_export.clear()
        if cause != "export":
            self._since_cut.clear()

    def judge(self, at_cut: bool) -> bool:
        """At a judgement: whether the table switches codec now. 1-bit is judged at cuts,
        after the cut's drain; bf16z at exports too, as if a cut came now (its drain: the
        distinct rows pushed since the last cut), so that a stream starts 1-bit within
        seconds, not only after its first cut. A bf16z window judged at an export runs on
        to the next cut unless it switches: a cut's drain is charged once over a window that
        grows, so where exports come far more often than cuts the estimate nears what a
        whole cut interval costs instead of charging a cut's drain to each export."""
        if (self.compress and not at_cut) or self.rows < AUTO_MIN_ROWS:
            return False
        if self._partial:  # its drain holds a part-interval's rows, its pushes fewer: judged a cut later
            self._partial = False
            self._reset()
            return False
        if at_cut and not (self._exported or self._cuts >= AUTO_WINDOW_CUTS):
            return False  # runs on until it holds an export's drain, as 1-bit's windows will
        # at an export, the drain a cut now would send; at a cut, drained() counted it
        rows_now = 0 if at_cut else len(self._since_cut) << SAMPLE_BITS
        sent = self.sent + rows_now * (self.cut_value_bytes * self.cols + KEY_BYTES)
        unscaled = self.base / max(1, sent)  # measured under 1-bit, estimated under bf16z
        if self.compress and self._entered:  # the first whole 1-bit window: what the estimate missed
            self.miss = max(1.0, self._entered / max(1e-9, unscaled))
            self._entered = 0.0
        if not self.compress:  # as far off as 1-bit last measured
            sent = round(sent * self.miss)
        self.ratio = self.base / max(1, sent)
        # the stall: the shard takes each drained row whatever codec carries it, so the
        # limits keep the meaning they were tuned with, exact fp64 rows (cut-drains.md)
        exact_drain = (self.cut_rows + rows_now) * (CODEC_VALUE_BYTES[EXACT_CODEC] * self.cols + KEY_BYTES)
        share, stall = sent / max(1.0, self.base), exact_drain / max(1, self.plain)
        if not self.compress and self.plain:  # what bf16z measured, for pricing it under 1-bit
            self.base_per_value = 8 * self.base / self.plain
        if self.compress:
            switch = share > AUTO_LEAVE or stall > AUTO_STALL_LEAVE
        else:
            switch = share <= AUTO_ENTER and stall <= AUTO_STALL_ENTER
        self.stall = stall
        if not (at_cut or switch):
            return False
        self._reset()
        if switch:
            self.compress = not self.compress
            self.switches += 1
            self._entered = unscaled if self.compress else 0.0
            self._partial = self.compress and not at_cut
        return switch

    def forget_window(self) -> None:
        """The window so far trained a past that a restore dropped: the next starts afresh."""
        self._partial = False
        self._reset()

    def _reset(self) -> None:
        self.rows = self.plain = self.sent = self.cut_sent = self.cut_rows = self._cuts = 0
        self.base = 0.0
        self._exported = False
        self._since_cut.clear()
        self._since_export.clear()

    def describe(self) -> str:
        if not self.ratio:
            return f"{AUTO_CODEC if self.compress else BASE_CODEC}: not judged yet"
        drain = f"its cut drain {self.stall:.2f} of fp64's bytes"
        if self.compress:
            return f"{AUTO_CODEC}: {self.ratio:.1f}x fewer value bytes than {BASE_CODEC} over the last window, {drain}"
        missed = f", the estimate x{self.miss:.2f} as {AUTO_CODEC} last measured" if self.miss > 1.0 else ""
        return (
            f"{BASE_CODEC}: {AUTO_CODEC} would have carried {self.ratio:.1f}x fewer value bytes over the last window"
            f" (it must {1 / AUTO_ENTER:.1f}x){missed}, {drain} (at most {AUTO_STALL_ENTER:g})"
        )
