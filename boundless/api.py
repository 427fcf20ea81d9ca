"""The Python API: what the command line does, from a notebook or a pipeline.

    import boundless

    summary = boundless.train(source="clicks.csv", model="fm", ps="local", k=8, label="clicked")
    print(summary.samples, summary.progressive_logloss, summary.window_auc)

    with boundless.local_platform(shards=2) as p:      # PS shards, model manager, serving
        p.train(source="clicks.csv", model="ffm", label="clicked")
        p.wait_published()
        print(p.client.predict(items=[{"ad": "17"}], context={"user": "3"}).scores)
        p.models.rollback()

Settings are the trainer's own (one config type, `trainer.config.TrainerConfig`): every flag
of `boundless train` by its name with underscores (`batch_size=4096` for `--batch-size`),
checked and refused as the flag would be (ConfigError names the setting).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from boundless import frames
from boundless.processes import Daemon, start
from ctr.repository.schemas import LabelEntry
from ctr.repository.versions import Policy, Repository, RepositoryError
from ctr.runtime import config as cfg
from modelmgr.commands import actions, promote
from modelmgr.commands.promote import ShadowTotals
from serving.client import PredictClient
from trainer.api import TrainerConfig, run_training

Source = str | os.PathLike[str] | Any  # a path or URL, or a table in memory (boundless.frames)
API_PROGRESS_INTERVAL_S = 1.0  # a bar in a notebook moves every second unless told otherwise


@dataclass(frozen=True)
class TrainingSummary:
    """What one training run did: the figures `boundless train --metrics-out` writes, the
    common ones typed; `metrics` holds them all."""

    samples: int  # the stream's: a run taken up at a checkpoint cut counts on from the cut's
    trained_samples: int  # what this run trained, which examples_per_s and the bytes per sample are over
    examples_per_s: float
    elapsed_s: float
    progressive_logloss: float
    window_auc: float
    exports: int
    device: str
    wire_bytes_per_sample: float
    cpu_s: float  # the run's CPU seconds (every rank's), from reading its settings on
    metrics: dict[str, Any] = field(repr=False)

    @classmethod
    def of(cls, result: dict[str, Any]) -> TrainingSummary:
        def num(key: str) -> float:
            value = result.get(key, math.nan)
            return float(value) if isinstance(value, int | float) else math.nan

        return cls(
            samples=int(result.get("samples", 0)),
            trained_samples=int(result.get("trained_samples", result.get("samples", 0))),
            examples_per_s=num("examples_per_s"),
            elapsed_s=num("elapsed_s"),
            progressive_logloss=num("progressive_logloss"),
            window_auc=num("window_auc"),
            exports=int(result.get("exports", 0)),
            device=str(result.get("device", "")),
            wire_bytes_per_sample=num("wire_bytes_per_sample"),
            cpu_s=num("cpu_s"),
            metrics=dict(result),
        )


class _Bar:
    """A tqdm bar (tqdm.auto: a widget in a notebook, text in a terminal) fed by the
    trainer's progress records: samples, examples/s and the window AUC."""

    def __init__(self, enabled: bool) -> None:
        self.bar: Any = None
        self._last = (time.monotonic(), 0.0)
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(unit=" samples", unit_scale=True, dynamic_ncols=True)

    def record(self, snap: dict[str, float]) -> None:
        if self.bar is None:
            return
        samples = snap.get("samples", 0.0)  # the stream's (a cut taken up carries its count on)
        trained = snap.get("trained_samples", samples)  # this run's, which its speed is over
        now = time.monotonic()
        then, before = self._last
        self._last = (now, trained)
        if self.bar.n == 0 and samples > trained:  # a cut taken up: the bar starts at its samples, not at a jump to them
            self.bar.n = self.bar.last_print_n = self.bar.initial = int(samples - trained)
        self.bar.update(max(0, int(samples) - self.bar.n))
        rate = (trained - before) / (now - then) if now > then else 0.0
        self.bar.set_postfix({"ex/s": f"{rate:,.0f}", "window AUC": f"{snap.get('window_auc', math.nan):.4f}"})

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def trainer_config(source: str, model: str, ps: str, **settings: Any) -> TrainerConfig:
    """The TrainerConfig of `boundless train --source SOURCE --model MODEL --ps PS --NAME VALUE...`."""
    values = {"source": source, "model": model, "ps": ps, **settings}
    values.setdefault("progress_interval_s", API_PROGRESS_INTERVAL_S)
    return cfg.from_settings(TrainerConfig, values, "boundless.train")


def train(source: Source, model: str = "lr", ps: str = "local", *, progress: bool = True, **settings: Any) -> TrainingSummary:
    """Trains `model` (lr, fm, ffm, wdl, deepfm) on `source` (a file, a folder, '-' for
    stdin, kafka://HOST:PORT/TOPIC; or a table in memory: a pandas or polars DataFrame, a
    pyarrow Table, a dict of columns, a list of row dicts, read as a Parquet file of it)
    with the parameter server `ps` ('local': shards in this process; else their addresses,
    comma-separated), until a finite source ends or the run is interrupted (Ctrl-C, or the
    notebook's stop button: the run stops at the next batch and still returns its
    summary). `settings` are `boundless train`'s flags by name (`k=8`, `batch_size=4096`,
    `export_dir="exports"`, `label="clicked"`...). progress: a tqdm bar of samples,
    examples/s and the window AUC."""
    if frames.is_table(source) and str(settings.get("format", "auto")) not in ("auto", "parquet"):
        raise cfg.ConfigError(f"boundless.train: format={settings['format']!r}: a table in memory is read as Parquet")
    with frames.source_path(source) as path:
        return _train(path, model, ps, progress, settings)


def _train(source: str, model: str, ps: str, progress: bool, settings: dict[str, Any]) -> TrainingSummary:
    conf = trainer_config(source, model, ps, **settings)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=getattr(logging, conf.log_level.upper(), logging.INFO))
    stop = threading.Event()
    bar = _Bar(progress)
    previous = None
    if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
        previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        return TrainingSummary.of(run_training(conf, stop, bar.record))
    finally:
        bar.close()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


class Models:
    """The served model's versions, its policy and its labels, on the repository: what
    `boundless model list / pin / unpin / rollback / label / unlabel / promote` do.
    `serving`: the replicas' addresses a promotion reads the shadow evidence from."""

    def __init__(self, repo: Repository, serving: list[str] | None = None) -> None:
        self.repo = repo
        self.serving = list(serving or [])

    def list(self) -> list[int]:
        return self.repo.versions()

    def policy(self) -> Policy:
        return self.repo.policy()

    def target(self) -> int | None:
        """The version serving should load under the policy."""
        return self.repo.target()

    def pin(self, version: int, reason: str = "pinned from Python") -> Policy:
        return actions.pin(self.repo, version, reason)

    def unpin(self, reason: str = "unpinned from Python") -> Policy:
        return actions.unpin(self.repo, reason)

    def rollback(self, version: int | None = None, reason: str = "rollback from Python") -> Policy:
        return actions.rollback(self.repo, version, reason)

    def label(self, name: str, version: int, share: float = 0.0, shadow: float = 0.0) -> dict[str, LabelEntry]:
        """Labels `version` as `name`: a canary (`share` of routed requests) and/or a
        shadow (`shadow` of live requests, scored off the path)."""
        return self.repo.set_label(name, version, share, shadow)

    def unlabel(self, name: str) -> dict[str, LabelEntry]:
        return self.repo.remove_label(name)

    def promote(self, name: str, min_shadow: int = 1000, max_mean_abs_diff: float = 0.01) -> ShadowTotals:
        """Makes the version labelled `name` stable if its shadow evidence on every serving
        replica passes the gate; raises RepositoryError naming why not (nothing changed)."""
        totals, why_not = promote.promote(self.repo, name, self.serving, min_shadow, max_mean_abs_diff)
        if why_not is not None:
            raise RepositoryError(f"not promoted: {why_not} ({totals.describe()})")
        return totals


class NotPublished(RuntimeError):
    """The manager rejected the exports it was given: no version is coming to wait for."""


class LocalPlatform:
    """What `boundless demo` starts, as processes on this machine: PS shards over gRPC, the
    model manager (its quality gate included), and serving; their logs in `work_dir`."""

    def __init__(self, shards: int = 2, work_dir: str | Path | None = None, model_name: str = "ctr") -> None:
        self._tmp = None if work_dir is not None else tempfile.TemporaryDirectory(prefix="boundless-local-")
        self.dir = Path(work_dir) if work_dir is not None else Path(self._tmp.name)  # type: ignore[union-attr]
        self.dir.mkdir(parents=True, exist_ok=True)
        self.model_name = model_name
        self.exports = self.dir / "exports"
        self.repo = Repository(self.dir / "repo", model_name)
        self.daemons: list[Daemon] = []
        self.shards: list[Daemon] = []
        self._client: PredictClient | None = None
        self.models = Models(self.repo)
        try:
            self._start(shards)
        except BaseException:
            self.stop()
            raise

    def _start(self, count: int) -> None:
        d = self.dir
        self.shards = [
            start(
                f"ps{i}",
                ["ps", "--shard-index", str(i), "--shard-count", str(count), "--data-dir", str(d / f"ps{i}")]
                + ["--export-root", str(self.exports)],
                d,
            )
            for i in range(count)
        ]
        self.daemons += self.shards
        self.serving = start("serving", ["serve", "--repo", str(d / "repo"), "--model-name", self.model_name], d)
        self.daemons.append(self.serving)
        self.serving.wait_ready()
        watch = ["model", "watch", "--exports", str(self.exports), "--repo", str(d / "repo")]
        self.manager = start("modelmgr", [*watch, "--model-name", self.model_name, "--notify", self.serving.address], d)
        self.daemons.append(self.manager)
        for x in self.daemons:
            x.wait_ready()
        self.models.serving = [self.serving.address]

    @property
    def ps(self) -> str:
        """The shards' addresses, as `--ps` takes them."""
        return ",".join(s.address for s in self.shards)

    def train(self, source: Source, model: str = "lr", *, progress: bool = True, **settings: Any) -> TrainingSummary:
        """boundless.train against these shards, exporting where the manager watches."""
        settings.setdefault("export_dir", str(self.exports))
        settings.setdefault("model_name", self.model_name)
        return train(source, model, self.ps, progress=progress, **settings)

    def wait_published(self, after: int = 0, timeout: float = 120.0) -> int:
        """Waits until the policy names a version above `after` and serving scores with it;
        returns it. The manager publishes what its quality gate passes: when it has handled
        every finished export and rejected the newest, nothing is coming, and this raises
        NotPublished with the manager's reason at once (else TimeoutError naming the logs)."""
        deadline = time.monotonic() + timeout
        while True:
            target = self.repo.target()
            if target is not None and target > after:
                try:
                    status = self.client.status()
                    if status.version == target:
                        return int(target)
                except Exception:  # noqa: BLE001 - not serving yet: asked again until the deadline
                    pass
            else:
                self._raise_if_rejected()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no version served within {timeout:.0f} s (logs in {self.dir})")
            for x in self.daemons:
                x.check()
            time.sleep(0.2)

    def _raise_if_rejected(self) -> None:
        """NotPublished when the manager has handled every finished export in the folder and
        rejected the newest of them: no version is on its way until training exports again."""
        ready = sorted(e.name for e in self.exports.iterdir() if (e / "READY").is_file()) if self.exports.is_dir() else []
        if not ready:
            return
        reasons = {str(r.get("export_id")): str(r.get("reason")) for r in self.repo.rejected()}
        if ready[-1] in reasons and set(ready) <= self.repo.processed_exports():
            raise NotPublished(
                f"the model manager rejected export {ready[-1]}, the newest, and has no other to publish:"
                f" {reasons[ready[-1]]} (every rejection:"
                f" boundless model list --repo {self.repo.root} --model-name {self.model_name})"
            )

    @property
    def client(self) -> PredictClient:
        if self._client is None:
            self._client = PredictClient(self.serving.address, self.model_name)
        return self._client

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        for x in reversed(self.daemons):
            x.stop()
        self.daemons = []
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


@contextmanager
def local_platform(shards: int = 2, work_dir: str | Path | None = None, model_name: str = "ctr") -> Iterator[LocalPlatform]:
    """A LocalPlatform for a `with` block, stopped at its end (its folder removed unless
    `work_dir` was given)."""
    platform = LocalPlatform(shards, work_dir, model_name)
    try:
        yield platform
    finally:
        platform.stop()
