"""The training loop: parse, hash, train the model through the PS (progressive metrics
first), export and checkpoint on their intervals."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from ctr.batch import build_batch
from ctr.fields import FieldIndex
from ctr.formats import LineParser, ParsedSample, ParseError, make_parser
from ctr.schema import FeatureSchema, detect_schema
from ps.client import PSClient
from trainer import metrics
from trainer.exporter import Exporter
from trainer.model import TrainableModel
from trainer.pipeline import Pipeline, Result
from trainer.progressive import ProgressiveMetrics
from trainer.source import Line, Position, StreamSource

log = logging.getLogger("trainer")


@dataclass
class LoopSettings:
    batch_size: int
    max_samples: int
    idle_exit_s: float
    export_interval_s: float
    checkpoint_interval_s: float


class Trainer:
    def __init__(
        self,
        client: PSClient,
        model: TrainableModel,
        schema: FeatureSchema | None,
        fields: FieldIndex,
        source: StreamSource,
        settings: LoopSettings,
        progress: ProgressiveMetrics,
        exporter: Exporter | None,
        stop: Callable[[], bool],
    ) -> None:
        self.client = client
        self.model = model
        self.schema = schema
        self.fields = fields
        self.source = source
        self.s = settings
        self.progress = progress
        self.exporter = exporter
        self.stop = stop
        self.parsers: dict[str, LineParser] = {}
        self.position = Position()
        self.bad_lines = 0
        self.exports: list[str] = []
        self.elapsed_s = 0.0
        self.pipeline = Pipeline(client, model)
        self.submitted = 0  # samples handed to the pipeline (progress lags it by a batch)

    def _parser(self, line: Line) -> LineParser | None:
        """The file's parser; a csv file's first line is its header and yields None."""
        p = self.parsers.get(line.file)
        if p is not None:
            return p
        assert line.text is not None
        if self.schema is None:  # --format auto on a stream whose head could not be peeked at (stdin)
            try:
                self.schema = detect_schema(line.text)
            except ValueError as e:
                raise ParseError(f"format not detected yet: {e}") from None  # the next line tries again
            log.info("detected format %s in %s", self.schema.format, line.file)
        if self.schema.format == "csv":
            if line.number == 1:
                self.parsers[line.file] = make_parser(self.schema, self.fields, line.text)
                return None
            with open(line.file, encoding="utf-8", errors="replace") as fh:  # resumed inside the file
                header = fh.readline()
            p = self.parsers[line.file] = make_parser(self.schema, self.fields, header)
            return p
        p = self.parsers[line.file] = make_parser(self.schema, self.fields)
        return p

    def _parse(self, line: Line) -> ParsedSample | None:
        try:
            if line.text is None:
                raise ParseError("line is not valid UTF-8")
            parser = self._parser(line)
            return parser(line.text) if parser is not None else None
        except ParseError as e:
            self.bad_lines += 1
            metrics.BAD_LINES.inc()
            log.warning("%s:%d: %s", line.file, line.number, e)
            return None

    def train_batch(self, samples: list[ParsedSample]) -> None:
        self.submitted += len(samples)
        self._record(self.pipeline.submit(build_batch(samples, self.fields.ids())))

    def _record(self, done: Result | None) -> None:
        if done is not None:
            batch, probs = done
            self.progress.update(batch.labels, probs)
            metrics.SAMPLES.inc(len(batch))

    def flush(self) -> None:
        """Trains what the pipeline holds and waits for its pushes (before exports, checkpoints)."""
        self._record(self.pipeline.flush())

    def run(self) -> dict[str, float]:
        started = last_export = last_ckpt = last_log = time.monotonic()
        if self.exporter is not None:
            self.exports.append(self.exporter.export(self.progress.snapshot(), force_full=True))
        pending: list[ParsedSample] = []
        tty = sys.stderr.isatty()
        for line in self.source.lines():
            now = time.monotonic()
            if line is not None:
                sample = self._parse(line)
                self.position = Position(line.file, line.end_offset, line.number)
                if sample is not None:
                    pending.append(sample)
            full = len(pending) >= self.s.batch_size
            if pending and (full or line is None):
                self.train_batch(pending)
                pending = []
            if line is None:  # the stream is idle: let what is queued land
                self.flush()
            done = 0 < self.s.max_samples <= self.submitted
            idle = line is None and self.s.idle_exit_s > 0 and now - self.source.idle_since > self.s.idle_exit_s
            if self.exporter is not None and now - last_export >= self.s.export_interval_s:
                self._export()
                last_export = now
            if self.s.checkpoint_interval_s > 0 and now - last_ckpt >= self.s.checkpoint_interval_s:
                self.checkpoint()
                last_ckpt = now
            if now - last_log >= 5 or (tty and now - last_log >= 1):
                snap = self.progress.snapshot()
                log.info("samples %d  window AUC %.4f  logloss %.4f", snap["samples"], snap["window_auc"], snap["window_logloss"])
                last_log = now
            if done or idle or self.stop():
                break
        if pending:
            self.train_batch(pending)
        self.flush()
        self.pipeline.close()
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

    def checkpoint(self) -> None:
        self.flush()
        offsets = json.dumps(vars(self.position)).encode()
        results = self.client.checkpoint(offsets)
        log.info("checkpoint at %s: %d rows written", self.position, sum(r for r, _ in results))
