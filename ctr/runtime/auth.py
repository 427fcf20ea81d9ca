"""Bearer tokens with roles, checked by a gRPC server interceptor.

A server given tokens (`accepted_tokens_file`, YAML {token: role}, or BOUNDLESS_TOKENS="token=role,...")
asks every call of a guarded service for `authorization: Bearer <token>` whose role ranks at
least the method's: predict < trainer < admin. Health checks and reflection stay open (the
kubelet probes them). Each refusal is logged (at most once a second per reason) and counted
in boundless_auth_refusals_total.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import grpc
import yaml
from prometheus_client import Counter

from ctr.runtime.security import SecurityError, warn_if_exposed

ROLES = ("predict", "trainer", "admin")
RANK = {r: i for i, r in enumerate(ROLES)}
HEADER = "authorization"

REFUSALS = Counter(
    "boundless_auth_refusals_total", "Calls refused for a missing, unknown or too weak token", ["method", "reason"]
)
log = logging.getLogger("auth")


def load_tokens(path: str | None, environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """token -> role from the file, else from BOUNDLESS_TOKENS; None when neither is set."""
    env = os.environ if environ is None else environ
    if path:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as e:
            raise SecurityError(f"tokens file {path}: {e}") from None
        if not isinstance(loaded, dict) or not loaded:
            raise SecurityError(f"tokens file {path}: expected a non-empty mapping of token: role")
        warn_if_exposed(path, "tokens file")
        pairs = [(str(k), str(v), f"{path}: {k!r}") for k, v in loaded.items()]
    elif env.get("BOUNDLESS_TOKENS"):
        pairs = []
        for i, item in enumerate(env["BOUNDLESS_TOKENS"].split(",")):
            token, sep, role = item.strip().rpartition("=")
            if not sep:
                raise SecurityError(f"BOUNDLESS_TOKENS item {i}: expected token=role")
            pairs.append((token, role, f"BOUNDLESS_TOKENS item {i}"))
    else:
        return None
    out = {}
    for token, role, where in pairs:
        if role not in RANK:
            raise SecurityError(f"{where}: role {role!r} is none of {', '.join(ROLES)}")
        if len(token) < 16:
            raise SecurityError(f"{where}: a token needs at least 16 characters")
        out[token] = role
    return out


def role_of(tokens: Mapping[str, str], presented: str) -> str | None:
    """The role of a presented token, compared in constant time."""
    found = None
    for token, role in tokens.items():
        if hmac.compare_digest(token.encode(), presented.encode()):
            found = role
    return found


# method full name (/package.Service/Method) -> the least role it needs, or None: open
Policy = Callable[[str], str | None]


def service_policy(needs: Mapping[str, str]) -> Policy:
    """A policy from {"/pkg.Service/" or "/pkg.Service/Method": role}; the longest match wins."""

    def policy(method: str) -> str | None:
        best: tuple[int, str | None] = (-1, None)
        for prefix, role in needs.items():
            if method.startswith(prefix) and len(prefix) > best[0]:
                best = (len(prefix), role)
        return best[1]

    return policy


class TokenAuth(grpc.ServerInterceptor):
    """Refuses calls without a strong enough token: UNAUTHENTICATED (none, or unknown) or
    PERMISSION_DENIED (a role below the method's)."""

    def __init__(self, tokens: Mapping[str, str], policy: Policy) -> None:
        self.tokens = dict(tokens)
        self.policy = policy
        self._logged: dict[str, float] = {}
        self._lock = threading.Lock()

    def intercept_service(self, continuation: Callable[[Any], Any], details: grpc.HandlerCallDetails) -> Any:
        method = details.method
        needed = self.policy(method)
        if needed is None:
            return continuation(details)
        presented = ""
        for key, value in details.invocation_metadata or ():
            if key == HEADER and isinstance(value, str) and value.startswith("Bearer "):
                presented = value[len("Bearer ") :]
        if not presented:
            return self._refuse(continuation(details), method, "missing", grpc.StatusCode.UNAUTHENTICATED, "no bearer token")
        role = role_of(self.tokens, presented)
        if role is None:
            return self._refuse(continuation(details), method, "unknown", grpc.StatusCode.UNAUTHENTICATED, "unknown token")
        if RANK[role] < RANK[needed]:
            why = f"role {role} may not call {method} (needs {needed})"
            return self._refuse(continuation(details), method, "role", grpc.StatusCode.PERMISSION_DENIED, why)
        return continuation(details)

    def _refuse(self, handler: Any, method: str, reason: str, code: grpc.StatusCode, why: str) -> Any:
        REFUSALS.labels(method, reason).inc()
        now = time.monotonic()
        with self._lock:
            if now - self._logged.get(reason, -1e9) >= 1.0:
                self._logged[reason] = now
                log.warning("refused %s: %s", method, why)

        def abort(request: Any, context: grpc.ServicerContext) -> Any:
            context.abort(code, why)

        if handler is None:
            return None
        args = (abort, handler.request_deserializer, handler.response_serializer)
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(*args)
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(*args)
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(*args)
        return grpc.unary_unary_rpc_method_handler(*args)


class TokenCallInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call of a channel."""

    def __init__(self, token: str) -> None:
        self.header = (HEADER, f"Bearer {token}")

    def _with_token(self, details: Any) -> Any:
        metadata = [*(details.metadata or ()), self.header]
        return _CallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready, details.compression
        )

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, method: str, timeout: Any, metadata: Any, credentials: Any, wait_for_ready: Any, compression: Any) -> None:
        self.method = method
        self.timeout = timeout
        self.metadata = metadata
        self.credentials = credentials
        self.wait_for_ready = wait_for_ready
        self.compression = compression
