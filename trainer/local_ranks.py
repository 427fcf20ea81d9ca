"""`boundless train --workers W`: W ranks of one group on this host (docs/design/ranks.md).

This process is their supervisor, the part torchrun's agent or a pod's restart plays for
ranks on many hosts. It serves `--ps local` shards to them over loopback gRPC, picks the
rendezvous port, starts each rank (forked from the warm fork server, trainer.preload),
passes a stop on, and starts every rank again when one exits with EXIT_RESTART (a rank or
a shard was lost: all take up at the last common cut). The ranks do the rest, as ranks on
many hosts do: rank 0 drives the cuts, the exports and the merged progress
(trainer.run.loop). With `--local-aggregate` the ranks also share a host's push sums
through shared memory this process makes (ps.client.local_aggregate).

The settings the ranks would each refuse (the source, the codecs, the schema) are checked
here first, so a mistake is said once; a rank that fails on its own later ends the run with
its exit code.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import replace
from typing import Any

from ctr.runtime import daemon
from ctr.runtime.config import ConfigError
from trainer.config import LocalShardSettings, TrainerConfig
from trainer.fork_server import start_fork_server
from trainer.run.rendezvous import EXIT_RESTART

log = logging.getLogger("trainer")

MAX_RESTARTS = 10  # group restarts in one run before the supervisor gives up
LEAVE_S = 60.0  # how long the others may take to notice a lost rank and exit


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def rank_conf(conf: TrainerConfig, rank: int, addresses: list[str], master: str) -> TrainerConfig:
    """Rank `rank`'s settings: a rank of a group of --workers on the given shards. Rank 0
    keeps the ports and the ready file; the others serve nothing (rank 0 reports for all)."""
    world = conf.parallel.workers
    parallel = replace(conf.parallel, workers=1, rank=rank, world_size=world, master=master, local_aggregate=False)
    # in-process shards, served to the ranks over loopback: `auto` stays uncompressed, as with one process
    access = replace(conf.ps_access, ps=",".join(addresses))
    if conf.local:
        push = "none" if access.push_codec == "auto" else access.push_codec
        access = replace(access, push_codec=push, pull_codec="raw" if access.pull_codec == "auto" else access.pull_codec)
    lead = rank == 0
    return replace(
        conf,
        parallel=parallel,
        ps_access=access,
        local_ps=LocalShardSettings(),
        port=conf.port if lead else -1,
        metrics_port=conf.metrics_port if lead else -1,
        ready_file=conf.ready_file if lead else None,
    )


def rank_main(conf: TrainerConfig, aggregation: Any, supervisor: int) -> None:
    """A rank process: trains as `boundless train --rank I` would, and ends when its
    supervisor is gone (its pushes would race the next run's)."""
    threading.Thread(target=_watch, args=(supervisor,), daemon=True).start()
    os.environ["LOCAL_RANK"] = str(conf.parallel.rank)  # its GPU among the host's (trainer.step.device)
    _share_cores(conf.parallel.world_size)
    from trainer import daemon as trainer_daemon
    from trainer.input.bad_input import BadInput

    try:
        code = trainer_daemon.train(conf, aggregation=aggregation, name=f"trainer-r{conf.parallel.rank}")
    except BadInput as e:
        print(f"boundless train: rank {conf.parallel.rank}: {e}", file=sys.stderr)
        code = 1
    except (ValueError, OSError) as e:  # ConfigError among them, as the command reports it
        print(f"boundless train: rank {conf.parallel.rank}: error: {e}", file=sys.stderr)
        code = 2
    except SystemExit as e:  # EXIT_RESTART, or a message
        if not isinstance(e.code, int):
            print(f"boundless train: rank {conf.parallel.rank}: {e.code}", file=sys.stderr)
        code = e.code if isinstance(e.code, int) else 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # not through multiprocessing's exit path: gRPC and gloo threads may still run


def torch_threads(local_ranks: int, cores: int, named: str | None) -> int:
    """A rank's torch threads: the host's cores shared among its ranks, as torchrun's one
    thread a rank does for several; OMP_NUM_THREADS when the user set it."""
    if named and named.strip().isdigit() and int(named) > 0:
        return int(named)
    return max(1, cores // max(1, local_ranks))


def _share_cores(local_ranks: int) -> None:
    """Each rank's torch uses its share of the cores. torch's default is every core, and two
    ranks that each spin two OpenMP threads on two cores took 28 ms for a low-rank round of
    DeepFM's MLP that takes 5 with one thread each (docs/design/ranks.md)."""
    import torch  # loaded already: the ranks' group (trainer.run.group) imports it

    torch.set_num_threads(torch_threads(local_ranks, len(os.sched_getaffinity(0)), os.environ.get("OMP_NUM_THREADS")))


def _watch(supervisor: int) -> None:
    while daemon.process_alive(supervisor):
        time.sleep(0.2)
    os._exit(1)


class RanksFailed(SystemExit):
    pass


def supervise(conf: TrainerConfig) -> int:
    """Runs --workers ranks to their end; the exit code of the run."""
    log = daemon.setup_logging("trainer", conf.log_level)
    if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        raise ConfigError(
            f"--workers {conf.parallel.workers}: this process is one rank of WORLD_SIZE {os.environ['WORLD_SIZE']}"
            " (torchrun, a pod); --workers starts several ranks itself: drop one or the other"
        )
    ctx = start_fork_server()  # its warm-up runs while the settings are checked here
    from trainer.daemon import check_codecs, check_source, load_schema

    check_source(conf)  # refused once, here, rather than by every rank
    check_codecs(conf)
    load_schema(conf)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    client, served = None, None
    if conf.local:  # the shards live here and the ranks reach them over loopback gRPC
        from trainer.daemon import connect

        client = connect(conf)
        served = client.serve_local()
        addresses = list(served.addresses)
    else:
        addresses = conf.ps_access.addresses()
    try:
        return _run(conf, ctx, addresses, stop, log)
    finally:
        if served is not None:
            served.stop()
        if client is not None:
            client.close()


def _run(conf: TrainerConfig, ctx: Any, addresses: list[str], stop: threading.Event, log: logging.Logger) -> int:
    world = conf.parallel.workers
    for attempt in range(MAX_RESTARTS + 1):
        plan = None
        if conf.parallel.local_aggregate:  # fresh per start: a lost rank may leave the barrier broken
            from ps.client.local_aggregate import AggregationPlan

            plan = AggregationPlan.create(ctx, world, len(addresses), conf.parallel.local_aggregate_mb << 20)
        master = f"127.0.0.1:{free_port()}"
        procs = []
        for rank in range(world):
            p = ctx.Process(
                target=rank_main, args=(rank_conf(conf, rank, addresses, master), plan, os.getpid()), name=f"trainer-r{rank}"
            )
            p.start()
            procs.append(p)
        how = "started" if attempt == 0 else "started again"
        shards = ",".join(addresses)
        log.info("%s %d local ranks (staleness %d) meeting at %s, on %s", how, world, conf.parallel.staleness, master, shards)
        try:
            codes = _wait(procs, stop)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                p.join(timeout=30)
            if plan is not None:
                plan.release()
        # a rank that failed on its own (a bad setting, bad input, a bug) ends the run; one
        # killed by a signal, or told a rank or shard was lost (EXIT_RESTART), is started again
        fatal = [(i, c) for i, c in enumerate(codes) if c > 0 and c != EXIT_RESTART]
        if fatal:  # the run ends with that rank's code (2: a setting), as one process would
            log.error("rank %d exited with code %d; its log is above", *fatal[0])
            return fatal[0][1]
        if all(c == 0 for c in codes):
            return 0
        if stop.is_set():
            log.warning("stopped while a rank was lost; the next start takes up from the last checkpoint cut")
            return 0
        log.warning(
            "rank(s) %s lost (exit codes %s); every rank starts again at the last common checkpoint cut",
            [i for i, c in enumerate(codes) if c != 0],
            codes,
        )
    raise RanksFailed(f"trainer: the ranks were restarted {MAX_RESTARTS} times; giving up")


def _wait(procs: list[Any], stop: threading.Event) -> list[int]:
    """Every rank's exit code. A stop goes on to every rank (SIGTERM: each finishes its
    batch and the group ends at the same round); once one rank fails, the others are given
    LEAVE_S to notice and exit before they are killed."""
    forwarded = False
    failed_at: float | None = None
    while any(p.is_alive() for p in procs):
        if stop.is_set() and not forwarded:
            forwarded = True
            for p in procs:
                if p.is_alive() and p.pid is not None:
                    os.kill(p.pid, signal.SIGTERM)
        if failed_at is None and any(p.exitcode not in (None, 0) for p in procs):
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > LEAVE_S:
            for p in procs:
                if p.is_alive():
                    p.kill()
        time.sleep(0.05)
    return [int(p.exitcode) if p.exitcode is not None else 1 for p in procs]
