"""`boundless serve --processes N`: N serving processes behind one port, and the
supervisor that runs them.

One Python process scores one request at a time wherever the GIL is held (protobuf,
decoding's glue, building the reply), so a server of one process gets little from a
second core. The supervisor starts N ordinary serving processes with its own config
(ctr.runtime.config.to_flags), each on the same port: gRPC binds with SO_REUSEPORT, and
the kernel spreads new connections over the processes. They share one folder of checked
copies (serving.loading.local_copies), so a version's mapped files sit once in the page
cache however many processes map them. Each process watches the repository and swaps on
its own; a request is scored by one version, the one its answer reports.

The supervisor loads no model. It waits for the first process to bind (the port it
picked, when --port is 0, and its REST port), starts the others on those ports, serves one metrics endpoint
merging theirs (serving.merged_metrics), restarts a process that exits (the others keep
serving: only the requests the dead one held fail), and on SIGTERM stops them all. Its
processes die with it (PR_SET_PDEATHSIG), so a supervisor killed with -9 leaves no
server behind on the port.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ctr.runtime import config as cfg
from ctr.runtime import daemon, ports
from ctr.runtime.parent_death import sigterm_when_parent_dies
from serving.config import ServingConfig
from serving.loading.local_copies import owned_prefix, remove_orphans
from serving.merged_metrics import serve_merged

START_TIMEOUT_S = 600.0  # a process is ready once its first version is loaded and warmed
RESTART_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)  # after consecutive quick exits
STEADY_S = 60.0  # a process that ran this long restarts without waiting


def usable_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup v2 CPU quota
    (a container's limit, which os.cpu_count() does not see), rounded up."""
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def process_count(conf: ServingConfig) -> int:
    return conf.processes or usable_cores()


def child_config(conf: ServingConfig, count: int, port: int, rest_port: int, ready: Path, copies: Path) -> ServingConfig:
    """One process's config: the supervisor's on `port`, with its own ready file and
    metrics port, the shared copies, and (unless set) an equal share of the cores for its
    scoring threads, which then never spin (a spinning thread takes a core from a
    neighbour process)."""
    threads = conf.score_threads or max(1, usable_cores() // count)
    return replace(
        conf,
        processes=1,
        port=port,
        rest_port=rest_port,
        metrics_port=0 if conf.metrics_port >= 0 else -1,
        ready_file=str(ready),
        copies_dir=str(copies),
        port_shared=True,
        score_threads=threads,
        score_spin_us=conf.score_spin_us if threads > 1 else 0.0,
    )


@dataclass
class Worker:
    index: int
    proc: subprocess.Popen[bytes]
    ready: Path
    started: float
    metrics_url: str = ""
    quick_exits: int = 0

    def wait_ready(self, timeout: float) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        while not self.ready.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"serving process {self.index} exited with code {self.proc.returncode} before it was ready")
            if time.monotonic() > deadline:
                raise RuntimeError(f"serving process {self.index} not ready after {timeout:.0f} s")
            time.sleep(0.05)
        ready: dict[str, int] = json.loads(self.ready.read_text())
        return ready


class ProcessGroup:
    def __init__(self, conf: ServingConfig, log: logging.Logger) -> None:
        self.conf = conf
        self.log = log
        self.count = process_count(conf)
        self.run_dir = Path(tempfile.mkdtemp(prefix="boundless-serving-group-"))
        # shared copies: the given folder, or one named after this process, so that the
        # next server removes it if this one is killed (serving.loading.local_copies)
        if conf.copies_dir:
            self.copies, self._owns_copies = Path(conf.copies_dir), False
        else:
            remove_orphans(Path(tempfile.gettempdir()))
            self.copies, self._owns_copies = Path(tempfile.mkdtemp(prefix=owned_prefix())), True
        self.port = conf.port
        self.rest_port = conf.rest_port
        self.workers: dict[int, Worker] = {}
        self._lock = threading.Lock()

    def start(self) -> int:
        """Starts every process; returns the port they share. A port another process
        listens on is refused (OSError): the group's processes bind with SO_REUSEPORT, which
        would let them join another server of the same user on it."""
        ports.check_free(self.conf.host, self.port)
        if self.rest_port > 0:
            ports.check_free(self.conf.host, self.rest_port, "--rest-port")
        first = self._spawn(0)
        ready = first.wait_ready(START_TIMEOUT_S)
        self.port, self.rest_port = int(ready["grpc_port"]), int(ready.get("rest_port", -1))
        self._ready(first)
        rest = [self._spawn(i) for i in range(1, self.count)]
        for w in rest:
            w.wait_ready(START_TIMEOUT_S)
            self._ready(w)
        return self.port

    def _spawn(self, index: int) -> Worker:
        ready = self.run_dir / f"process-{index}.ready.json"
        ready.unlink(missing_ok=True)
        conf = child_config(self.conf, self.count, self.port, self.rest_port, ready, self.copies)
        proc = subprocess.Popen(
            [sys.executable, "-m", "boundless", "serve", *cfg.to_flags(conf)],
            stdin=subprocess.DEVNULL,
            preexec_fn=sigterm_when_parent_dies,  # noqa: PLW1509 - only prctl, before exec
        )
        worker = Worker(index, proc, ready, time.monotonic())
        with self._lock:
            self.workers[index] = worker
        self.log.info("serving process %d started (pid %d)", index, proc.pid)
        return worker

    def _ready(self, worker: Worker) -> None:
        ready = json.loads(worker.ready.read_text())
        port = int(ready.get("metrics_port", -1))
        worker.metrics_url = f"http://{self._metrics_host()}:{port}/metrics" if port > 0 else ""

    def _metrics_host(self) -> str:
        return "127.0.0.1" if self.conf.host in ("0.0.0.0", "::", "") else self.conf.host

    def metrics_endpoints(self) -> dict[int, str]:
        with self._lock:
            return {i: w.metrics_url for i, w in self.workers.items() if w.metrics_url}

    def pids(self) -> list[int]:
        with self._lock:
            return [w.proc.pid for _, w in sorted(self.workers.items())]

    def watch(self, stop: threading.Event) -> None:
        """Restarts a process that exited, after a pause that grows while it keeps exiting
        soon after it started, until `stop` is set."""
        while not stop.wait(0.2):
            for index, w in list(self.workers.items()):
                code = w.proc.poll()
                if code is None:
                    continue
                quick = time.monotonic() - w.started < STEADY_S
                exits = w.quick_exits + 1 if quick else 0
                pause = RESTART_BACKOFF_S[min(exits, len(RESTART_BACKOFF_S)) - 1] if exits else 0.0
                self.log.warning(
                    "serving process %d (pid %d) exited with code %s; restarting in %.1f s", index, w.proc.pid, code, pause
                )
                if stop.wait(pause):
                    return
                fresh = self._spawn(index)
                fresh.quick_exits = exits
                threading.Thread(target=self._when_ready, args=(fresh,), daemon=True).start()

    def _when_ready(self, worker: Worker) -> None:
        try:
            worker.wait_ready(START_TIMEOUT_S)
            self._ready(worker)
            self.log.info("serving process %d serving again (pid %d)", worker.index, worker.proc.pid)
        except RuntimeError as e:
            self.log.warning("%s", e)

    def stop(self, grace_s: float = 10.0) -> None:
        with self._lock:
            procs = [w.proc for w in self.workers.values()]
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        if self._owns_copies:
            shutil.rmtree(self.copies, ignore_errors=True)


def run_group(conf: ServingConfig) -> int:
    log = daemon.setup_logging("serving", conf.log_level)
    stop = daemon.stop_requested()
    group = ProcessGroup(conf, log)
    try:
        port = group.start()
        metrics_port = serve_merged(conf.host, conf.metrics_port, group.metrics_endpoints)
        log.info(
            "serving %s with %d processes on %s:%d, merged metrics on :%d",
            conf.model_name,
            group.count,
            conf.host,
            port,
            metrics_port,
        )
        daemon.write_ready_file(
            conf.ready_file, grpc_port=port, rest_port=group.rest_port, metrics_port=metrics_port, pids=group.pids()
        )
        group.watch(stop)
    except RuntimeError as e:
        log.error("%s", e)
        return 1
    finally:
        group.stop()
    return 0
