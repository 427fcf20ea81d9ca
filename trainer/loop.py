"""The training loop: parse, hash, train the model through the PS (progressive metrics
first), export and checkpoint on their intervals."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ctr.batch import SampleBatch
from ctr.fields import FieldIndex
from ctr.schema import FeatureSchema
from ps.client import PSClient
from trainer import metrics
from trainer.batch_cache import BatchCache
from trainer.exporter import Exporter
from trainer.model import TrainableModel
from trainer.pipeline import Pipeline, Result
from trainer.progressive import ProgressiveMetrics
from trainer.reader import BatchReader, ThreadedReader
from trainer.source import Position, Source

log = logging.getLogger("trainer")


@dataclass
class LoopSettings:
    batch_size: int
    max_samples: int
    idle_exit_s: float
    export_interval_s: float
    checkpoint_interval_s: float
    max_line_bytes: int = 1 << 20
    queue_depth: int = 8  # parsed batches waiting for the trainer
    batch_cache: str | None = None  # folder of the parsed-batch cache
    batch_cache_max_bytes: int = 20 << 30


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
        self.model = model

        self.fields = fields
        self.source = source
        self.s = settings
        self.progress = progress
        self.exporter = exporter
        self.stop = stop
        cache = None
        if settings.batch_cache and schema is not None:
            cache = BatchCache(
                Path(settings.batch_cache), schema, settings.batch_size, settings.max_line_bytes, settings.batch_cache_max_bytes
            )
        self.reader = BatchReader(source, schema, fields, settings.batch_size, settings.max_line_bytes, cache)
        self.position = Position()
        self.exports: list[str] = []
        self.elapsed_s = 0.0
        self.pipeline = Pipeline(client, model)
        self.submitted = 0  # samples handed to the pipeline (progress lags it by a batch)
        self.report: Callable[[], None] | None = None  # called about once a second (a worker's coordinator)

    def train_batch(self, batch: SampleBatch) -> None:
        self.submitted += len(batch)
        self._record(self.pipeline.submit(batch))

    def _record(self, done: Result | None) -> None:
        if done is not None:
            batch, probs = done
            self.progress.update(batch.labels, probs)
            metrics.SAMPLES.inc(len(batch))

    @property
    def bad_lines(self) -> int:
        return self.reader.bad_lines

    def flush(self) -> None:
        """Trains what the pipeline holds and waits for its pushes (before exports, checkpoints)."""
        self._record(self.pipeline.flush())

    def run(self) -> dict[str, float]:
        started = last_export = last_ckpt = last_log = last_report = time.monotonic()
        if self.exporter is not None:
            self.exports.append(self.exporter.export(self.progress.snapshot(), force_full=True))
        tty = sys.stderr.isatty()
        ready = ThreadedReader(self.reader, self.s.queue_depth, self.stop)
        try:
            for item in ready:
                now = time.monotonic()
                if item is not None:
                    self.position = self.source.position_after(item.position)
                    if len(item.batch):
                        self.train_batch(item.batch)
                else:  # the stream is idle: let what is queued land
                    self.flush()
                done = 0 < self.s.max_samples <= self.submitted
                idle = item is None and self.s.idle_exit_s > 0 and now - self.source.idle_since > self.s.idle_exit_s
                if self.exporter is not None and now - last_export >= self.s.export_interval_s:
                    self._export()
                    last_export = now
                if self.s.checkpoint_interval_s > 0 and now - last_ckpt >= self.s.checkpoint_interval_s:
                    self.checkpoint()
                    last_ckpt = now
                if self.report is not None and now - last_report >= 1.0:
                    self.report()
                    last_report = now
                if now - last_log >= 5 or (tty and now - last_log >= 1):
                    snap = self.progress.snapshot()
                    per = max(1.0, snap["samples"])
                    self._count_bytes()
                    log.info(
                        "samples %d  window AUC %.4f  logloss %.4f  push %.1f B/sample  pull %.1f B/sample",
                        snap["samples"],
                        snap["window_auc"],
                        snap["window_logloss"],
                        self.client.push_bytes / per,
                        self.client.pull_bytes / per,
                    )
                    last_log = now
                if done or idle or self.stop():
                    break
        finally:
            ready.close()
        self.flush()
        self.pipeline.close()
        self.client.leave_local_aggregation()  # the other workers' last pushes go out meanwhile
        self.model.finish(self.client)
        self.client.flush_residuals()  # the shards end with every update, exactly
        self._count_bytes()
        self.elapsed_s = time.monotonic() - started
        if self.exporter is not None:
            self._export()
        if self.s.checkpoint_interval_s > 0:
            self.checkpoint()
        return self.progress.snapshot()

    def _export(self) -> None:
        assert self.exporter is not None
        self.flush()
        snap = self.progress.snapshot()
        export_id = self.exporter.export(snap)
        self.exports.append(export_id)
        metrics.EXPORTS.inc()
        log.info("exported %s at %d samples", export_id, snap["samples"])

    def _count_bytes(self) -> None:
        """Adds the wire bytes since the last call to the Prometheus counters."""
        push, pull = self.client.push_bytes, self.client.pull_bytes
        metrics.PUSH_BYTES.inc(push - self._bytes_seen[0])
        metrics.PULL_BYTES.inc(pull - self._bytes_seen[1])
        self._bytes_seen = (push, pull)

    def checkpoint(self) -> None:
        self.flush()
        self.model.finish(self.client)
        self.client.flush_residuals()  # a restart loses the worker's memory, so the cut holds every update
        offsets = json.dumps(vars(self.position)).encode()
        results = self.client.checkpoint(offsets)
        log.info("checkpoint at %s: %d rows written", self.position, sum(r for r, _ in results))
