"""REST/JSON beside gRPC (`boundless serve --rest-port P`), in TF Serving's shape, for curl
and for languages without a gRPC client:

    POST /v1/models/NAME:predict   {"instances": [{feature: value, ...}, ...],
                                    "context": {feature: value, ...}, "strict": true}
                              or   {"inputs": {feature: [value per item], ...}, "context": ...}
        -> {"predictions": [score, ...], "model": NAME, "model_version": V, "unknown_features": n}
    GET  /v1/models/NAME           -> {"model_version_status": [{"version": "V", "state": "AVAILABLE",
                                        "labels": ["stable"], ...}, ...]}  (every version loaded)
    GET  /v1/models/NAME/metadata  -> {"model_spec": {...}, "metadata": {"model_type", "fields", "transform"}}
    GET  /v1/models                -> {"models": [{"name", "versions": [{"version", "labels"}], "load_error"}]}

As in TF Serving, /v1/models/NAME/versions/V or /v1/models/NAME/labels/L in place of
/v1/models/NAME names a version for any of the three ("stable" is the policy's version, a
canary's label its own), which this server must have loaded (404 lists what it has), and a
body may carry "signature_name": "serving_default", the one signature.

A value is a string or a number (a token, bucketed as the served version's feature
transform says: the JSON is encoded as `PredictClient.predict` encodes dicts), or
[token, x] for a weighted feature. The columnar form (TF Serving's "inputs") takes a list
per feature, one value (or one equal-length list of values) per item, and is encoded as
`PredictClient.predict_columns` encodes arrays: a whole column at a time, several times
faster on the server than the same features as rows. The request then takes the gRPC servicer's own path, so
its limits, checks and metrics are the same; refusals keep its message under the HTTP
status of its code (INVALID_ARGUMENT 400, NOT_FOUND 404, RESOURCE_EXHAUSTED 413,
UNAVAILABLE 503, ...). Bad JSON is a 400 naming the field (`instances[3].age: ...`). The
same bearer tokens (`Authorization: Bearer T`, the predict role) and TLS certificate as
gRPC apply; more than --max-concurrent requests at once are refused with 429.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt

from ctr.data.formats import ParseError
from ctr.data.json_lines import flattened
from ctr.runtime.auth import RANK, role_of
from ctr.runtime.security import Identity
from serving import metrics
from serving.client.predict_client import RequestEncoder, Value, request_proto
from serving.loading.servable import ServableModel
from serving.loading.watcher import NotLoaded
from serving.service import PredictorServicer

log = logging.getLogger("serving.rest")

HTTP_OF: dict[grpc.StatusCode, HTTPStatus] = {
    grpc.StatusCode.INVALID_ARGUMENT: HTTPStatus.BAD_REQUEST,
    grpc.StatusCode.NOT_FOUND: HTTPStatus.NOT_FOUND,
    grpc.StatusCode.RESOURCE_EXHAUSTED: HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
    grpc.StatusCode.FAILED_PRECONDITION: HTTPStatus.PRECONDITION_FAILED,
    grpc.StatusCode.UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
    grpc.StatusCode.UNAUTHENTICATED: HTTPStatus.UNAUTHORIZED,
    grpc.StatusCode.PERMISSION_DENIED: HTTPStatus.FORBIDDEN,
}
PREFIX = "/v1/models/"
ENCODERS_KEPT = 8  # versions whose encoders REST keeps: the stable ones and labels of the models served
SIGNATURE = "serving_default"  # TF Serving's default signature name: a model here has that one
VERBS = {("POST", ":predict"): "predict", ("GET", "/metadata"): "metadata", ("GET", ""): "status"}


@dataclass(frozen=True)
class Target:
    """What a REST path names: a model, the call, and a version by label or number (TF
    Serving's /versions/V and /labels/L; neither: routed as gRPC routes it)."""

    model: str
    verb: str  # predict, status or metadata
    label: str = ""
    version: int = 0


def target_of(method: str, path: str) -> Target:
    """The target of a path under /v1/models/, or Refused naming the endpoints. GET
    /v1/models (no name) is the list of the models served (Target("", "models"))."""
    bare = path.split("?", 1)[0]
    if bare in (PREFIX, PREFIX.rstrip("/")):
        if method == "GET":
            return Target("", "models")
        raise Refused(HTTPStatus.NOT_FOUND, f"{method} {path}: no such endpoint")
    if not bare.startswith(PREFIX):
        raise Refused(HTTPStatus.NOT_FOUND, f"{path}: expected {PREFIX}NAME or {PREFIX}NAME:predict")
    rest = bare[len(PREFIX) :]
    # in VERBS's order: a GET of .../metadata before the bare GET, whose suffix is ""
    found = next(((v, suffix) for (m, suffix), v in VERBS.items() if m == method and rest.endswith(suffix)), None)
    if found is None:
        raise Refused(HTTPStatus.NOT_FOUND, f"{method} {path}: no such endpoint")
    verb, suffix = found
    parts = rest[: len(rest) - len(suffix)].split("/")
    if len(parts) == 1 and parts[0]:
        return Target(parts[0], verb)
    if len(parts) == 3 and parts[0] and parts[1] == "labels" and parts[2]:
        return Target(parts[0], verb, label=parts[2])
    if len(parts) == 3 and parts[0] and parts[1] == "versions":
        if not parts[2].isdigit() or int(parts[2]) == 0:
            raise Refused(HTTPStatus.BAD_REQUEST, f"{path}: version {parts[2]!r} is not a version number")
        return Target(parts[0], verb, version=int(parts[2]))
    raise Refused(
        HTTPStatus.NOT_FOUND,
        f"{method} {path}: no such endpoint (expected {PREFIX}NAME[/versions/V or /labels/L][:predict or /metadata])",
    )


class Refused(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Context:
    """What the servicer needs of a gRPC context: abort() as a Refused."""

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Refused(HTTP_OF.get(code, HTTPStatus.INTERNAL_SERVER_ERROR), details)


def features_of(raw: Any, where: str, multi: frozenset[str] = frozenset()) -> dict[str, Value]:
    """One JSON object of features, checked: names to strings, numbers, [token, x] (a
    weighted feature) or a list of strings (several values of the field; of strings or
    numbers for the model's multi-valued fields, `multi`); null is a missing feature."""
    if not isinstance(raw, dict):
        raise Refused(HTTPStatus.BAD_REQUEST, f"{where}: expected an object of features, got {type(raw).__name__}")
    out: dict[str, Value] = {}
    for name, value in raw.items():
        if value is None:
            continue  # null: a missing feature (pandas' to_json writes NaN so)
        if isinstance(value, bool) or not isinstance(value, (str, int, float, list)):
            raise Refused(HTTPStatus.BAD_REQUEST, f"{where}.{name}: expected a string, a number or [token, value]")
        if isinstance(value, list):
            out[name] = _list_value(value, f"{where}.{name}", name in multi)
        else:
            out[name] = value
    return out


def _as_trained(raw: Any, nested: bool) -> Any:
    """A JSON-lines model's request object as its lines trained (ctr.data.json_lines):
    nested objects' keys as fields (user.age), true and false as True and False."""
    return flattened(raw) if nested and isinstance(raw, dict) else raw


def _list_value(value: list[Any], where: str, multi: bool) -> Value:
    """A list: a multi-valued field's values, several strings, or a weighted [token, x]."""
    scalars = all(v is None or (isinstance(v, (str, int, float)) and not isinstance(v, bool)) for v in value)
    if multi or all(v is None or isinstance(v, str) for v in value):
        if not scalars:
            raise Refused(HTTPStatus.BAD_REQUEST, f"{where}: a field's values are strings or numbers")
        return list(value)
    if len(value) != 2 or not isinstance(value[0], (str, int)) or isinstance(value[0], bool) or isinstance(value[1], bool):
        raise Refused(HTTPStatus.BAD_REQUEST, f"{where}: a weighted feature is [token, value]; several values are strings")
    if not isinstance(value[1], (int, float)):
        raise Refused(HTTPStatus.BAD_REQUEST, f"{where}: its value {value[1]!r} is not a number")
    return (str(value[0]), float(value[1]))


@dataclass(frozen=True)
class PredictBody:
    """A predict body, checked: rows (`instances`) or columns (`inputs`), and the context."""

    rows: list[Any] | None  # JSON objects: checked by features_of against the scoring version's fields
    columns: dict[str, npt.NDArray[Any]] | None
    context: Any
    context_columns: dict[str, npt.NDArray[Any]]
    strict: bool
    routing_key: str = ""


def column_of(raw: Any, where: str, length: int | None) -> npt.NDArray[Any]:
    """One JSON column: numbers or strings of one kind, `length` long when given; null is a
    missing value: "" in a column of strings, NaN in one of numbers (pandas' to_json of an
    integer column with a missing value), which the encoder leaves out as the trainer left an
    empty field."""
    if not isinstance(raw, list) or not raw:
        raise Refused(HTTPStatus.BAD_REQUEST, f"{where}: expected a non-empty list")
    if length is not None and len(raw) != length:
        raise Refused(HTTPStatus.BAD_REQUEST, f"{where}: {len(raw)} values for {length} items")
    if any(v is None for v in raw):
        if all(v is None or isinstance(v, str) for v in raw):
            raw = ["" if v is None else v for v in raw]
        elif all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in raw):
            return np.asarray([np.nan if v is None else float(v) for v in raw], dtype=np.float64)
        else:
            raise Refused(HTTPStatus.BAD_REQUEST, f"{where}: expected numbers or strings (one kind), a value or a list per item")
    if all(isinstance(v, list) for v in raw) and len({len(v) for v in raw}) > 1:
        raw = _padded(raw, where)  # items with different numbers of values (a multi-valued field)
    try:
        arr = np.asarray(raw)
    except ValueError:
        raise Refused(HTTPStatus.BAD_REQUEST, f"{where}: expected one value or one list of values per item") from None
    if arr.dtype.kind not in "iufU" or arr.ndim > 2 or arr.dtype == np.bool_:
        raise Refused(HTTPStatus.BAD_REQUEST, f"{where}: expected numbers or strings (one kind), a value or a list per item")
    return arr


def _padded(lists: list[list[Any]], where: str) -> list[list[str]]:
    """Items' lists of values of different lengths as equal rows of strings, '' (missing)
    after each item's own values; numbers as their text, as a string column hashes them."""
    width = max(len(v) for v in lists)
    out = []
    for i, values in enumerate(lists):
        row = []
        for v in values:
            if isinstance(v, bool) or not (v is None or isinstance(v, (str, int, float))):
                raise Refused(HTTPStatus.BAD_REQUEST, f"{where}[{i}]: a field's values are strings or numbers")
            row.append("" if v is None else str(v))
        out.append(row + [""] * (width - len(row)))
    return out


def parse_predict(body: bytes) -> PredictBody:
    """The checked body of a predict call, or Refused naming what is wrong."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise Refused(HTTPStatus.BAD_REQUEST, f"body: not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise Refused(HTTPStatus.BAD_REQUEST, "body: expected an object with 'instances' or 'inputs'")
    unknown = sorted(set(doc) - {"instances", "inputs", "context", "strict", "routing_key", "signature_name"})
    if unknown:
        raise Refused(HTTPStatus.BAD_REQUEST, f"body: unknown key(s) {', '.join(map(repr, unknown))}")
    if doc.get("signature_name", SIGNATURE) != SIGNATURE:  # TF Serving's clients send its default name
        raise Refused(HTTPStatus.BAD_REQUEST, f"signature_name: {doc['signature_name']!r}: the one signature is {SIGNATURE!r}")
    if ("instances" in doc) == ("inputs" in doc):
        raise Refused(HTTPStatus.BAD_REQUEST, "body: give either 'instances' (rows) or 'inputs' (columns)")
    strict = doc.get("strict", True)
    if not isinstance(strict, bool):
        raise Refused(HTTPStatus.BAD_REQUEST, "strict: expected true or false")
    routing_key = doc.get("routing_key", "")
    if not isinstance(routing_key, str | int):
        raise Refused(HTTPStatus.BAD_REQUEST, "routing_key: expected a string or an integer")
    if "instances" in doc:
        instances = doc["instances"]
        if not isinstance(instances, list) or not instances:
            raise Refused(HTTPStatus.BAD_REQUEST, "instances: expected a non-empty list of objects")
        return PredictBody(instances, None, doc.get("context") or {}, {}, strict, str(routing_key))
    inputs = doc["inputs"]
    if not isinstance(inputs, dict) or not inputs:
        raise Refused(HTTPStatus.BAD_REQUEST, "inputs: expected an object of columns, one value per item")
    first = next(iter(inputs.values()))
    length = len(first) if isinstance(first, list) else 0
    columns = {name: column_of(col, f"inputs.{name}", length) for name, col in inputs.items()}
    raw_context = doc.get("context") or {}
    if not isinstance(raw_context, dict):
        raise Refused(HTTPStatus.BAD_REQUEST, "context: expected an object of features")
    context = {
        name: column_of(v if isinstance(v, list) else [v], f"context.{name}", None).reshape(-1) for name, v in raw_context.items()
    }
    return PredictBody(None, columns, {}, context, strict, str(routing_key))


def labels_by_version(loaded: list[tuple[str, ServableModel]]) -> dict[int, list[str]]:
    """The labels of each loaded version, in the order given (the stable version's first)."""
    out: dict[int, list[str]] = {}
    for label, model in loaded:
        out.setdefault(model.version, []).append(label)
    return out


class RestFront:
    """The REST endpoint of one serving process, scoring through its gRPC servicer."""

    def __init__(
        self,
        servicer: PredictorServicer,
        max_bytes: int,
        max_concurrent: int,
        tokens: Mapping[str, str] | None,
    ) -> None:
        self.servicer = servicer
        self.max_bytes = max_bytes
        self.slots = threading.BoundedSemaphore(max_concurrent)
        self.tokens = dict(tokens) if tokens is not None else None
        self._encoders: dict[tuple[str, int], RequestEncoder] = {}  # (model, version) -> its encoder, oldest use first
        self._lock = threading.Lock()

    def encoder(self, model: ServableModel) -> RequestEncoder:
        """A served version's encoder (its transform and fields), made once per version; the
        last few versions' are kept (a stable version and its canaries take turns)."""
        key = (model.name, model.version)
        with self._lock:
            enc = self._encoders.pop(key, None) or RequestEncoder(model.schema, list(model.spec.fields), checked=True)
            self._encoders[key] = enc  # the most recent last
            while len(self._encoders) > ENCODERS_KEPT:
                del self._encoders[next(iter(self._encoders))]
        return enc

    def check_token(self, header: str | None) -> None:
        if self.tokens is None:
            return
        if not header or not header.startswith("Bearer "):
            raise Refused(HTTPStatus.UNAUTHORIZED, "no bearer token")
        role = role_of(self.tokens, header[len("Bearer ") :])
        if role is None:
            raise Refused(HTTPStatus.UNAUTHORIZED, "unknown token")
        if RANK[role] < RANK["predict"]:
            raise Refused(HTTPStatus.FORBIDDEN, f"role {role} may not predict (needs predict)")

    def versions(self, target: Target) -> list[tuple[str, ServableModel]]:
        """(label, version) of what the target names among the loaded versions (all of them
        for a bare model name, the stable one first); Refused when none is loaded or matches."""
        watcher = self.servicer.watcher_for(target.model, _Context())  # type: ignore[arg-type]
        if watcher.current is None:
            raise Refused(HTTPStatus.SERVICE_UNAVAILABLE, f"no version of model {target.model!r} is loaded yet")
        if not (target.label or target.version):
            return watcher.loaded()
        try:
            return [watcher.named(target.label, target.version)]
        except NotLoaded as e:
            raise Refused(HTTPStatus.NOT_FOUND, str(e)) from None

    def predict(self, target: Target, body: bytes) -> dict[str, Any]:
        parsed = parse_predict(body)
        routed = not (target.label or target.version)
        watcher = self.servicer.watcher_for(target.model, _Context())  # type: ignore[arg-type]
        for attempt in range(2):
            named = target
            if routed:  # routed here: encoded with, and sent to, the version routed to
                named = Target(target.model, target.verb, label=watcher.routed(parsed.routing_key)[0])
            try:
                return self._predict_as(named, parsed)
            except Refused as e:
                # between routing and scoring a label was removed, or the version swapped for
                # one of another transform: routed once more, as gRPC routes inside the call
                if not routed or attempt or e.status not in (HTTPStatus.NOT_FOUND, HTTPStatus.PRECONDITION_FAILED):
                    raise
        raise AssertionError("unreachable")

    def _predict_as(self, target: Target, parsed: PredictBody) -> dict[str, Any]:
        encoder = self.encoder(self.versions(target)[0][1])
        try:
            if parsed.columns is not None:
                enc = encoder.encode_columns(parsed.columns, parsed.context_columns)
            else:
                multi = frozenset(encoder.separators)  # their lists are values, never [token, weight]
                nested = encoder.schema.format == "json"  # a JSON-lines model: objects and true/false as it trained them
                rows = [features_of(_as_trained(x, nested), f"instances[{i}]", multi) for i, x in enumerate(parsed.rows or [])]
                enc = encoder.encode(rows, features_of(_as_trained(parsed.context, nested), "context", multi), "instances")
        except ParseError as e:  # a value the version's transform cannot take: which and where
            raise Refused(HTTPStatus.BAD_REQUEST, str(e)) from None
        except ValueError as e:  # a column's
            raise Refused(HTTPStatus.BAD_REQUEST, f"inputs: {e}") from None
        request = request_proto(enc, target.model, parsed.strict, parsed.routing_key, label=target.label, version=target.version)
        reply = self.servicer.Predict(request, _Context())  # type: ignore[arg-type]
        return {
            "predictions": [float(s) for s in reply.scores],
            "model": reply.model,
            "model_version": reply.version,
            "label": reply.label,
            "unknown_features": reply.unknown_features,
        }

    def status(self, target: Target) -> dict[str, Any]:
        state = {"error_code": "OK", "error_message": ""}
        return {
            "model_version_status": [
                {"version": str(v), "state": "AVAILABLE", "status": state, "labels": labels}
                for v, labels in labels_by_version(self.versions(target)).items()
            ]
        }

    def models(self) -> dict[str, Any]:
        """Every model this server serves, with the versions it has loaded and their labels
        (none yet: an empty list, and the reason a version was refused, if one was)."""
        out = []
        for name, watcher in sorted(self.servicer.watchers.items()):
            versions = [{"version": str(v), "labels": labels} for v, labels in labels_by_version(watcher.loaded()).items()]
            out.append({"name": name, "versions": versions, "load_error": watcher.last_error})
        return {"models": out}

    def metadata(self, target: Target) -> dict[str, Any]:
        label, model = self.versions(target)[0]
        schema = model.schema
        return {
            "model_spec": {"name": model.name, "version": str(model.version), "label": label},
            "metadata": {
                "signature_name": SIGNATURE,
                "model_type": model.spec.type,
                "fields": list(model.spec.fields),
                "transform": {
                    "format": schema.format,
                    "label": schema.label,
                    "numeric": list(schema.numeric),
                    "skip": list(schema.skip),
                    "cross": [list(pair) for pair in schema.cross],
                    "multi_valued": dict(schema.multi_valued),
                    "delimiter": schema.delimiter,
                },
            },
        }


def _handler(front: RestFront, idle_s: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # the socket's timeout: a kept-alive connection idle this long, a client that stops
        # mid-request or never finishes a TLS handshake, frees its thread (http.server
        # closes the connection on the timeout)
        timeout = idle_s
        # the reply's headers and body go in two writes: with Nagle's algorithm the body
        # waited for the client's delayed ACK, 40 ms a request on a kept-alive connection
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            log.debug("%s " + format, self.address_string(), *args)

        def _reply(self, status: HTTPStatus, doc: dict[str, Any]) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _route(self, method: str) -> None:
            try:
                front.check_token(self.headers.get("Authorization"))
                target = target_of(method, self.path)
                if target.verb == "models":
                    self._reply(HTTPStatus.OK, front.models())
                elif target.verb == "predict":
                    self._predict(target)
                elif target.verb == "metadata":
                    self._reply(HTTPStatus.OK, front.metadata(target))
                else:
                    self._reply(HTTPStatus.OK, front.status(target))
            except Refused as e:
                self._reply(e.status, {"error": str(e)})
            except Exception as e:  # a daemon answers 500 and keeps serving
                log.exception("REST %s %s failed", method, self.path)
                self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(e).__name__}: {e}"})

        def _predict(self, target: Target) -> None:
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                raise Refused(HTTPStatus.LENGTH_REQUIRED, "Content-Length: required")
            if int(length) > front.max_bytes:
                self.close_connection = True  # the body is not read
                raise Refused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body: {length} bytes, above this server's {front.max_bytes}")
            body = self.rfile.read(int(length))
            if not front.slots.acquire(blocking=False):
                raise Refused(HTTPStatus.TOO_MANY_REQUESTS, "more requests in flight than --max-concurrent")
            try:
                self._reply(HTTPStatus.OK, front.predict(target, body))
            finally:
                front.slots.release()

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self._route("POST")

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._route("GET")

    return Handler


def _busy_reply() -> bytes:
    body = json.dumps({"error": "more REST connections open than --rest-max-connections"}).encode()
    head = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
    return head.encode() + f"Content-Length: {len(body)}\r\n\r\n".encode() + body


BUSY_REPLY = _busy_reply()


class _Server(ThreadingHTTPServer):
    """A thread a connection, at most `max_connections` at once: each thread holds memory
    and a slot of the process's thread limit, which the gRPC server and the scoring threads
    share, so connections past it are answered 503 and closed rather than given one."""

    daemon_threads = True
    share_port = False

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], max_connections: int) -> None:
        self._open = threading.BoundedSemaphore(max_connections)
        super().__init__(address, handler)

    def server_bind(self) -> None:
        if self.share_port:  # the processes of one group share the port, as they share gRPC's (serving.process_group)
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._open.acquire(blocking=False):
            metrics.REST_CONNECTIONS_REFUSED.inc()
            try:
                if not isinstance(request, ssl.SSLSocket):  # before a handshake, nothing can be said over TLS
                    request.settimeout(1.0)
                    request.sendall(BUSY_REPLY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread was started: its slot is not taken
            self._open.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)  # type: ignore[misc]
        finally:
            self._open.release()


class _SharedServer(_Server):
    share_port = True


def serve_rest(
    front: RestFront,
    host: str,
    port: int,
    identity: Identity,
    share_port: bool = False,
    idle_s: float = 60.0,
    max_connections: int = 256,
) -> tuple[ThreadingHTTPServer, int]:
    """Starts the endpoint on a thread; returns it and its bound port. With a certificate,
    it speaks TLS, asking clients for theirs where gRPC does (tls_client_auth). share_port:
    beside the other processes of a serving group (SO_REUSEPORT); otherwise the port is
    this process's alone. idle_s, max_connections: what a connection may hold (_Server)."""
    server = (_SharedServer if share_port else _Server)((host, port), _handler(front, idle_s), max_connections)
    if identity.cert is not None and identity.key is not None:
        # the handshake runs on the request's thread (at its first read), not in the accept loop
        server.socket = tls_context(identity).wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, name="rest", daemon=True).start()
    return server, int(server.server_address[1])


def tls_context(identity: Identity) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory() as d:  # ssl loads PEM from files only
        cert, key = Path(d) / "cert.pem", Path(d) / "key.pem"
        cert.write_bytes(identity.cert or b"")
        key.write_bytes(identity.key or b"")
        key.chmod(0o600)
        ctx.load_cert_chain(cert, key)
    if identity.client_auth and identity.ca is not None:
        ctx.load_verify_locations(cadata=identity.ca.decode())
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
