"""The daemon shell every daemon shares: logging, the gRPC server (health, reflection when
enabled, every call counted and timed), the Prometheus endpoint, the ready file that reports
bound ports, and a stop on SIGTERM or SIGINT with a grace period.

A served daemon's health starts NOT_SERVING and turns SERVING when the daemon says it is
ready (`Served.ready`): a probe never sees a server ready before it can answer."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import start_http_server

from ctr.runtime import ports

if TYPE_CHECKING:  # gRPC loads only in processes that serve it (not `train --ps local`)
    import grpc
    from grpc_health.v1 import health

    from ctr.runtime.auth import Policy
    from ctr.runtime.security import Identity, SecurityConfig
    from ctr.runtime.server_config import ServerConfig

MAX_MESSAGE_BYTES = 64 << 20
# a PS pull of a wide table (FFM on Criteo: 5 KB of state per key) at the default batch of
# 16384 lines replies with ~110 MB; the PS sits inside the cluster, so it allows 1 GiB
PS_MAX_MESSAGE_BYTES = 1 << 30


def setup_logging(name: str, level: str = "INFO") -> logging.Logger:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format=f"%(asctime)s {name}[%(process)d] %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    return logging.getLogger(name)


def grpc_server(
    host: str,
    port: int,
    workers: int,
    register: Callable[[grpc.Server], None],
    service_names: Sequence[str],
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    max_concurrent: int | None = None,
    reflection: bool = False,
    identity: Identity | None = None,
    tokens: dict[str, str] | None = None,
    policy: Policy | None = None,
    daemon: str = "",
    ready: bool = True,
    share_port: bool = False,
) -> tuple[grpc.Server, int, health.HealthServicer]:
    """A started server with a health service, and reflection only when asked for (it
    lists every service to whoever connects); returns (server, bound port, health).
    Calls past `max_concurrent` in flight are refused with RESOURCE_EXHAUSTED, and so are
    messages over `max_message_bytes`: what a flood of requests can hold stays bounded.
    identity: TLS with its certificate (mutual under client_auth); tokens and policy: the
    bearer tokens the policy's methods need (ctr.runtime.auth). daemon: names it in the
    per-call metrics (ctr.runtime.rpc_metrics); ready=False: health starts NOT_SERVING.
    share_port: bind with SO_REUSEPORT, beside the other processes of one serving group;
    otherwise the port is this process's alone (ctr.runtime.ports)."""
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection as grpc_reflection

    from ctr.runtime.auth import TokenAuth
    from ctr.runtime.rpc_metrics import RpcMetrics

    interceptors: list[grpc.ServerInterceptor] = [RpcMetrics(daemon)] if daemon else []  # first: refused calls count too
    if tokens is not None and policy is not None:
        interceptors.append(TokenAuth(tokens, policy))
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers),
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.so_reuseport", 1 if share_port else 0),
        ],
        maximum_concurrent_rpcs=max_concurrent,
    )
    register(server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if reflection:
        grpc_reflection.enable_server_reflection((*service_names, grpc_reflection.SERVICE_NAME, health.SERVICE_NAME), server)
    creds = identity.server_credentials() if identity is not None else None
    address = f"{host}:{port}"
    try:
        bound = server.add_secure_port(address, creds) if creds is not None else server.add_insecure_port(address)
    except RuntimeError:  # grpcio's "Failed to bind": say why, and name the flag
        bound = 0
    if bound == 0:
        ports.check_free(host, port)  # raises where another process listens there
        raise OSError(f"--port {port}: cannot bind the gRPC server on {host}")
    status = health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in (*service_names, ""):
        health_servicer.set(name, status)  # before the first call can ask
    server.start()
    return server, bound, health_servicer


@dataclass
class Served:
    """A daemon's started gRPC server: its bound port, and its health to turn SERVING."""

    server: grpc.Server
    port: int
    health: health.HealthServicer
    service_names: tuple[str, ...]

    def ready(self, *names: str) -> None:
        """SERVING for `names` (default: every service and the server as a whole)."""
        self._set(names or (*self.service_names, ""), True)

    def not_ready(self, *names: str) -> None:
        self._set(names or (*self.service_names, ""), False)

    def _set(self, names: tuple[str, ...], serving: bool) -> None:
        from grpc_health.v1 import health_pb2

        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in names:
            self.health.set(name, status)

    def stop(self, grace_s: float) -> None:
        """NOT_SERVING first, so probes see the end; calls in flight get `grace_s` to finish."""
        self.health.enter_graceful_shutdown()
        self.server.stop(grace=grace_s).wait()


def serve(
    conf: ServerConfig,
    daemon: str,
    register: Callable[[grpc.Server], None],
    service_names: Sequence[str],
    guarded: dict[str, Any],
    max_message_bytes: int = MAX_MESSAGE_BYTES,
    share_port: bool = False,
) -> Served:
    """A daemon's gRPC server from its config: TLS and tokens (`guarded`, what guard()
    returned), threads, limits, reflection, per-call metrics; its health NOT_SERVING until
    the daemon calls ready()."""
    server, port, health_servicer = grpc_server(
        conf.host,
        conf.port,
        conf.grpc_threads,
        register,
        service_names,
        max_message_bytes,
        max_concurrent=conf.max_concurrent,
        reflection=conf.reflection,
        daemon=daemon,
        ready=False,
        share_port=share_port,
        **guarded,
    )
    return Served(server, port, health_servicer, tuple(service_names))


def guard(conf: SecurityConfig, host: str, policy: Policy | None = None) -> dict[str, Any]:
    """Installs this process's identity for every channel it opens, and returns what
    grpc_server takes to serve with it: TLS, and the tokens `policy`'s methods need."""
    from ctr.runtime.security import Identity, install

    identity = Identity.of(conf)
    install(identity)
    tokens = None
    if policy is not None:  # a client-only process (a trainer on --ps local) need not load gRPC
        from ctr.runtime.auth import load_tokens

        tokens = load_tokens(conf.accepted_tokens_file)
    if tokens is not None and identity.cert is None and host not in ("127.0.0.1", "localhost", "::1"):
        logging.getLogger("auth").warning("bearer tokens travel in the clear: %s serves without TLS", host)
    return {"identity": identity, "tokens": tokens, "policy": policy}


def metrics_server(host: str, port: int) -> int:
    """Starts the Prometheus HTTP endpoint; returns its bound port (port 0 picks a free one,
    -1 disables it and returns -1, on every daemon alike)."""
    if port < 0:
        return -1
    try:
        server, _ = start_http_server(port, addr=host)
    except OSError as e:
        raise OSError(f"--metrics-port {port} on {host}: {e.strerror or e}") from None
    return int(server.server_port)


def write_ready_file(path: str | None, announce: bool = True, **ports: object) -> None:
    """Atomically writes {"pid":..., ports...} so a launcher can find the bound ports, and
    prints it for a supervisor reading stdout (`announce`; not inside a notebook's run)."""
    payload = json.dumps({"pid": os.getpid(), **ports})
    if announce:
        print(payload, flush=True)
    if path:
        tmp = Path(path + ".tmp")
        tmp.write_text(payload)
        os.replace(tmp, path)


def process_alive(pid: int) -> bool:
    """Whether a process with this pid exists here (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_requested() -> threading.Event:
    """An event set on SIGTERM or SIGINT: the one way every daemon learns it should stop."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def wait_for_stop_signal() -> None:
    """Blocks until SIGTERM or SIGINT."""
    stop_requested().wait()
