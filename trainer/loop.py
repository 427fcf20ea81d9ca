"""The training loop: parse, hash, pull, predict (progressive metrics), push, export."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ctr.batch import build_batch
from ctr.formats import LineParser, ParsedSample, ParseError, make_parser
from ctr.lr import lr_gradients, lr_logits, sigmoid_array
from ctr.schema import FeatureSchema, detect_schema
from ps.client import PSClient
from trainer import metrics
from trainer.exporter import Exporter
from trainer.progressive import ProgressiveMetrics
from trainer.source import Line, Position, StreamSource

log = logging.getLogger("trainer")


@dataclass
class LoopSettings:
    table: str
    bias_table: str
    batch_size: int
    max_samples: int
    idle_exit_s: float
    export_interval_s: float
    checkpoint_interval_s: float


class Trainer:
    def __init__(
        self,
        client: PSClient,
        schema: FeatureSchema | None,
        source: StreamSource,
        settings: LoopSettings,
        progress: ProgressiveMetrics,
        exporter: Exporter | None,
        stop: Callable[[], bool],
    ) -> None:
        self.client = client
        self.schema = schema
        self.source = source
        self.s = settings
        self.progress = progress
        self.exporter = exporter
        self.stop = stop
        self.parsers: dict[str, LineParser] = {}
        self.position = Position()
        self.bad_lines = 0
        self.exports: list[str] = []

    def _parser(self, line: Line) -> LineParser | None:
        """The file's parser; a csv file's first line is its header and yields None."""
        p = self.parsers.get(line.file)
        if p is not None:
            return p
        assert line.text is not None
        if self.schema is None:
            self.schema = detect_schema(line.text)
            log.info("detected format %s in %s", self.schema.format, line.file)
        if self.schema.format == "csv":
            self.parsers[line.file] = make_parser(self.schema, line.text)
            return None
        p = self.parsers[line.file] = make_parser(self.schema)
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
        batch = build_batch(samples)
        uniq, inv = np.unique(batch.keys, return_inverse=True)
        rows, session = self.client.pull(self.s.table, uniq)
        bias = float(self.client.pull_dense(self.s.bias_table)[0])
        weights = np.ascontiguousarray(rows[:, 0]) if rows.shape[0] else np.zeros(0, np.float32)
        index = inv.astype(np.int64)
        probs = sigmoid_array(lr_logits(batch.offsets, index, batch.values, weights, bias))
        self.progress.update(batch.labels, probs)  # predict before train
        grad, gbias = lr_gradients(batch.offsets, index, batch.values, probs, batch.labels, uniq.shape[0])
        self.client.push(self.s.table, uniq, grad.reshape(-1, 1), session)
        self.client.push_dense(self.s.bias_table, np.array([gbias], dtype=np.float32))
        metrics.SAMPLES.inc(len(samples))

    def run(self) -> dict[str, float]:
        last_export = last_ckpt = last_log = time.monotonic()
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
            done = 0 < self.s.max_samples <= self.progress.count
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
        if self.exporter is not None:
            self._export()
        if self.s.checkpoint_interval_s > 0:
            self.checkpoint()
        return self.progress.snapshot()

    def _export(self) -> None:
        assert self.exporter is not None
        snap = self.progress.snapshot()
        export_id = self.exporter.export(snap)
        self.exports.append(export_id)
        metrics.EXPORTS.inc()
        log.info("exported %s at %d samples", export_id, snap["samples"])

    def checkpoint(self) -> None:
        offsets = json.dumps(vars(self.position)).encode()
        results = self.client.checkpoint(offsets)
        log.info("checkpoint at %s: %d rows written", self.position, sum(r for r, _ in results))
