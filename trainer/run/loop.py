"""The training loop: parse, hash, train the model through the PS (progressive metrics
first), export and checkpoint on their intervals."""

from __future__ import annotations

import logging
import sys
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctr.data.batch import SampleBatch
from ctr.data.fields import FieldIndex
from ctr.data.schema import FeatureSchema
from ctr.repository import holdout
from ps.api import ShardRestarted
from ps.client import PSClient
from trainer import metrics
from trainer.input.bad_input import BadInput, message, too_bad
from trainer.input.batch_cache import BatchCache
from trainer.input.reader import BatchReader, ThreadedReader
from trainer.input.source import Position, Source
from trainer.run.exporter import Exporter, ExportFailed
from trainer.run.progress_log import ProgressLog
from trainer.run.recovery import CutPoint, encode_offsets, encode_workers, load_progress, worker_state
from trainer.step.factorization import TrainableModel
from trainer.step.pipeline import Pipeline, Result
from trainer.step.progressive import ProgressiveMetrics

if TYPE_CHECKING:
    from trainer.run.group import Group, Round

log = logging.getLogger("trainer")


@dataclass
class LoopSettings:
    batch_size: int
    max_samples: int | None  # the samples this rank stops at, those a cut carried included (None: no limit)
    idle_exit_s: float
    export_interval_s: float
    checkpoint_interval_s: float
    max_line_bytes: int = 1 << 20
    queue_depth: int = 8  # parsed batches waiting for the trainer
    batch_cache: str | None = None  # folder of the parsed-batch cache
    batch_cache_max_bytes: int = 20 << 30
    progress_interval_s: float = 5.0  # the log line, the gauges and the curve
    # a finite stream's tail held back from training for the last export's holdout: the
    # trainer trains each batch only once this many samples have been read after it
    hold_back: int = 0
    max_bad_fraction: float = 0.1  # more bad lines than this share of the lines read stops the run (BadInput)
    export_drain: bool = True  # residuals sent (in bf16) before each export (docs/design/wire-bytes.md)
    # a format told from the stream once it flows (nothing to peek at when the run began):
    # --label's column, and --format csv/tsv's delimiters, as the peek would have told it
    label: str | None = None
    delimiters: tuple[str, ...] | None = None


HOLDOUT_FROM_RANKS_AFTER_S = 2.0  # rank 0's source idle this long: the other ranks fill its export's holdout


class Trainer:
    def __init__(
        self,
        client: PSClient,
        model: TrainableModel,
        schema: FeatureSchema | None,
        fields: FieldIndex,
        source: Source,
        settings: LoopSettings,
        progress: ProgressiveMetrics,
        exporter: Exporter | None,
        stop: Callable[[], bool],
    ) -> None:
        self.client = client
        self._bytes_seen = (0, 0)
        self._wire_seen: dict[tuple[str, str], tuple[int, int]] = {}
        self.model = model

        self.fields = fields
        self.source = source
        self.s = settings
        self.progress = progress
        self.exporter = exporter
        self.observe: Callable[[SampleBatch], None] | None = exporter.observe if exporter is not None else None
        self.stop = stop
        self.schema = schema
        self.cache = None
        if settings.batch_cache and schema is not None:
            self.cache = BatchCache(
                Path(settings.batch_cache), schema, settings.batch_size, settings.max_line_bytes, settings.batch_cache_max_bytes
            )
        self.submitted = 0  # samples handed to the pipeline (progress lags it by a batch)
        self.reader = self._reader()
        self.position = Position()
        self.cut = 0  # the last checkpoint cut prepared
        self._reopen: Callable[[Position | None, float], Source] | None = None
        self._recover: Callable[[], CutPoint] | None = None
        self._committer = ThreadPoolExecutor(1, thread_name_prefix="commit")
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="dense-write")  # a cut's dense write beside its drains
        self._commit: Future[None] | None = None
        self.recoveries = 0
        self.bad_lines_before = 0  # of readers replaced by a recovery
        self.lost_before: set[str] = set()  # files the sources a recovery replaced did not train
        self.lost_messages_before: dict[str, int] = {}  # a topic's offset ranges, the same way
        self.resets_before: set[str] = set()
        self.exports: list[str] = []
        self.elapsed_s = 0.0
        self.pipeline = Pipeline(client, model)
        # samples this process trained (again after a recovery): its speed and bytes per sample are
        # over these, not over `submitted`, which a cut taken up starts at the samples it carried
        self.trained = 0
        self.idle_s = 0.0  # seconds the stream had nothing to read: a followed source waiting for data
        self.run_from = 0  # samples the stream had when this run began (a cut taken up carries them)
        self.progress_log: ProgressLog | None = None  # None on ranks other than 0: rank 0 records the merged progress
        self._tail: deque[tuple[Position, SampleBatch]] = deque()  # read, not trained yet (settings.hold_back)
        self._tail_samples = 0
        self.held_out: list[SampleBatch] = []  # the stream's tail, never trained: the last export's holdout
        self.ended = False  # the stream ended, or stayed idle for idle_exit_s (not a stop or a sample limit)
        self._exported_at = 0  # the stream's samples at the last export (a group's: every rank's)
        self._last_export_at = time.monotonic()
        self._taken_up_at = 0
        self._last_progress = (time.monotonic(), 0)  # when, and samples trained, at the last progress line
        # the ranks of a run of several (trainer.run.group): every batch boundary is a round
        self.group: Group | None = None
        self._group_samples = 0  # every rank's samples together, as of the last round
        self._round_from = 0  # this rank's `submitted` at its last round
        self._since_round: list[SampleBatch] = []  # ranks other than 0: trained since the last round
        self._last_cut_at = time.monotonic()
        self._last_report_at = time.monotonic()
        self.cpu_start = time.process_time()  # the process's CPU when its run began (train_run sets it)
        self.merged: dict[str, Any] = {}  # rank 0 of a group: the ranks' merged figures at the end
        self.replicas_differ = 0  # rank 0 of a group: progress reports that found the ranks' MLPs differ

    def train_batch(self, batch: SampleBatch) -> None:
        if self.observe is not None:
            self.observe(batch)  # before training: holdouts hold what exports have not seen
        elif self.group is not None:
            self._since_round.append(batch)  # rank 0's export may want it for its holdout
        self.submitted += len(batch)
        self.trained += len(batch)
        self._record(self.pipeline.submit(batch))

    def _record(self, done: Result | None) -> None:
        if done is not None:
            batch, probs = done
            self.progress.update(batch.labels, probs)
            metrics.SAMPLES.inc(len(batch))

    def _reader(self) -> BatchReader:
        s = self.s
        reader = BatchReader(
            self.source, self.schema, self.fields, s.batch_size, s.max_line_bytes, self.cache, s.label, s.delimiters
        )
        reader.sample_limit = self._samples_left()
        return reader

    def _samples_left(self) -> int | None:
        """What --max-samples leaves to read from the stream's position (None: no limit; a
        cut taken up carries the samples trained before it)."""
        return max(0, self.s.max_samples - self.submitted) if self.s.max_samples is not None else None

    def take_up(
        self, point: CutPoint, reopen: Callable[[Position | None, float], Source], recover: Callable[[], CutPoint]
    ) -> None:
        """Starts at a checkpoint cut the shards were restored to (`point`; the source is
        open there already); when a shard restarts, `recover` takes them all back to a
        common cut (and declares the tables again) and `reopen` opens the stream at its
        position."""
        self._reopen, self._recover = reopen, recover
        self.start_at(point)

    def start_at(self, point: CutPoint) -> None:
        """Takes up at a cut's position, samples, metrics and the model's worker state."""
        self.model.take_up(self.client, point.model)
        self.cut = point.cut
        self.position = point.position or Position()
        self.submitted = point.samples
        self.reader.sample_limit = self._samples_left()
        self._taken_up_at = point.samples  # samples a cut carried: a fifth of this run's stream is held back at most
        self._tail.clear()  # read after the cut: the stream is read again from its position
        self._tail_samples = 0
        load_progress(self.progress, point.progress)

    @property
    def lost_files(self) -> int:
        """Files of this rank's stream not trained (removed before they were read, or landed
        late), each once however often a recovery opened the stream again."""
        return len(self.lost_before | set(self.source.lost))

    @property
    def lost_messages(self) -> int:
        """A topic's messages retention removed before this rank read them, each range once."""
        return sum((self.lost_messages_before | self.source.lost_messages).values())

    @property
    def partitions_reset(self) -> int:
        """A topic's partitions read again from their oldest message (the topic created again)."""
        return len(self.resets_before | set(self.source.resets))

    @property
    def bad_lines(self) -> int:
        return self.bad_lines_before + self.reader.bad_lines

    def flush(self) -> None:
        """Trains what the pipeline holds and waits for its pushes (before exports, checkpoints)."""
        self._record(self.pipeline.flush())

    def run(self) -> dict[str, float]:
        started = time.monotonic()
        self.run_from = self.submitted
        # a model taken up from a cut is not exported as it stands: the run before trained past
        # the cut, so as a new version it would take serving back to an older state, or its
        # run ended there, exporting it; this run's first export is a full one. Past the cut,
        # the stream is replayed up to where that run's last export stood: a version from the
        # replay would be older than the one served, judged against one that trained on its
        # holdout, so exports wait until the stream passes that point (a group's: every rank's
        # samples, which exports record as theirs)
        if self.group is not None:
            self._group_samples = self.group.total(self.submitted)
            self._round_from = self.submitted
        self._exported_at = self.stream_samples
        if self.exporter is not None and self.stream_samples:
            reached = self.exporter.last_exported_samples()
            if reached > self.stream_samples:
                log.info(
                    "taken up at %d samples, behind the last export (%d): exports resume once the stream passes it",
                    self.stream_samples,
                    reached,
                )
                self._exported_at = reached
        while True:
            try:
                self._stream()
                if self.group is not None:
                    self._join()
                self._end_on_shards(started)
                break
            except ShardRestarted as e:
                if self._recover is None or self._reopen is None:
                    raise
                self._recover_from(e)
        self.pipeline.close()
        if self.exporter is not None:
            self.exporter.close()
        self._committer.shutdown()
        self._writer.shutdown()
        final = self.progress.snapshot()
        if self.group is not None:
            final = self._merge_ranks(final)
        if self.progress_log is not None:
            trained = self.merged.get("trained", self.trained)
            self.progress_log.record(final, self.client.push_bytes, self.client.pull_bytes, trained)
        return final

    def _end_on_shards(self, started: float) -> None:
        """The stream is over: what the shards must still take (the last pushes, what the
        model holds back, every residual), the last export and the last cut. Inside run()'s
        recovery: a shard that stops answering here takes every shard back to the last cut
        and the tail is trained again, as mid-stream, instead of ending the run with an error."""
        self.flush()
        # --local-aggregate: every rank of the host leaves its rounds here (they left the group's together)
        self.client.leave_local_aggregation()
        self.model.finish(self.client)
        self.client.flush_residuals()  # the shards end with every update, exactly
        self._count_bytes()
        self.elapsed_s = time.monotonic() - started
        # a group's last export waits for every rank's last pushes and residuals (the gather)
        merged = self._group_metrics() if self.group is not None else None
        if self.exporter is not None:
            for batch in self.held_out:  # exports still waiting get unseen samples first
                self.exporter.observe(batch)
            if self.stream_samples > self._exported_at:  # else the last export already holds this model
                self._export(merged)
                for batch in self.held_out:
                    self.exporter.observe(batch)
        if self.s.checkpoint_interval_s > 0:
            self.checkpoint()
        self._wait_commit()

    def _stream(self) -> None:
        """Trains the stream until it ends (or the sample limit, idleness, a stop)."""
        last_ckpt = last_log = time.monotonic()
        busy_until = time.monotonic()  # when this loop last finished training an item: the idle clock
        tty = sys.stderr.isatty()
        ready = ThreadedReader(self.reader, self.s.queue_depth, self.stop)
        waited_from = time.monotonic()
        try:
            for item in ready:
                now = time.monotonic()
                if item is None or not len(item.batch):  # the wait gave no sample: the stream had no data
                    self.idle_s += now - waited_from
                if item is not None:
                    self._admit(item.batch, self.source.position_after(item.position))
                    busy_until = time.monotonic()
                else:  # the stream is idle: let what is queued land
                    self.flush()
                done = self.s.max_samples is not None and self.s.max_samples <= self.submitted
                # idle: the source has had nothing for idle_exit_s, and this loop has waited that
                # long since it last trained (one busy for long, compiling its kernels on a cold
                # cache, is not idle)
                quiet = now - max(self.source.idle_since, busy_until)
                idle = item is None and self.s.idle_exit_s > 0 and quiet > self.s.idle_exit_s
                if self.group is None and self._export_due(now):
                    self._export()
                if self.group is None and self.s.checkpoint_interval_s > 0 and now - last_ckpt >= self.s.checkpoint_interval_s:
                    self.checkpoint()
                    last_ckpt = now
                if self.group is None and (now - last_log >= self.s.progress_interval_s or (tty and now - last_log >= 1)):
                    self._log_progress()
                    last_log = now
                self._check_bad_lines(final=False)
                finished = done or idle
                if self.group is not None:
                    # rank 0 calls an export in the round, so every rank can drain for it first
                    r = self._round(over=False, export=self._export_due(now))
                    if r.stop or finished:
                        self.ended = idle and not r.stop
                        break
                elif finished or self.stop():
                    self.ended = idle  # idleness ends the stream as its end does: the tail is the holdout
                    break
                waited_from = time.monotonic()
            else:
                self.ended = True
        finally:
            ready.close()
        self._hold_out_tail()
        self.flush()

    @property
    def stream_samples(self) -> int:
        """The stream's samples taken into training: a group's, every rank's (as of the last
        round); what exports record and are compared by."""
        return self._group_samples if self.group is not None else self.submitted

    def _export_due(self, now: float) -> bool:
        """An export is due on its clock, the model changed since the last (an unchanged
        model's export says nothing new), and the last has its holdout."""
        due = now - self._last_export_at >= self.s.export_interval_s
        exporter = self.exporter
        return exporter is not None and due and self.stream_samples > self._exported_at and not exporter.waiting

    def _round(self, over: bool, export: bool = False) -> Round:
        """A round of the ranks at this batch boundary (trainer.run.group): rank 0 calls the
        cuts, the exports and the progress reports on its clocks; every rank then sends
        samples for the last export's holdout, takes the cut, or drains its residuals for
        the export."""
        assert self.group is not None
        now = time.monotonic()
        cut = self.s.checkpoint_interval_s > 0 and now - self._last_cut_at >= self.s.checkpoint_interval_s
        report = now - self._last_report_at >= self.s.progress_interval_s
        replica = getattr(self.model, "replica", None)
        since, self._round_from = self.submitted - self._round_from, self.submitted
        # rank 0's own samples fill its export's holdout, crossing no wire; only while its
        # source has had no data for a while do the other ranks send theirs (a reader that
        # lags a batch is not idle; a share that is over and held its tail back ends the
        # run's exports with that tail, as one process does)
        quiet = now - self.source.idle_since >= HOLDOUT_FROM_RANKS_AFTER_S
        idle = since == 0 and quiet and (not over or not self.held_out)
        needed = self.exporter.needed if self.exporter is not None and idle else 0
        r = self.group.round(over, self.stop(), cut, report, replica, export, since, needed)
        self._group_samples += r.samples
        read, self._since_round = self._since_round, []
        if r.holdout:
            self._send_holdout(read, r.holdout)
        if r.export:
            self._drain_for_export()
        if r.cut:
            self.checkpoint()
            self._last_cut_at = time.monotonic()
        if r.report:
            self._report_ranks()
            self._last_report_at = time.monotonic()
        return r

    def _send_holdout(self, read: list[SampleBatch], needed: int) -> None:
        """Rank 0's last export waits for its holdout and rank 0's stream is idle: every
        other rank sends up to `needed` of the samples it trained since the last round, read
        after that export, so exports go on while rank 0's share has no data."""
        assert self.group is not None
        mine: list[SampleBatch] = []
        for batch in read:
            if needed <= 0:
                break
            mine.append(holdout.head(batch, min(needed, len(batch))))
            needed -= len(mine[-1])
        sent = self.group.gather(mine if self.exporter is None else [])  # rank 0 observed its own
        if sent is not None and self.exporter is not None:
            for batches in sent[1:]:
                for batch in batches:
                    self.exporter.observe(batch)

    def _group_metrics(self) -> dict[str, float] | None:
        """The ranks' merged progressive metrics, at rank 0 (None elsewhere): what a group's
        export records. A gather, so rank 0 has it only once every rank called it."""
        assert self.group is not None
        share = self.progress.window // self.group.world
        states = self.group.gather(self.progress.state(last=share, compact=True))
        return None if states is None else ProgressiveMetrics.merge(self.progress.window, states).snapshot()

    def _drain_for_export(self) -> None:
        """Every rank's pushes acknowledged and, with --export-drain, its residuals sent
        (with --local-aggregate, rank 0's, which hold the host's); then rank 0 exports the
        model with the ranks' merged metrics."""
        assert self.group is not None
        self.flush()
        if self.s.export_drain:
            if self.client.aggregator is not None:
                self.group.barrier()  # no rank pushes through rank 0 while it drains
            self.client.drain_residuals("export")
        merged = self._group_metrics()  # a collective: every rank's pushes and drains are acknowledged
        if self.exporter is not None:
            self._export(merged)
        # no rank pushes again until the shards wrote the export: a push of what it trains
        # next would land in it, and those samples may fill the export's holdout
        self.group.barrier()

    def _join(self) -> None:
        """This rank's stream is over (its end, idleness, its sample limit, a stop): it joins
        the rounds with nothing until every rank's is, and all leave at that same round. Its
        first round sends the MLP gradient of what it trained since the last (the tail).
        Rank 0 goes on calling exports of what the others train."""
        assert self.group is not None
        while True:
            if self._round(over=True, export=self._export_due(time.monotonic())).over == self.group.world:
                return

    def _rank_figures(self, final: bool = False) -> dict[str, Any]:
        share = self.progress.window // (self.group.world if self.group is not None else 1)
        return {
            # what the merge keeps of each rank; in full only for the summary at the end
            "progress": self.progress.state(last=share, compact=not final),
            "submitted": self.submitted,
            "trained": self.trained,
            "run_from": self.run_from,
            "push_bytes": self.client.push_bytes,
            "pull_bytes": self.client.pull_bytes,
            "bad_lines": self.bad_lines,
            "lost_files": self.lost_files,
            "lost_messages": self.lost_messages,
            "partitions_reset": self.partitions_reset,
            "dropped": self.fields.dropped,
            "compression": self.client.compression_stats(),
            "wire": self.client.wire.snapshot(),
            "mlp": self._mlp_fingerprint(),
            "cpu_s": time.process_time() - self.cpu_start,  # this rank's process, every thread
        }

    def _mlp_fingerprint(self) -> tuple[str, int] | None:
        """(device, digest) of this rank's MLP replica, None without one."""
        replica = getattr(self.model, "replica", None)
        return None if replica is None else (str(self.model.device), replica.digest())

    def _check_replicas(self, figures: list[dict[str, Any]], samples: float) -> None:
        """Rank 0: the ranks' MLPs must be equal after a round. A difference is logged, not
        raised (ranks whose MLPs train on different kinds of device may differ in the last
        bits); between ranks on one kind it is a defect, counted in the summary."""
        verdict = replicas_verdict([f.get("mlp") for f in figures])
        if verdict is None:
            return
        self.replicas_differ += 1
        if verdict == "devices":
            log.warning("the ranks' MLPs differ at %d samples: ranks on different devices may drift apart in rounding", samples)
        else:
            log.error("the ranks' MLPs differ at %d samples (%s): replicas that step alike must not", samples, verdict)

    def _gather_ranks(self, final: bool = False) -> tuple[list[dict[str, Any]], ProgressiveMetrics] | None:
        """Every rank's figures and their merged progressive metrics, at rank 0 (None elsewhere)."""
        assert self.group is not None
        figures = self.group.gather(self._rank_figures(final))
        if figures is None:
            return None
        return figures, ProgressiveMetrics.merge(self.progress.window, [f["progress"] for f in figures])

    def _report_ranks(self) -> None:
        """Rank 0 logs the ranks' merged progressive metrics."""
        assert self.group is not None
        gathered = self._gather_ranks()
        if gathered is None:
            return
        figures, merged = gathered
        snap = merged.snapshot()
        self._check_replicas(figures, snap["samples"])
        now = time.monotonic()
        then, before = self._last_progress
        total = sum(int(f["trained"]) for f in figures)
        rate = (total - before) / (now - then) if now > then else 0.0
        self._last_progress = (now, total)
        wire = merged_wire([f["wire"] for f in figures])
        per = max(1.0, total)
        log.info(
            "samples %d  %.0f/s on %d ranks (%s)  window AUC %.4f  logloss %.4f  wire %.1f B/sample (between ranks %.1f)",
            snap["samples"],
            rate,
            self.group.world,
            self.model.device,
            snap["window_auc"],
            snap["window_logloss"],
            sum(sum(b) for kinds in wire.values() for b in kinds.values()) / per,
            sum(sum(kinds.get("ranks", (0, 0))) for kinds in wire.values()) / per,
        )
        if self.progress_log is not None:
            self.progress_log.record(snap, sum(f["push_bytes"] for f in figures), sum(f["pull_bytes"] for f in figures), total)

    def _merge_ranks(self, own: dict[str, float]) -> dict[str, float]:
        """At the end: rank 0 gets the ranks' merged metrics (and their bytes and bad lines
        in self.merged); the others keep their own."""
        gathered = self._gather_ranks(final=True)
        if gathered is None:
            return own
        figures, merged = gathered
        snap = merged.snapshot()
        self._check_replicas(figures, snap["samples"])
        self.merged = {
            "push_bytes": sum(f["push_bytes"] for f in figures),
            "pull_bytes": sum(f["pull_bytes"] for f in figures),
            "bad_lines": sum(f["bad_lines"] for f in figures),
            "lost_files": sum(f["lost_files"] for f in figures),
            "lost_messages": sum(f["lost_messages"] for f in figures),
            "partitions_reset": sum(f["partitions_reset"] for f in figures),
            "dropped": sum(f["dropped"] for f in figures),
            "compression": _summed([f["compression"] for f in figures]),
            "wire_others": [f["wire"] for f in figures[1:]],  # rank 0 adds its own at the very end
            "rank_samples": [int(f["progress"]["count"]) for f in figures],
            "trained": sum(int(f["trained"]) for f in figures),
            "run_from": sum(int(f["run_from"]) for f in figures),
            "rank_cpu_s": [float(f["cpu_s"]) for f in figures],
            "replicas_differ": self.replicas_differ,
        }
        return snap

    def _check_bad_lines(self, final: bool) -> None:
        """Stops a stream that is mostly bad lines (another format, a missing label column)
        with an error naming the first ones, instead of a warning per line."""
        good = self.submitted + self._tail_samples + sum(len(b) for b in self.held_out)
        if too_bad(self.bad_lines, good, self.s.max_bad_fraction, final):
            raise BadInput(message(self.source.source, self.bad_lines, good, self.reader.first_bad, self.reader.schema))

    def _admit(self, batch: SampleBatch, position: Position) -> None:
        """Trains a batch read up to `position`; with a hold-back, only once enough samples
        have been read after it (the position then advances to what was trained)."""
        if self.s.hold_back <= 0:
            self.position = position
            if len(batch):
                self.train_batch(batch)
            return
        self._tail.append((position, batch))
        self._tail_samples += len(batch)
        while self._tail and self._tail_samples - len(self._tail[0][1]) >= self.s.hold_back:
            at, ready = self._tail.popleft()
            self._tail_samples -= len(ready)
            self.position = at
            if len(ready):
                self.train_batch(ready)

    def _hold_out_tail(self) -> None:
        """The samples still held back become the last export's holdout. At the stream's
        end, all but the last hold_back of them (at most a fifth of the stream) are trained
        and the position moves to the end: the tail is consumed as evidence, never trained,
        also after a restart. After a stop they stay untrained and the position where it
        was, so a restart trains them."""
        if not self._tail:
            return
        tail = holdout.concat([b for _, b in self._tail if len(b)])
        keep = len(tail)
        if self.ended:
            keep = min(self.s.hold_back, (self.submitted - self._taken_up_at + len(tail)) // 5)
            train = holdout.head(tail, len(tail) - keep)
            for lo in range(0, len(train), self.s.batch_size):
                self.train_batch(holdout.tail(holdout.head(train, min(len(train), lo + self.s.batch_size)), lo))
            self.position = self._tail[-1][0]
        self.held_out = [holdout.tail(tail, len(tail) - keep)] if keep else []
        self._tail.clear()
        self._tail_samples = 0

    def _log_progress(self) -> None:
        snap = self.progress.snapshot()
        per = max(1.0, self.trained)
        self._count_bytes()
        backlog = self._measure_backlog()
        now = time.monotonic()
        then, before = self._last_progress
        rate = (self.trained - before) / (now - then) if now > then else 0.0
        self._last_progress = (now, self.trained)
        log.info(
            "samples %d  %.0f/s on %s  window AUC %.4f  logloss %.4f  wire %.1f B/sample (push %.1f, pull %.1f)%s",
            snap["samples"],
            rate,
            self.model.device,
            snap["window_auc"],
            snap["window_logloss"],
            self.client.wire.total() / per,
            self.client.push_bytes / per,
            self.client.pull_bytes / per,
            self._outlook(backlog, rate),
        )
        if self.progress_log is not None:
            self.progress_log.record(snap, self.client.push_bytes, self.client.pull_bytes, self.trained)

    def _outlook(self, backlog: tuple[str, int] | None, rate: float) -> str:
        """Where the stream stands: followed, or how long a finite one has to go."""
        if getattr(self.source, "follow", False):
            return f"  following {self.source.source} (waits for more data; --no-follow ends at its end)"
        if backlog is None or backlog[0] != "bytes" or rate <= 0 or not self.position.offset or not self.submitted:
            return ""
        on_disk = getattr(self.source, "on_disk", None)  # backlog is in bytes on disk: a compressed file holds fewer
        at = on_disk(self.position) if callable(on_disk) else self.position.offset
        per_sample = at / max(1, self.submitted)  # bytes a sample takes, from the file so far
        return f"  ETA {backlog[1] / per_sample / rate:.0f} s"

    def _measure_backlog(self) -> tuple[str, int] | None:
        try:
            found = self.source.backlog(self.position)
        except Exception as e:  # noqa: BLE001 - a broker that does not answer: the gauge waits
            log.debug("backlog unknown: %s", e)
            return None
        if found is not None:
            metrics.BACKLOG[found[0]].set(found[1])
        return found

    def _recover_from(self, e: ShardRestarted) -> None:
        """A shard restarted: drops what is in flight, takes every shard back to a common cut
        and the stream up at its position (exactly once: nothing after the cut survives)."""
        assert self._recover is not None and self._reopen is not None
        started = time.monotonic()
        log.warning("%s; going back to the last checkpoint cut every shard holds", e)
        self.pipeline.abandon()
        if self.exporter is not None:
            # the stream is read again from the cut, which may be before an export waiting for
            # its holdout: it would take samples it trained on, so it takes what it has now
            self.exporter.close()
        self._wait_commit()
        self.model.reset()
        self.client.forget_kept_rows()  # rows kept from before the cut: the shards went back
        point = self._recover()  # restores the shards and declares the model's tables again
        self.start_at(point)
        self.bad_lines_before += self.reader.bad_lines
        self.lost_before |= set(self.source.lost)
        self.lost_messages_before |= self.source.lost_messages
        self.resets_before |= set(self.source.resets)
        self.source = self._reopen(point.position, point.at)
        self.reader = self._reader()
        self.pipeline = Pipeline(self.client, self.model)
        self.recoveries += 1
        metrics.RECOVERIES.inc()
        log.info("recovered at cut %d in %.2f s; training takes up at %s", point.cut, time.monotonic() - started, self.position)

    def _export(self, merged: dict[str, float] | None = None) -> None:
        """Ranks drained their residuals together before it (_drain_for_export); `merged`:
        their metrics, which a group's export records."""
        assert self.exporter is not None
        self._last_export_at = time.monotonic()
        self.flush()
        if self.s.export_drain and self.group is None:
            self.client.drain_residuals("export")
        snap = merged if merged is not None else self.progress.snapshot()
        try:
            export_id = self.exporter.export(snap, mlp=self.model.mlp_for_export())
        except ExportFailed as e:  # a full export disk: training goes on, the next export is full
            metrics.EXPORT_FAILURES.inc()
            log.error("export at %d samples not written (%s); training goes on, the next export is full", snap["samples"], e)
            return
        self._exported_at = self.stream_samples
        self.exports.append(export_id)
        metrics.EXPORTS.inc()
        log.info("exported %s at %d samples", export_id, snap["samples"])

    def _count_bytes(self) -> None:
        """Adds the wire bytes since the last call to the Prometheus counters."""
        push, pull = self.client.push_bytes, self.client.pull_bytes
        metrics.PUSH_BYTES.inc(push - self._bytes_seen[0])
        metrics.PULL_BYTES.inc(pull - self._bytes_seen[1])
        self._bytes_seen = (push, pull)
        for table, kinds in self.client.wire.snapshot().items():
            for kind, both in kinds.items():
                for direction, now, seen in zip(
                    ("sent", "received"), both, self._wire_seen.get((table, kind), (0, 0)), strict=True
                ):
                    if now > seen:
                        metrics.WIRE_BYTES.labels(table or "-", kind, direction).inc(now - seen)
                self._wire_seen[(table, kind)] = both

    def checkpoint(self) -> None:
        """A consistent cut: every batch read so far is trained and its pushes acknowledged
        (so the position counts exactly what the shards hold), then every shard snapshots
        it (prepare). The shards write in the background, and this trainer commits the cut
        from a thread once they are done; training stalls only for the flush and the
        snapshot."""
        started = time.perf_counter()
        parts = self.settle()
        if self.group is not None:
            self._group_checkpoint(started, parts)
            return
        self._wait_commit()  # cuts commit in order
        self.cut += 1
        at = time.perf_counter()
        offsets = encode_offsets(self.position, self.submitted, self.progress, self.model.state(self.client))
        rows = self.client.control.prepare(self.cut, offsets)
        parts["prepare"] = time.perf_counter() - at
        self._prepared(started, rows, parts)

    def _prepared(self, started: float, rows: int, parts: dict[str, float]) -> None:
        """The cut is prepared: its stall is counted and its commit goes to the thread."""
        stall = time.perf_counter() - started
        metrics.CHECKPOINT_STALL.observe(stall)
        for part, seconds in parts.items():
            metrics.CHECKPOINT_STALL_PARTS.labels(part).inc(seconds)
        said = f"{1000 * stall:.0f} ms of training stalled ({', '.join(f'{p} {1000 * t:.0f}' for p, t in parts.items())})"
        self._commit = self._committer.submit(self._commit_cut, self.cut, self.position, rows, said, time.perf_counter())

    def _group_checkpoint(self, started: float, parts: dict[str, float]) -> None:
        """Every rank is settled at the same round: rank 0 gathers where each stands and
        prepares the cut; no rank pushes again until the shards have taken their snapshot."""
        assert self.group is not None
        if self.client.aggregator is not None:
            # every rank of the host is settled: rank 0, which pushed their sums, sends what
            # its error feedback holds back, and the others forget their mirror of it
            at = time.perf_counter()
            self.group.barrier()
            self.client.drain_residuals("cut")
            parts["host sums"] = time.perf_counter() - at
        at = time.perf_counter()
        share = self.progress.window // self.group.world  # what a merge keeps of each rank's window
        state = worker_state(self.position, self.submitted, self.progress.state(last=share), self.model.state(self.client))
        states = self.group.gather(state)
        if states is not None:
            self._wait_commit()
            self.cut += 1
            rows = self.client.control.prepare(self.cut, encode_workers(states))
            parts["gather and prepare"] = time.perf_counter() - at
            self._prepared(started, rows, parts)
        self.group.barrier()

    def settle(self) -> dict[str, float]:
        """Trains what is queued and waits for its pushes; sends what the model and the
        compressors hold back: the shards then hold everything up to self.position.
        Returns the seconds each part took (the cut's log line says where a stall went).
        A model that holds back only dense tables (a worker's MLP) writes them while the
        sparse residuals drain: two independent sets of calls, so the stall is the
        longer of the two, not their sum."""
        parts = {"flush": _seconds(self.flush)}
        # a restart loses the worker's memory, so the cut holds every update
        if self.model.finish_is_dense:
            writing = self._writer.submit(_seconds, self.model.finish, self.client)
            try:
                parts["drains"] = _seconds(self.client.flush_residuals, "cut")
            finally:
                wait([writing])  # a failed drain goes to recovery, which must not meet a write still under way
            parts["model"] = writing.result()
        else:
            parts["model"] = _seconds(self.model.finish, self.client)
            parts["drains"] = _seconds(self.client.flush_residuals, "cut")
        return parts

    def _commit_cut(self, cut: int, at: Position, rows: int, stalled: str, prepared: float) -> None:
        """Commits the prepared cut `cut`, which holds the stream up to `at` (training has
        gone on since)."""
        try:
            self.client.control.commit(cut)
        except Exception as e:  # noqa: BLE001 - a shard that died recovers through the training path
            log.warning("checkpoint cut %d not committed: %s", cut, e)
            return
        metrics.CHECKPOINT_WRITE_SECONDS.observe(time.perf_counter() - prepared)
        log.info(
            "checkpoint cut %d committed: %d rows at %s, %s, written in %.0f ms",
            cut,
            rows,
            at,
            stalled,
            1000 * (time.perf_counter() - prepared),
        )

    def _wait_commit(self) -> None:
        if self._commit is not None:
            self._commit.result()
            self._commit = None


def _seconds(fn: Callable[..., object], *args: object) -> float:
    """How long fn(*args) took."""
    at = time.perf_counter()
    fn(*args)
    return time.perf_counter() - at


def _summed(parts: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in parts:
        for k, v in part.items():
            out[k] = out.get(k, 0.0) + v
    return out


Wire = dict[str, dict[str, tuple[int, int]]]


def merged_wire(parts: list[Wire]) -> Wire:
    """Several ranks' wire ledgers (the PS client's wire ledger, snapshot()) as one."""
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for part in parts:
        for table, kinds in part.items():
            for kind, (sent, received) in kinds.items():
                was = out.setdefault(table, {}).get(kind, (0, 0))
                out[table][kind] = (was[0] + sent, was[1] + received)
    return out


def replicas_verdict(prints: list[Any]) -> str | None:
    """Of the ranks' (device, MLP digest): None where they agree (or a rank has no MLP);
    "devices" where they differ between ranks on different kinds of device; otherwise
    the digests, for the log."""
    if not prints or any(p is None for p in prints) or len({tuple(p) for p in prints}) <= 1:
        return None
    if len({str(p[0]).split(":")[0] for p in prints}) > 1:
        return "devices"
    return ", ".join(f"rank {r}: {p[0]} {int(p[1]):08x}" for r, p in enumerate(prints))
