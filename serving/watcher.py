"""Follows the repository's policy: loads the target version in the background and swaps it
in with one reference assignment, so in-flight requests finish on the model they started on."""

from __future__ import annotations

import logging
import threading

from ctr import modelfile
from modelmgr.repository import Repository
from serving import metrics
from serving.model import ServableModel, load

log = logging.getLogger("serving")


class ModelWatcher:
    def __init__(self, repo: Repository, poll_s: float) -> None:
        self.repo = repo
        self.poll_s = poll_s
        self.current: ServableModel | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="model-watcher", daemon=True)
        self._failed: set[int] = set()

    def start(self) -> None:
        self.refresh()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.refresh()
            except Exception:  # a bad version must not stop the watcher; keep serving the old one
                log.exception("model refresh failed")

    def refresh(self) -> None:
        target = self.repo.target()
        if target is None or (self.current is not None and self.current.version == target) or target in self._failed:
            return
        try:
            model = self._load(target)
        except (OSError, ValueError, KeyError) as e:
            self._failed.add(target)
            metrics.LOAD_FAILURES.inc()
            log.error(
                "cannot load version %d: %s; still serving %s", target, e, self.current.version if self.current else "nothing"
            )
            return
        previous = self.current
        self.current = model
        metrics.VERSION.set(model.version)
        metrics.KEYS.set(model.keys)
        log.info(
            "serving %s version %d (base %d, %d deltas, %d keys)%s",
            model.name,
            model.version,
            model.base_version,
            len(model.chain),
            model.keys,
            f", replaced {previous.version}" if previous else "",
        )

    def _load(self, version: int) -> ServableModel:
        manifest = self.repo.manifest(version)
        base = int(manifest["base_version"])
        chain = [(self.repo.path(v), self.repo.manifest(v)) for v in manifest["delta_chain"]]
        for d, m in [(self.repo.path(base), self.repo.manifest(base)), *chain]:
            for f in m["files"]:
                if f["role"] == "dense":  # safetensors: no BLMF header; its sha256 is the check
                    if modelfile.sha256_file(d / f["name"]) != f["sha256"]:
                        raise ValueError(f"{d / f['name']}: sha256 does not match the manifest")
                else:
                    modelfile.verify(d / f["name"])
        return load(self.repo.path(version), manifest, self.repo.manifest(base), self.repo.path(base), chain, self.current)
