"""The compression stage of the push path (ps.client.push_path): one compressor per table
(ps.compression.compressor) with its error feedback, and the drains that send what the
feedback still holds back. Dense pushes are encoded here too (fp32/fp64, or 1-bit with the
quantization error kept for the next push)."""

from __future__ import annotations

import logging
import zlib

import numpy as np
import numpy.typing as npt

from ctr.model.optim import accumulator_columns, weights_read_accumulators
from ctr.model.spec import TableSpec
from ctr.routing import dense_range
from ps.api import DELTA, STATE, STATE_DIFF, DensePush
from ps.client.auto_codec import AUTO_CODEC, BASE_ACCUMULATOR_BITS, BASE_CODEC, CODEC_VALUE_BYTES, EXACT_CODEC, AutoChoice
from ps.client.push_path import PushBatch, ShardSender
from ps.compression.compressor import CodecSpec, Compressor
from ps.compression.payload import VALUE_CODECS, Compressed
from ps.compression.state_diff import as_fp32_bits, base_digest, encode_state_diff
from ps.transport import WireLedger

Keys = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]
U32 = npt.NDArray[np.uint32]

# residuals sent before an export: bf16 (fp32's range, a quarter of fp64's bytes) in zstd'd byte planes
EXPORT_DRAIN_CODEC = "bf16z"
# what a cut's drain may travel in: exactly, or in bf16 (e8m4z: 4 of its mantissa bits) with the
# rounding forgotten on the worker as well, so the cut still holds what training goes on from
# (docs/design/cut-drains.md)
CUT_DRAIN_CODECS = tuple(CODEC_VALUE_BYTES)  # fp64z, bf16z, e8m4z
# several ranks: a residual may hold this many times its column's mean sent value before its
# row goes exactly (Compressor.residual_bound; 4 costs more bytes, 16 let Frappe FFM's second
# version lose 0.009 AUC: docs/design/residual-bound.md)
SHARED_RESIDUAL_BOUND = 8.0
log = logging.getLogger(__name__)


class PushCompression:
    """spec: every sparse table's compressor, or None for the uncompressed protocol (fp64
    state deltas, whose accumulators need every digit; fp32 gradients). residual_rows caps
    each table's error-feedback memory. shared: other ranks push and pull the same rows, so
    residuals are bounded (SHARED_RESIDUAL_BOUND): they would not see what this one holds back.
    cut_codec: what a checkpoint cut's drain travels in (CUT_DRAIN_CODECS)."""

    def __init__(
        self,
        spec: CodecSpec | None,
        residual_rows: int,
        seed: int,
        sender: ShardSender,
        wire: WireLedger,
        auto: bool = False,
        shared: bool = False,
        cut_codec: str = EXACT_CODEC,
    ) -> None:
        if cut_codec not in CUT_DRAIN_CODECS:
            raise ValueError(f"cut drain codec {cut_codec!r}: one of {', '.join(CUT_DRAIN_CODECS)}")
        self.spec = spec
        self.cut_codec = cut_codec
        self.residual_bound = SHARED_RESIDUAL_BOUND if shared else None
        self.auto = auto and spec is None  # `auto` over a network: state deltas judge AUTO_CODEC (ps.client.auto_codec)
        self.judge_at = "cut"  # the drains that end auto's windows ("export" where a run takes no cuts)
        # the end's drain went (every residual, exactly): the run's last export and cut judge
        # nothing, since a window holding that drain measures what no stretch mid-stream pays
        self.ended = False
        self.residual_rows = residual_rows
        self.seed = seed
        self.sender = sender
        self.wire = wire
        self.n = sender.n
        self._rng = np.random.default_rng(seed)  # exact drains and dense values round with it
        self.compressors: dict[str, Compressor] = {}
        self._kinds: dict[str, str] = {}  # what each table's pushes carry
        self._dense_residual: dict[str, F64] = {}  # error feedback of 1-bit dense pushes
        self._written: dict[str, tuple[F64, U32]] = {}  # each dense table's last state diffed, and its fp32 bits
        self.choices: dict[str, AutoChoice] = {}  # `auto`'s, per state-delta table
        self._made: dict[str, int] = {}  # compressors made per table (each gets its own seed)
        self._accumulators: dict[str, slice] = {}  # each known sparse table's state columns that only grow
        # ... of the tables whose weights do not read them: 1-bit's export drains leave them to the cuts
        self._export_held: dict[str, slice] = {}

    def know(self, spec: TableSpec) -> None:
        """A sparse table's layout: auto's rounded pushes keep its accumulators coarser."""
        cols = accumulator_columns(spec.optimizer.kind, spec.dim)
        if cols.stop > cols.start:
            self._accumulators[spec.name] = cols
            if not weights_read_accumulators(spec.optimizer.kind):
                self._export_held[spec.name] = cols

    def _compressor(self, table: str, kind: str) -> Compressor:
        if table not in self.compressors:
            if self.auto and kind == DELTA:
                acc = self._accumulators.get(table, slice(0, 0))
                held = acc.stop - acc.start
                left = self._export_leaves(table)
                export_held = left.stop - left.start if left is not None else 0
                self.choices[table] = AutoChoice(
                    cut_value_bytes=CODEC_VALUE_BYTES[self.cut_codec], held_cols=held, export_held_cols=export_held
                )
            self._kinds[table] = kind
            self._make(table)
        return self.compressors[table]

    def _make(self, table: str) -> None:
        choice = self.choices.get(table)
        coarse = held = None
        if choice is not None:
            spec = CodecSpec(AUTO_CODEC) if choice.compress else CodecSpec(BASE_CODEC, rounded=True)
            cols = self._accumulators.get(table)
            if spec.rounded and cols is not None:
                coarse = (cols, BASE_ACCUMULATOR_BITS)
            elif cols is not None:  # 1-bit: the accumulators wait for the drains (sign-planes.md)
                held = cols
        else:
            spec = self.spec or CodecSpec("fp64" if self._kinds[table] == DELTA else "fp32")
        # the seed comes from the table and how many it had, not from the order tables were
        # first pushed in: a batch pushes its tables at once (PSClient.concurrently)
        made = self._made.get(table, 0)
        seed = zlib.crc32(f"{self.seed}:{table}:{made}".encode())
        self.compressors[table] = Compressor(
            spec, self.residual_rows, seed=seed, residual_bound=self.residual_bound, coarse=coarse, held=held
        )
        self._made[table] = made + 1

    def push(self, batch: PushBatch) -> Keys:
        """Compresses each shard's part and sends it; returns the sorted keys whose residual
        left the error-feedback memory (sent exactly, keys included)."""
        comp = self._compressor(batch.table, batch.kind)
        choice = self.choices.get(batch.table)
        order, bounds = batch.by_shard(self.n)
        parts, gone_keys, gone_rows = [], [], []
        for s in range(self.n):  # compressed in turn (one residual store), then sent in parallel
            idx = order[bounds[s] : bounds[s + 1]]
            if idx.shape[0]:
                # a part of every key is the batch in order (split_by_shard keeps it): no copy
                whole = idx.shape[0] == batch.keys.shape[0]
                keys, rows = (batch.keys, batch.rows) if whole else (batch.keys[idx], batch.rows[idx])
                packed, keys_out, rows_out = comp.compress(keys, rows)
                if choice is not None:
                    choice.pushed(keys, rows.shape[1], packed.value_bytes, keys_out.shape[0])
                parts.append((s, keys, packed))
                gone_keys.append(keys_out)
                gone_rows.append(rows_out)
        self.sender.send(batch, parts)
        if not sum(k.shape[0] for k in gone_keys):  # the usual push: nothing left the memory
            return np.zeros(0, np.uint64)
        # a key can leave twice in one push: its old residual while one shard's part is put,
        # its new one while a later part is (a part larger than the memory); both are owed
        gone, inverse = np.unique(np.concatenate(gone_keys), return_inverse=True)
        rows = np.zeros((gone.shape[0], batch.rows.shape[1]))
        np.add.at(rows, inverse, np.concatenate(gone_rows))
        self.sender.send_coded(batch.table, gone, rows, batch.kind, EXACT_CODEC, self._rng)
        return gone

    def unsent(self, table: str, keys: Keys, cols: int) -> F64 | None:
        """What this table's compressor has not yet sent of these keys' rows, or None when it
        keeps no error feedback."""
        comp = self.compressors.get(table)
        return None if comp is None or comp.residuals is None else comp.unsent(keys, cols)

    def drain(self, cause: str) -> None:
        """Sends the tables' error-feedback residuals: at the "end" every one exactly
        (EXACT_CODEC), so the shards hold exactly what uncompressed pushes would have left;
        at a checkpoint "cut" every one in cut_codec, exactly as well or in bf16 with what
        it rounds off forgotten (this worker's view is then the shards' rows, so the cut
        holds what training goes on from); before an "export" those of the rows pushed since
        the last export, in EXPORT_DRAIN_CODEC, keeping what it rounds off (the version
        served lacks at most that rounding of each row, owed until the row's next push or
        the next cut). The cause also files the bytes in the ledger."""
        self.ended |= cause == "end"
        with self.wire.draining(cause):
            for table, comp in list(self.compressors.items()):
                keys, rows = comp.drain_pushed() if cause == "export" else comp.drain()
                if keys.shape[0]:
                    kind = self._kinds[table]
                    if cause == "export":  # freshness, not exactness: bf16, what it loses kept for later
                        sent, left = rows, self._export_leaves(table)
                        if comp.held is not None and left is not None:
                            sent = rows.copy()
                            sent[:, left] = 0.0
                        comp.keep(keys, rows - self.sender.send_coded(table, keys, sent, kind, EXPORT_DRAIN_CODEC, self._rng))
                    else:
                        codec = self.cut_codec if cause == "cut" else EXACT_CODEC
                        self.sender.send_coded(table, keys, rows, kind, codec, self._rng)
                choice = self.choices.get(table)
                if choice is not None:
                    choice.drained(cause, keys.shape[0])
                    judged = not self.ended and cause in (self.judge_at, "export")
                    if judged and choice.judge(at_cut=cause == self.judge_at):
                        self._switch(table, choice)

    def _export_leaves(self, table: str) -> slice | None:
        """The accumulator columns a 1-bit export drain of this table leaves to the cut: a
        version served reads no such accumulator (not FTRL's); None where cuts never come."""
        return self._export_held.get(table) if self.judge_at == "cut" else None

    def _switch(self, table: str, choice: AutoChoice) -> None:
        """auto's table changes codec (choice.compress says to which): what the error feedback
        still holds goes exactly first (nothing after a cut's drain; an export's bf16
        leftovers otherwise), so no update is lost."""
        keys, rows = self.compressors[table].drain()
        if keys.shape[0]:
            self.sender.send_coded(table, keys, rows, self._kinds[table], EXACT_CODEC, self._rng)
        log.info("push codec auto, table %s: %s", table, choice.describe())
        self._make(table)

    def reset(self) -> None:
        """Forgets every residual, sparse and dense, and auto's open windows (after a restore
        they belong to a dropped past); training goes on, so windows judge again."""
        for comp in self.compressors.values():
            comp.drain()
        self._dense_residual.clear()
        for choice in self.choices.values():
            choice.forget_window()
        self.ended = False

    def codecs(self) -> dict[str, str]:
        """Per sparse table pushed so far, its codec as --push-codec spells it."""
        out = {}
        if self.auto or (self.spec is not None and self.spec.feedback):
            out["cut_drain"] = self.cut_codec  # what residuals go in at cuts, once a table keeps any
        for table, comp in sorted(self.compressors.items()):
            out[f"push:{table}"] = comp.spec.name
            if table in self.choices:
                coarse = f"; its accumulators at {comp.coarse[1]} mantissa bits" if comp.coarse else ""
                coarse += "; its accumulators held for the drains" if comp.held is not None else ""
                out[f"auto:{table}"] = self.choices[table].describe() + coarse
        return out

    def stats(self) -> dict[str, float]:
        """Error-feedback memory summed over tables (Compressor.stats). Read while the push
        thread may add a table: list() copies the dict in one step."""
        out: dict[str, float] = {}
        for comp in list(self.compressors.values()):
            for k, v in comp.stats().items():
                out[k] = out.get(k, 0.0) + v
        if self.choices:
            out["auto_switches"] = float(sum(c.switches for c in list(self.choices.values())))
        return out

    def dense(
        self,
        table: str,
        values: F64,
        kind: str,
        onebit: bool,
        shards: list[int],
        steps: int = 1,
        samples: int = 0,
        base: F64 | None = None,
    ) -> list[DensePush]:
        """A whole dense vector's push [n, cols], cut into the given shards' ranges: fp32
        (gradient, momentum) values; state deltas and states in fp32 where every value is
        one exactly (a worker's torch state is), else fp64, both in zstd'd byte planes
        where pushes compress (fp32z, fp64z: lossless; raw under a KB); or with onebit
        signs and two means per shard, the quantization error kept for the next push.
        A STATE with the `base` the shards hold goes, where pushes compress and both are
        fp32, as its difference from that base (STATE_DIFF: about a fifth fewer bytes
        for an MLP's cut write than its planes alone)."""
        if kind == STATE and base is not None and (self.auto or self.spec is not None):
            diff = self._state_diff(table, values, base, shards, samples)
            if diff is not None:
                return diff
        v = values + self._dense_residual.get(table, 0.0) if onebit else values
        if onebit:
            codec = VALUE_CODECS["onebit"]
        elif kind in (DELTA, STATE):  # states must arrive exactly: fp32 only where it loses nothing
            exact = "fp32" if np.array_equal(v.astype(np.float32), v) else "fp64"
            # where pushes compress, in byte planes (a whole MLP's state, its cut write: 1.6x
            # fewer bytes for ~3 ms a MB); `none` and in-process shards send it as it is
            codec = VALUE_CODECS[exact + "z" if self.auto or self.spec is not None else exact]
        else:
            codec = VALUE_CODECS["fp32"]
        sent = np.empty_like(v)
        parts = []
        for s in shards:
            lo, hi = dense_range(v.shape[0], s, self.n)
            body, sent[lo:hi] = codec.encode(v[lo:hi], self._rng)
            payload = Compressed(codec, hi - lo, v.shape[1], None, body).payload(with_subset=False)
            parts.append(DensePush(s, table, payload, kind, steps, samples))
        if onebit:
            self._dense_residual[table] = v - sent
        return parts

    def _state_diff(self, table: str, values: F64, base: F64, shards: list[int], samples: int) -> list[DensePush] | None:
        """Each shard's range of `values` against its range of `base`, or None where the
        two differ in shape or either is not exactly fp32 (then the state goes whole).
        The ranges are encoded and their bases digested in the shards' threads: zstd and
        the digest let go of the GIL, so a cut's write takes the wall time of one range."""
        new_bits, base_bits = as_fp32_bits(values), self._base_bits(table, base)
        if new_bits is None or base_bits is None or new_bits.shape != base_bits.shape or new_bits.ndim != 2:
            return None
        self._written[table] = (values, new_bits)

        def one(i: int) -> DensePush:
            lo, hi = dense_range(values.shape[0], shards[i], self.n)
            body = encode_state_diff(new_bits[lo:hi], base_bits[lo:hi])
            return DensePush(shards[i], table, body, STATE_DIFF, 1, samples, base_digest(base_bits[lo:hi]))

        return self.sender.on_shards(one, list(range(len(shards))))

    def _base_bits(self, table: str, base: F64) -> U32 | None:
        """The base's fp32 bits: those of the state last written to `table` where the base
        is that state (a cut write's base is the write before it), else converted."""
        last = self._written.pop(table, None)
        if last is not None and last[0].shape == base.shape and np.array_equal(last[0], base):
            return last[1]
        return as_fp32_bits(base)

    def dense_residual(self, table: str) -> F64 | None:
        """The quantization error 1-bit dense pushes of `table` still owe the shards."""
        r = self._dense_residual.get(table)
        return None if r is None else r.copy()

    def set_dense_residual(self, table: str, residual: npt.NDArray[np.floating] | None) -> None:
        """Takes up a residual a checkpoint cut recorded (None: none owed)."""
        if residual is None:
            self._dense_residual.pop(table, None)
        else:
            r = np.array(residual, dtype=np.float64)
            self._dense_residual[table] = r.reshape(r.shape[0], -1)  # as dense() keeps it: [n, 1]
