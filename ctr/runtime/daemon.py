"""Process plumbing shared by the daemons: logging, gRPC server with health (and reflection
when enabled),
Prometheus endpoint, the ready file that reports bound ports, and graceful stop on signals."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import start_http_server

if TYPE_CHECKING:  # gRPC loads only in processes that serve it (not `train --ps local`)
    import grpc
    from grpc_health.v1 import health

    from ctr.runtime.auth import Policy
    from ctr.runtime.security import Identity, SecurityConfig

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
) -> tuple[grpc.Server, int, health.HealthServicer]:
    """A started server with a health service, and reflection only when asked for (it
    lists every service to whoever connects); returns (server, bound port, health).
    Calls past `max_concurrent` in flight are refused with RESOURCE_EXHAUSTED, and so are
    messages over `max_message_bytes`: what a flood of requests can hold stays bounded.
    identity: TLS with its certificate (mutual under client_auth); tokens and policy: the
    bearer tokens the policy's methods need (ctr.runtime.auth)."""
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection as grpc_reflection

    from ctr.runtime.auth import TokenAuth

    interceptors = [TokenAuth(tokens, policy)] if tokens is not None and policy is not None else []
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers),
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
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
    bound = server.add_secure_port(address, creds) if creds is not None else server.add_insecure_port(address)
    if bound == 0:
        raise OSError(f"cannot bind gRPC server to {host}:{port}")
    server.start()
    for name in (*service_names, ""):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, bound, health_servicer


def guard(conf: SecurityConfig, host: str, policy: Policy | None = None) -> dict[str, Any]:
    """Installs this process's identity for every channel it opens, and returns what
    grpc_server takes to serve with it: TLS, and the tokens `policy`'s methods need."""
    from ctr.runtime.auth import load_tokens
    from ctr.runtime.security import Identity, install

    identity = Identity.of(conf)
    install(identity)
    tokens = load_tokens(conf.tokens_file) if policy is not None else None
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


def write_ready_file(path: str | None, **ports: object) -> None:
    """Atomically writes {"pid":..., ports...} so a launcher can find the bound ports."""
    payload = json.dumps({"pid": os.getpid(), **ports})
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


def wait_for_stop_signal() -> None:
    """Blocks until SIGTERM or SIGINT."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
