"""Several worker processes on one PS (`--workers W`).

The coordinator (the `boundless train` process) resolves the schema and the field list and
declares the tables. Then it starts W worker processes. Each one trains on its share of
the stream (a folder's files round-robin, or a topic's partitions) with its own pipeline and row cache (SSP,
`--staleness`), and reports its progressive metrics about once a second. The coordinator
exports on its interval, merges the metrics, and stops the workers on SIGTERM. A worker
that fails stops the run, with its exit code.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ctr.data.batch import SampleBatch
from ctr.data.fields import FieldIndex
from ctr.data.schema import FeatureSchema
from ctr.repository.holdout import RecentBatches
from ctr.runtime import daemon
from ctr.runtime.security import Identity, install
from ps.api import ShardRestarted
from ps.client import PSClient
from ps.client.local_aggregate import AggregationPlan
from trainer.config import TrainerConfig
from trainer.input.source import open_source
from trainer.run.exporter import Exporter
from trainer.run.fork_server import start_fork_server
from trainer.run.loop import LoopSettings, Trainer
from trainer.run.progress_log import ProgressLog
from trainer.run.recovery import CutPoint, worker_state
from trainer.run.worker_cuts import WorkerCuts
from trainer.spec import model_spec
from trainer.step.factorization import build_model
from trainer.step.progressive import ProgressiveMetrics

log = logging.getLogger("trainer")


@dataclass
class WorkerJob:
    """What a worker process needs; picklable."""

    conf: TrainerConfig
    index: int
    addresses: list[str]
    schema: FeatureSchema | None
    fields: FieldIndex
    settings: LoopSettings
    aggregation: AggregationPlan | None = None  # --local-aggregate
    generation: int = 0  # the coordinator's, which the shards follow since it restored them
    start: CutPoint | None = None  # this worker's part of the cut the shards were restored to
    control: Any = None  # a queue of the coordinator's orders: "pause" (for a cut), "resume"
    coordinator: int = 0  # its pid: a worker whose coordinator died stops (its pushes would be stale)


@dataclass
class WorkerReport:
    index: int
    progress: dict[str, object]
    final: bool = False
    bad_lines: int = 0
    dropped: int = 0
    push_bytes: int = 0
    pull_bytes: int = 0
    compression: dict[str, float] = field(default_factory=dict)
    paused: bool = False  # at a batch boundary with every push acknowledged, for a cut
    flushed: bool = False  # paused, and the local aggregation's residuals sent (--local-aggregate)
    state: dict[str, Any] | None = None  # recovery.worker_state, with paused and final reports
    holdout: list[tuple[float, SampleBatch]] = field(default_factory=list)  # worker 0: batches read, with when
    held_out: list[SampleBatch] = field(default_factory=list)  # worker 0's final report: its tail, never trained


def share(total: int, index: int, count: int) -> int:
    """Worker `index`'s part of a sample limit (0: no limit)."""
    if total <= 0:
        return 0
    return total // count + (1 if index < total % count else 0)


def worker_main(job: WorkerJob, reports: Any) -> None:
    """A worker process: trains its part of the stream and reports to the coordinator."""
    conf = job.conf
    daemon.setup_logging(f"trainer-w{job.index}", conf.log_level)
    install(Identity.of(conf))  # a fresh process: the coordinator's identity for the PS channels
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    client = PSClient.connect(
        job.addresses,
        conf.ps_access.push_codec,
        conf.ps_access.residual_rows,
        conf.learner.seed,
        conf.ps_access.pull_codec,
        conf.ps_access.ps_retry_s,
        call_timeout_s=conf.ps_access.ps_call_timeout_s,
    )
    client.transport.generation = job.generation
    client.control.status()  # whether the shards may drop a push's rows: then the pipeline does not overlap
    if job.aggregation is not None:
        client.aggregate_locally(job.aggregation, job.index)
    start = job.start.position if job.start is not None else None
    source = open_source(
        conf.input.source,
        conf.input.follows(),
        stop=stop.is_set,
        start=start,
        part=(job.index, conf.parallel.workers),
        pattern=conf.input.source_pattern,
        ignore=conf.input.ignored_names(),
    )
    spec = model_spec(conf, tuple(job.fields.names))
    # the coordinator declared the tables; the MLP syncs through the PS between worker processes
    model = build_model(
        spec, conf.parallel.staleness, conf.ps_access.dense_codec, False, conf.learner.device, job.settings.batch_size
    )
    client.know(spec.tables())
    progress = ProgressiveMetrics(conf.progress.window)
    trainer = Trainer(client, model, job.schema, job.fields, source, job.settings, progress, None, stop.is_set)
    if job.start is not None:
        trainer.start_at(job.start)
    feed = RecentBatches(
        conf.export.holdout_samples if conf.export.export_dir and job.index == 0 else 0
    )  # the exporter's holdouts
    trainer.observe = feed.add
    trainer.report = lambda: reports.put(WorkerReport(job.index, progress.state(), holdout=feed.drain()))
    trainer.control = lambda: _obey(job.control, trainer, reports, job.index, job.coordinator)
    try:
        trainer.run()
    except ShardRestarted as e:
        log.warning("%s; the coordinator takes every shard back to a cut", e)
        os._exit(EXIT_SHARD_RESTARTED)
    reports.put(
        WorkerReport(
            job.index,
            progress.state(),
            final=True,
            state=worker_state(trainer.position, trainer.submitted, progress.state(), model.state(client)),
            holdout=feed.drain(),
            held_out=trainer.held_out,
            bad_lines=trainer.bad_lines,
            dropped=job.fields.dropped,
            push_bytes=client.push_bytes,
            pull_bytes=client.pull_bytes,
            compression=client.compression_stats(),
        )
    )
    client.close()


def _stop_all(procs: list[Any], reports: Any) -> None:
    """Kills every worker and forgets what they reported."""
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join(timeout=30)
    procs.clear()
    while True:
        try:
            reports.get(timeout=0.05)
        except queue.Empty:
            return


def _obey(control: Any, trainer: Trainer, reports: Any, index: int, coordinator: int) -> None:
    """At a batch boundary: on "pause", settles (every push acknowledged), reports where it
    stands for the coordinator's cut and waits for "resume". A worker whose coordinator is
    gone exits: a restarted trainer goes back to the last cut without it."""
    if control is None:
        return
    _coordinator_alive(coordinator)
    try:
        order = control.get_nowait()
    except queue.Empty:
        return
    if order == "pause":
        trainer.settle()
        state = worker_state(trainer.position, trainer.submitted, trainer.progress.state(), trainer.model.state(trainer.client))
        reports.put(WorkerReport(index, trainer.progress.state(), paused=True, state=state))
        while True:
            try:
                order = control.get(timeout=1.0)
            except queue.Empty:
                _coordinator_alive(coordinator)
                continue
            if order == "resume":
                return
            if order == "flush":  # every worker is paused: the leader's residuals go out now
                trainer.client.flush_local_aggregation()
                reports.put(WorkerReport(index, trainer.progress.state(), paused=True, state=state, flushed=True))


def _coordinator_alive(pid: int) -> None:
    if pid and not daemon.process_alive(pid):
        log.error("the coordinator (pid %d) is gone; this worker stops", pid)
        os._exit(1)


@dataclass
class WorkerRun:
    """The merged outcome of a multi-worker run."""

    progress: ProgressiveMetrics
    elapsed_s: float
    exports: list[str] = field(default_factory=list)
    bad_lines: int = 0
    dropped: int = 0
    push_bytes: int = 0
    pull_bytes: int = 0
    compression: dict[str, float] = field(default_factory=dict)
    held_out: int = 0  # samples of worker 0's tail held back for the last export


class WorkerFailed(RuntimeError):
    pass


def _merged(window: int, latest: dict[int, WorkerReport]) -> ProgressiveMetrics:
    return ProgressiveMetrics.merge(window, [r.progress for r in latest.values()])


EXIT_SHARD_RESTARTED = 75  # a worker's exit code: a PS shard restarted (the coordinator recovers)


class ShardLost(RuntimeError):
    pass


def _check(procs: list[Any]) -> None:
    for i, p in enumerate(procs):
        if p.exitcode == EXIT_SHARD_RESTARTED:
            raise ShardLost(f"worker {i} found a PS shard restarted")
        if p.exitcode not in (None, 0):  # a clean exit's final report is in the queue
            raise WorkerFailed(f"worker {i} exited with code {p.exitcode}; its log is above")


def run_workers(
    conf: TrainerConfig,
    addresses: list[str],
    schema: FeatureSchema | None,
    fields: FieldIndex,
    settings: LoopSettings,
    exporter: Exporter | None,
    stop: Callable[[], bool],
    generation: int = 0,
    client: PSClient | None = None,
    start: CutPoint | None = None,
    recover: Callable[[], CutPoint] | None = None,
    progress_log: ProgressLog | None = None,
) -> WorkerRun:
    """client: the coordinator's, for checkpoint cuts; start: the cut the shards were
    restored to, whose parts say where each worker takes up; recover: takes every shard
    back to a common cut when one restarted, after which the workers start again there."""
    ctx = start_fork_server()
    reports = ctx.Queue()
    procs: list[Any] = []
    plans: list[AggregationPlan] = []
    controls: list[Any] = []

    def spawn(point: CutPoint | None, generation: int) -> None:
        plan = None
        if conf.parallel.local_aggregate:  # the workers' shared memory, removed when they are gone
            plan = AggregationPlan.create(ctx, conf.parallel.workers, len(addresses), conf.parallel.local_aggregate_mb << 20)
            plans.append(plan)
        controls[:] = [ctx.Queue() for _ in range(conf.parallel.workers)]
        for i in range(conf.parallel.workers):
            limit = share(settings.max_samples, i, conf.parallel.workers)
            # cuts are the coordinator's; worker 0 alone holds back a finite stream's tail, the last export's holdout
            hold_back = settings.hold_back if i == 0 else 0
            job_settings = LoopSettings(
                **{**vars(settings), "max_samples": limit, "checkpoint_interval_s": 0.0, "hold_back": hold_back}
            )
            part = point.parts[i] if point is not None and point.parts else None
            job = WorkerJob(conf, i, addresses, schema, fields, job_settings, plan, generation, part, controls[i], os.getpid())
            p = ctx.Process(target=worker_main, args=(job, reports), name=f"trainer-w{i}", daemon=True)
            p.start()
            procs.append(p)
        log.info("started %d workers (staleness %d) on %s", conf.parallel.workers, conf.parallel.staleness, ",".join(addresses))

    spawn(start, generation)
    latest: dict[int, WorkerReport] = {}
    run = WorkerRun(ProgressiveMetrics(conf.progress.window), 0.0)
    started = last_export = last_log = last_cut = time.monotonic()
    cuts = None
    if client is not None and settings.checkpoint_interval_s > 0:
        cuts = WorkerCuts(
            client, controls, reports, latest, start.cut if start else 0, lambda: _check(procs), conf.parallel.local_aggregate
        )
    if exporter is not None and start is not None and start.cut:  # a model taken up from a cut: its base first
        run.exports.append(exporter.export(run.progress.snapshot(), force_full=True))
    stopping = False
    recoveries = 0
    try:
        while not all(r.final for r in latest.values()) or len(latest) < conf.parallel.workers:
            try:
                try:
                    report = reports.get(timeout=0.2)
                    latest[report.index] = report
                    if exporter is not None:
                        for read_at, batch in report.holdout:
                            exporter.observe(batch, read_at)
                except queue.Empty:
                    pass
                _check(procs)
                if stop() and not stopping:
                    stopping = True
                    for p in procs:
                        if p.is_alive() and p.pid is not None:
                            p.terminate()  # SIGTERM: the worker finishes its batch and pushes it
                now = time.monotonic()
                if cuts is not None and not stopping and now - last_cut >= settings.checkpoint_interval_s:
                    cuts.take()
                    last_cut = now
            except (ShardLost, ShardRestarted) as e:  # a worker found it, or the coordinator's cut did
                if recover is None or stopping or recoveries >= 10:
                    raise WorkerFailed(str(e)) from None
                log.warning("%s; every worker goes back to the last cut every shard holds", e)
                _stop_all(procs, reports)
                point = recover()
                latest.clear()
                if cuts is not None:
                    cuts.cut = point.cut
                assert client is not None
                spawn(point, client.transport.generation)
                recoveries += 1
                continue
            if exporter is not None and now - last_export >= settings.export_interval_s and not exporter.waiting:
                run.exports.append(exporter.export(_merged(conf.progress.window, latest).snapshot()))
                last_export = now
            if now - last_log >= settings.progress_interval_s:
                snap = _merged(conf.progress.window, latest).snapshot()
                log.info("samples %d  window AUC %.4f  logloss %.4f", snap["samples"], snap["window_auc"], snap["window_logloss"])
                if progress_log is not None:
                    progress_log.record(snap)
                last_log = now
        if cuts is not None:
            cuts.take()  # every worker is done: the last cut holds the whole stream
    except BaseException:
        for p in procs:
            if p.is_alive():
                p.kill()
        raise
    finally:
        for p in procs:
            p.join(timeout=30)
        for plan in plans:
            plan.release()
    run.elapsed_s = time.monotonic() - started
    run.progress = _merged(conf.progress.window, latest)
    for r in latest.values():
        run.bad_lines += r.bad_lines
        run.dropped += r.dropped
        run.push_bytes += r.push_bytes
        run.pull_bytes += r.pull_bytes
        for k, v in r.compression.items():
            run.compression[k] = run.compression.get(k, 0.0) + v
    if progress_log is not None:
        progress_log.record(run.progress.snapshot(), run.push_bytes, run.pull_bytes)
    if exporter is not None:
        tail = [b for r in latest.values() for b in r.held_out]
        for batch in tail:  # exports still waiting get unseen samples first
            exporter.observe(batch)
        run.exports.append(exporter.export(run.progress.snapshot()))
        for batch in tail:
            exporter.observe(batch)
        exporter.close()
        run.held_out = sum(len(b) for b in tail)
    return run
