"""Every gRPC call's count (by daemon, method and status code) and latency, recorded by one
server interceptor that every daemon's server carries (ctr.runtime.daemon.grpc_server)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
from prometheus_client import Counter, Histogram

CALLS = Counter("boundless_rpc_calls_total", "gRPC calls served, by daemon, method and status code", ["daemon", "method", "code"])
SECONDS = Histogram(
    "boundless_rpc_seconds",
    "time to serve a gRPC call, by daemon and method",
    ["daemon", "method"],
    buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
)


def _code_of(context: grpc.ServicerContext, failed: bool) -> str:
    code = context.code() if hasattr(context, "code") else None  # set by set_code or abort
    if isinstance(code, grpc.StatusCode):
        return str(code.name)
    return "UNKNOWN" if failed else "OK"


class RpcMetrics(grpc.ServerInterceptor):
    """Wraps each unary call's handler; streaming calls (health Watch) pass untouched."""

    def __init__(self, daemon: str) -> None:
        self.daemon = daemon
        self._timers: dict[str, Any] = {}  # method -> its histogram child (labels() costs a lookup per call)

    def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None], details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        method = str(details.method)  # type: ignore[attr-defined]
        timer = self._timers.get(method)
        if timer is None:
            timer = self._timers.setdefault(method, SECONDS.labels(self.daemon, method))
        behavior = handler.unary_unary
        daemon = self.daemon

        def counted(request: Any, context: grpc.ServicerContext) -> Any:
            start = time.perf_counter()
            failed = True
            try:
                out = behavior(request, context)
                failed = False
                return out
            finally:
                timer.observe(time.perf_counter() - start)
                CALLS.labels(daemon, method, _code_of(context, failed)).inc()

        return grpc.unary_unary_rpc_method_handler(
            counted, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )
