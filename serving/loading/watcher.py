"""Follows the repository's policy: loads the target version in the background and swaps it
in with one reference assignment, so in-flight requests finish on the model they started on.
TF Serving's split: the Source is the repository's policy (its target), the Manager's rulings
are pure (serving.loading.manager), the Loader loads one version (serving.loading.loader).

A version is loaded from serving's own checked copies of its files (serving.loading.local_copies),
after its chain's manifest checksums are checked; one that fails to load is retried with
a growing delay (up to a minute) while the current version keeps serving."""

from __future__ import annotations

import collections
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ctr.repository.schemas import LabelEntry
from ctr.repository.versions import Policy, Repository
from serving import metrics
from serving.config import DnnBatching
from serving.loading.loader import OverBudget, VersionLoader
from serving.loading.local_copies import LocalCopies
from serving.loading.manager import Backoff, Idle, LoadState, failed, loaded, next_action
from serving.loading.servable import NO_BATCHING, ServableModel
from serving.loading.shard_part import WHOLE, ShardPart
from serving.loading.swap_warmup import warmup_requests
from serving.request.encoding import DecodedRequest
from serving.scoring.parallel import SERIAL, Splitter

WAITING_LOG_S = 30.0  # how often serving says it has no version yet
LABEL_RETRY_S = 30.0  # how long a labelled version that failed to load waits before the next try
STABLE = "stable"  # the label of the policy's version
WARM_REQUESTS = 8  # recent requests a new version scores before it takes over
UNREACHED_LOG_S = 60.0  # an unreachable repository is logged again after this long
SPARE_WAIT_S = 0.05  # how long a load waits for the last request on the retired version

log = logging.getLogger("serving")


class NotLoaded(LookupError):
    """A request named a label or a version this server has not loaded."""


def unit_of(key: str, salt: str = "") -> float:
    """A stable number in [0, 1) for a key: the same in every process and after restarts."""
    digest = hashlib.blake2b(f"{salt}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


def route_of(key: str, labels: dict[str, LabelEntry]) -> str:
    """The label a routing key goes to: labels take consecutive shares of [0, 1) in name
    order; the rest is the stable version's."""
    u = unit_of(key)
    edge = 0.0
    for label in sorted(labels):
        edge += labels[label].share
        if u < edge:
            return label
    return STABLE


class ModelWatcher:
    def __init__(
        self,
        repo: Repository,
        poll_s: float,
        copies: LocalCopies | None = None,
        splitter: Splitter = SERIAL,
        part: ShardPart = WHOLE,
        batching: DnnBatching = NO_BATCHING,
        memory_budget: int = 0,
    ) -> None:
        self.repo = repo
        self.batching = batching
        self.memory_budget = memory_budget  # bytes a version's files may take (0: no budget)
        self.last_error = ""  # why the last version tried was not loaded (ModelStatus reports it)
        self.labels: dict[str, LabelEntry] = {}  # ROUTING.json as last read
        # the serving policy as last read: ModelStatus answers from it, never from the store,
        # whose calls can hang (an S3 endpoint that stops answering) and would hold the
        # server's threads that Predict needs
        self.policy = Policy("latest")
        self.labelled: dict[str, ServableModel] = {}  # label -> its loaded version
        self._label_failed: dict[int, float] = {}  # version -> when its load failed (retried after LABEL_RETRY_S)
        self.splitter = splitter
        self.part = part
        self.copies = copies or LocalCopies()
        self.poll_s = poll_s
        self.current: ServableModel | None = None
        self._retired: ServableModel | None = None  # the version current replaced: its overlay is the spare
        self._use_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="model-watcher", daemon=True)
        self._state = LoadState()  # what the Manager (serving.loading.manager) decides from
        self._recent: collections.deque[DecodedRequest] = collections.deque(maxlen=WARM_REQUESTS)
        self.on_switch: Callable[[], None] = lambda: None  # after each version takes over (server.py: health)

    def remember(self, req: DecodedRequest) -> None:
        """Keeps a recent request, to warm the next version with before it takes over."""
        self._recent.append(req)

    def warm(self, model: ServableModel) -> int:
        """Scores the recent requests on a version not yet serving: its kernels compile and the
        pages of the keys in demand come in before the first request, not during it. With no
        recent request (the process's first version), small ones over its fields
        (serving.loading.swap_warmup): their keys are not in demand, but the kernels are."""
        warmed = 0
        recent = list(self._recent)
        if not recent:
            try:
                recent = warmup_requests(model)
            except Exception:  # noqa: BLE001 - a version that cannot be warmed is still served
                log.warning("version %d: cannot build warm-up requests", model.version, exc_info=True)
        for req in recent:
            try:
                if model.part == WHOLE:
                    model.score(req)
                elif model.family.partial_sums:  # a shard's Partial calls
                    model.partial(req)
                else:
                    model.rows(req.keys)
                warmed += 1
            except Exception:  # noqa: BLE001 - a request the new version cannot score just does not warm it
                log.debug("a recent request did not warm version %d", model.version, exc_info=True)
        return warmed

    @contextmanager
    def use(self, routing_key: str = "") -> Iterator[ServableModel | None]:
        """The version a request scores with, counted as in use until the block ends (a
        retired version's overlay is reused only once no request holds it); the request
        counts as in flight for the scoring threads (serving.scoring.parallel.Splitter.request)."""
        with self.use_routed(routing_key) as (_, model):
            yield model

    @contextmanager
    def use_routed(self, routing_key: str = "", label: str = "", version: int = 0) -> Iterator[tuple[str, ServableModel | None]]:
        """use(), with the label that routed the request: a label's version when the key's
        stable hash falls in its share (route_of), else "stable", the policy's version. A
        request that names a label or a version gets it, or NotLoaded naming what is loaded."""
        with self._use_lock:
            label, model = self._named(label, version) if label or version else self._routed(routing_key)
            if model is not None:
                model.active += 1
        try:
            with self.splitter.request():
                yield label, model
        finally:
            if model is not None:
                with self._use_lock:
                    model.active -= 1

    def routed(self, routing_key: str = "") -> tuple[str, ServableModel | None]:
        """The (label, version) a request with this key would score with now, not counted in
        use (REST encodes with that version's transform, then names it)."""
        with self._use_lock:
            return self._routed(routing_key)

    def _routed(self, routing_key: str) -> tuple[str, ServableModel | None]:
        label = route_of(routing_key, self.labels) if routing_key and self.labels else STABLE
        model = self.labelled.get(label) if label != STABLE else None
        return (label, model) if model is not None else (STABLE, self.current)

    def loaded(self) -> list[tuple[str, ServableModel]]:
        """(label, version) of every version this watcher serves: the stable one first."""
        stable = [(STABLE, self.current)] if self.current is not None else []
        return stable + sorted(self.labelled.items(), key=lambda item: item[0])

    def named(self, label: str, version: int) -> tuple[str, ServableModel]:
        """The loaded version a label or number names (NotLoaded: none), not counted in use."""
        with self._use_lock:
            return self._named(label, version)

    def _named(self, label: str, version: int) -> tuple[str, ServableModel]:
        """The loaded version a request names by label, by number, or both (under _use_lock)."""
        found = [(name, m) for name, m in self.loaded() if (not label or name == label) and (not version or m.version == version)]
        if not found:
            asked = " ".join(p for p in (f"label {label!r}" if label else "", f"version {version}" if version else "") if p)
            loaded = ", ".join(f"{name} {m.version}" for name, m in self.loaded()) or "none yet"
            raise NotLoaded(f"model {self.repo.model!r}: {asked} is not loaded here (loaded: {loaded})")
        return found[0]

    def shadows(self, routing_key: str, count: int) -> list[tuple[str, ServableModel]]:
        """The labelled versions that also score this request off its path: each label with
        a shadow share takes the requests whose key (or, without one, request count) falls
        in it."""
        out = []
        for label, entry in self.labels.items():
            model = self.labelled.get(label)
            if entry.shadow > 0 and model is not None and unit_of(routing_key or str(count), label) < entry.shadow:
                out.append((label, model))
        return out

    def _spare(self) -> ServableModel | None:
        """The retired version, once no request uses it (waits a little; None if it stays busy
        or a label still serves it: its overlay must not change under the label)."""
        retired = self._retired
        if retired is not None and any(m is retired for m in self.labelled.values()):
            self._retired = None
            return None
        deadline = time.monotonic() + SPARE_WAIT_S
        while retired is not None and time.monotonic() < deadline:
            with self._use_lock:
                if retired.active == 0:
                    self._retired = None
                    return retired
            time.sleep(0.001)
        return None

    def start(self) -> None:
        try:
            self.refresh()
        except OSError as e:  # the repository is not reachable yet (an S3 endpoint still starting)
            log.error("model %r: %s; serving nothing until it can be read, looked at every %g s", self.repo.model, e, self.poll_s)
            self._unreached = (str(e), time.monotonic())  # the polls that follow say it again in a minute, not at once
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.copies.close()

    _said_waiting = float("-inf")
    _unreached: tuple[str, float] | None = None  # the last refresh error logged, and when

    def wake(self) -> None:
        """Looks at the policy now (the manager says something changed)."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.poll_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.refresh()
                if self._unreached is not None:
                    log.info("model %r: the repository is read again", self.repo.model)
                    self._unreached = None
            except OSError as e:  # the store cannot be reached: a line when it changes or a minute on, no traceback
                said = self._unreached
                if said is None or said[0] != str(e) or time.monotonic() - said[1] > UNREACHED_LOG_S:
                    log.error("model %r: refresh failed: %s; serving what is loaded", self.repo.model, e)
                    self._unreached = (str(e), time.monotonic())
            except Exception:  # a bad version must not stop the watcher; keep serving the old one
                log.exception("model refresh failed")

    def refresh(self) -> None:
        """One look at the policy, then at the version labels."""
        try:
            self._refresh_policy()
        finally:
            self._refresh_labels()

    def _refresh_labels(self) -> None:
        """Loads the versions ROUTING.json labels (a label on the current version shares it),
        drops the labels removed; a version that fails to load is retried after
        LABEL_RETRY_S, and its label routes to the stable version meanwhile."""
        labels = self.repo.routing()
        if labels == self.labels and all(label in self.labelled for label in labels):
            return
        loaded: dict[str, ServableModel] = {}
        for label, entry in labels.items():
            have = self.labelled.get(label)
            current = self.current
            if have is not None and have.version == entry.version:
                loaded[label] = have
            elif current is not None and current.version == entry.version:
                loaded[label] = current
            elif time.monotonic() - self._label_failed.get(entry.version, -1e9) > LABEL_RETRY_S:
                try:
                    loader = VersionLoader(self.repo, entry.version, self.copies, self.splitter, self.part, self.batching)
                    loader.check_budget(self.memory_budget)
                    model = loader.load()
                    self.warm(model)
                    loaded[label] = model
                    log.info("label %s: %s version %d loaded", label, self.repo.model, entry.version)
                except Exception as e:  # noqa: BLE001 - a label that cannot load routes to the stable version
                    self._label_failed[entry.version] = time.monotonic()
                    log.error("label %s: cannot load %s version %d: %s", label, self.repo.model, entry.version, e)
        with self._use_lock:
            self.labels, self.labelled = labels, loaded
        self.copies.keep_only(self._kept_versions())

    def _kept_versions(self) -> set[int]:
        """The versions whose copies serving still maps: the current and the labelled ones,
        each with its base and delta chain."""
        kept: set[int] = set()
        for model in (self.current, *self.labelled.values()):
            if model is not None:
                kept |= {model.base_version, *model.chain}
        return kept

    def _refresh_policy(self) -> None:
        """One look: the Source (the policy's target), the Manager's ruling, its execution."""
        policy = self.repo.policy()
        self.policy = policy
        action = next_action(self._state, self.repo.target(policy), time.monotonic())
        if isinstance(action, Idle):
            if action.waiting:
                self._say_waiting()
            return
        if isinstance(action, Backoff):
            return
        try:
            loader = VersionLoader(self.repo, action.version, self.copies, self.splitter, self.part, self.batching)
            loader.check_budget(self.memory_budget)
            model = loader.load(self.current, self._spare())
        except Exception as e:  # noqa: BLE001 - a damaged version must never stop serving the current one
            delay = failed(self._state, action.version, action.failures, time.monotonic(), self.poll_s)
            metrics.LOAD_FAILURES.labels(self.repo.model).inc()
            if isinstance(e, OverBudget):
                metrics.REFUSED_VERSIONS.labels(self.repo.model).inc()
            self.last_error = f"version {action.version}: {e}"
            self.on_switch()  # readiness counts a model that cannot load as settled, not loading
            log.error(
                "cannot load version %d: %s; still serving %s, trying again in %.0f s",
                action.version,
                e,
                self.current.version if self.current else "nothing",
                delay,
            )
            return
        self._swap(model)

    def _say_waiting(self) -> None:
        now = time.monotonic()
        if now - self._said_waiting > WAITING_LOG_S:  # say why nothing serves, now and then
            self._said_waiting = now
            try:
                others = [m for m in Repository.models_in(self.repo.root) if m != self.repo.model]
            except Exception:  # noqa: BLE001 - an unreachable repository: the warning says the rest
                others = []
            log.warning(
                "no version of model %r in %s yet: waiting for the model manager to publish one (check --repo and"
                " --model-name)%s",
                self.repo.model,
                self.repo.root,
                f"; the repository holds {', '.join(repr(m) for m in others)}" if others else "",
            )

    def _swap(self, model: ServableModel) -> None:
        """Warms the loaded version and puts it in place of the current one."""
        self.warm(model)
        previous = self.current
        with self._use_lock:
            self.current = model
        loaded(self._state, model.version)
        self._retired = previous
        self.on_switch()
        self.copies.keep_only(self._kept_versions())
        metrics.VERSION.labels(model.name).set(model.version)
        metrics.KEYS.labels(model.name).set(model.keys)
        self.last_error = ""
        log.info(
            "serving %s version %d (base %d, %d deltas, %d keys)%s",
            model.name,
            model.version,
            model.base_version,
            len(model.chain),
            model.keys,
            f", replaced {previous.version}" if previous else "",
        )
