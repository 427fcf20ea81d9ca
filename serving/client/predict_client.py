"""Python client of the prediction service: encodes plain dicts or columns compactly, so
callers never hand-build bytes. The model owns its feature transform: on first use the
client asks serving for the version's field list and transform (numeric bucketing, skipped
columns, crosses; ModelStatus) and applies them, so raw values score exactly as the trainer
saw them. Features of fields the model does not have are counted in the request; the client
is strict by default, and serving then refuses such a request with INVALID_ARGUMENT naming
them (strict=False drops and counts them).

    client = PredictClient("127.0.0.1:50051")
    result = client.predict(items=[{"item": "42"}, {"item": "7"}], context={"user": "u1"})
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import grpc
import numpy as np
import numpy.typing as npt

from ctr.data.batch import SampleBatch
from ctr.data.fields import FieldIndex, cross_name
from ctr.data.formats import FieldEncoder, ParsedSample, ParseError
from ctr.data.hashing import hash_tokens, pack_tokens
from ctr.data.json_lines import flattened
from ctr.data.number_text import render, render_column
from ctr.data.schema import FORMATS, FeatureSchema, transform_digest
from ctr.runtime.security import Identity, open_channel
from protos import predict_pb2, predict_pb2_grpc
from serving.request.columns import ColumnValues, bucket_tokens, flatten_columns, flatten_token_columns, numbers_of
from serving.request.encoding import TRANSFORM_CHANGED, EncodedRequest, encode, encode_tokens

# a categorical value, a number (bucketed when the schema says the field is numeric),
# or (token, value) for a weighted feature such as libsvm's index:value
# None and NaN: a missing feature; a list: several values of one field; a tuple: (token, weight)
# a value of one feature; a nested mapping only for a model trained on JSON lines (its keys'
# fields, user.age: ctr.data.json_lines)
Value = str | int | float | bool | tuple[str, float] | list[str | int | float | None] | Mapping[str, Any] | None
UNKNOWN_NAMES = 8  # unknown field names a request carries to serving's error message
CROSS_JOIN = "\x1f"  # between the two tokens of a cross (ctr.data.formats)


@dataclass(frozen=True)
class Prediction:
    scores: npt.NDArray[np.float32]
    model: str
    version: int
    unknown_features: int = 0  # features dropped: the model has no field of their name
    label: str = "stable"  # the version label that scored it (a canary's name, or the policy's version)


def schema_of(transform: predict_pb2.FeatureTransform) -> FeatureSchema:
    """The feature schema a served version reports (ModelStatus.transform)."""
    fmt = transform.format if transform.format in FORMATS else "kv"
    return FeatureSchema(
        format=fmt,  # type: ignore[arg-type]
        label=transform.label or "label",
        numeric=tuple(transform.numeric),
        skip=tuple(transform.skip),
        cross=tuple((c.a, c.b) for c in transform.cross),
        multi_valued=tuple((m.field, m.separator) for m in transform.multi_valued),
        delimiter=transform.delimiter or ",",
        number_text=tuple(sorted(transform.number_text.items())),
    )


class RequestEncoder:
    """Encodes named features under a schema (numeric bucketing, skipped columns, crosses)
    and the model's field list. Features of fields outside a given list are dropped, as
    the trainer drops them, and counted in the request (`unknown_features`); the schema's
    label and skipped columns are ignored without a count."""

    def __init__(self, schema: FeatureSchema | None = None, fields: Sequence[str] = (), checked: bool = False) -> None:
        """checked: the schema and fields are a served version's (ModelStatus): requests
        carry their digest, and a version with others refuses them instead of misreading."""
        self.schema = schema or FeatureSchema()
        self.index = FieldIndex(tuple(fields), frozen=bool(fields))
        self.digest = transform_digest(tuple(fields), self.schema) if checked else 0
        self.fields = FieldEncoder(self.schema, self.index)
        self.ignored = frozenset(self.schema.skip) | {self.schema.label}
        self.crosses = [(a, b, cross_name(a, b)) for a, b in self.schema.cross]
        self.separators = dict(self.schema.multi_valued)  # a multi-valued field's joined text is split, as trained
        self.number_text = dict(self.schema.number_text)  # numbers written as the training data wrote them

    def _is_unknown(self, name: str) -> bool:
        return self.index.frozen and self.index.get(name) < 0 and name not in self.ignored

    def _add(
        self, acc: ParsedSample, owner: list[int], who: int, features: Mapping[str, Value], unknown: dict[str, int]
    ) -> dict[str, str]:
        """Appends one item's (or the context's) features; returns each field's first token."""
        first: dict[str, str] = {}
        if self.schema.format == "json":  # nested objects as their keys' fields (user.age), as the trainer read them
            features = flattened(features)
        if self.number_text:  # numbers as the training data wrote them (1005.0 as 1005); nothing per feature without
            features = {n: _rendered(v, self.number_text.get(n)) for n, v in features.items()}
        for name, raw in features.items():
            if raw is None or (isinstance(raw, float) and math.isnan(raw)):
                continue  # missing, as pandas writes NaN to a CSV (an empty field), not the token "None" or "nan"
            if self._is_unknown(name):
                unknown[name] = unknown.get(name, 0) + 1
                continue
            before = len(acc.tokens)
            if isinstance(raw, tuple):
                f = self.index.add(name)
                if f >= 0:
                    acc.fields.append(f)
                    acc.tokens.append(str(raw[0]))
                    acc.values.append(float(raw[1]))
            elif isinstance(raw, list):  # a multi-valued feature (kv's `tags=x<TAB>tags=y`): a value each
                for value in raw:
                    if not (value is None or (isinstance(value, float) and math.isnan(value))):
                        self.fields.add(acc, name, _text(name, value))
            elif name in self.separators:  # the joined text of a multi-valued field: a value each piece
                for piece in _text(name, raw).split(self.separators[name]):
                    self.fields.add(acc, name, piece)
            else:
                self.fields.add(acc, name, _text(name, raw))
            if len(acc.tokens) > before:
                first.setdefault(name, acc.tokens[before])
            owner += [who] * (len(acc.tokens) - before)
        return first

    def _add_crosses(self, acc: ParsedSample, owner: list[int], who: int, own: dict[str, str], shared: dict[str, str]) -> None:
        """The schema's crosses of one item (its own tokens over the context's), or of the
        context alone (who -1, shared empty): each pair once, where it is made."""
        for a, b, c in self.crosses:
            if who >= 0 and a not in own and b not in own:
                continue  # both from the context: a context feature, added once
            ta, tb = own.get(a, shared.get(a)), own.get(b, shared.get(b))
            f = self.index.add(c)
            if ta is not None and tb is not None and f >= 0:
                acc.fields.append(f)
                acc.tokens.append(f"{ta}{CROSS_JOIN}{tb}")
                acc.values.append(1.0)
                owner.append(who)

    def encode(
        self, items: Sequence[Mapping[str, Value]], context: Mapping[str, Value] | None = None, items_name: str = "items"
    ) -> EncodedRequest:
        """A value that cannot be a feature (a numeric field's 'abc') raises ParseError naming
        where it is: `items_name`[i] or context."""
        acc = ParsedSample(0.0, [], [], [])
        owner: list[int] = []
        unknown: dict[str, int] = {}
        try:
            shared = self._add(acc, owner, -1, context or {}, unknown)
        except ParseError as e:
            raise ParseError(f"context: {e}") from None
        if self.crosses:
            self._add_crosses(acc, owner, -1, shared, {})
        for i, features in enumerate(items):
            try:
                own = self._add(acc, owner, i, features, unknown)
            except ParseError as e:
                raise ParseError(f"{items_name}[{i}]: {e}") from None
            if self.crosses:
                self._add_crosses(acc, owner, i, own, shared)
        fields = np.asarray(acc.fields, np.int64)
        buf, offsets = pack_tokens(acc.tokens)
        keys = hash_tokens(buf, offsets, np.ascontiguousarray(self.index.ids()[fields], dtype=np.uint32))
        values = np.asarray(acc.values, np.float32)
        req = encode(keys, values, fields, np.asarray(owner, np.int64), len(items), fields)
        return self._stamped(_with_unknown(req, unknown))

    def encode_columns(
        self,
        items: Mapping[str, ColumnValues],
        context: Mapping[str, ColumnValues] | None = None,
        compress: bool | None = None,
        tokens: bool | None = None,
    ) -> EncodedRequest:
        """Encodes columnar input (serving.request.columns): numpy arrays per field, one row per item.
        With the model's field list, integer ids travel as raw tokens (the server hashes
        them), zstd-compressed when `compress`, or by default when that saves 1/8 of the
        bytes (serving.request.encoding.MIN_ZSTD_SAVING); without it, as hashed keys."""
        n_items = len(np.asarray(next(iter(items.values())))) if items else 0
        context = context or {}
        if self.number_text:  # numbers written as the training data wrote them (a float column of whole ids as integers)
            items = {n: render_column(np.asarray(c), self.number_text.get(n)) for n, c in items.items()}
            context = {n: render_column(np.asarray(c), self.number_text.get(n)) for n, c in context.items()}
        if self.separators:
            items = {n: _split_values(c, self.separators[n], n_items) if n in self.separators else c for n, c in items.items()}
            context = {n: _split_values(c, self.separators[n], None) if n in self.separators else c for n, c in context.items()}
        unknown = {n: int(np.asarray(c).size) for part in (context, items) for n, c in part.items() if self._is_unknown(n)}
        if self.crosses:
            items, context = self._cross_columns(items, context, n_items)
        numeric = self.fields.numeric
        if self.index.frozen if tokens is None else tokens:
            features = flatten_token_columns([(context, None), (items, n_items)], self._field_of, numeric)
            return self._stamped(_with_unknown(encode_tokens(features, n_items, compress), unknown))
        ck, cf, co = flatten_columns(context, None, self._field_of, numeric)
        ik, if_, io = flatten_columns(items, n_items, self._field_of, numeric)
        keys, fields, owner = np.concatenate([ck, ik]), np.concatenate([cf, if_]), np.concatenate([co, io])
        req = encode(keys, np.ones(keys.shape[0], np.float32), fields, owner, n_items, fields)
        return self._stamped(_with_unknown(req, unknown))

    def _stamped(self, req: EncodedRequest) -> EncodedRequest:
        return dataclasses.replace(req, transform_digest=self.digest) if self.digest else req

    def _field_of(self, name: str) -> int:
        """A column's field index; -1 (left out) for skipped, label and unknown columns."""
        return -1 if name in self.ignored else self.index.add(name)

    def _token_text(self, name: str, col: ColumnValues, n_items: int | None) -> npt.NDArray[np.str_]:
        """The first token of each item's (or the context's) value of a column, as the
        trainer writes it ('' where missing)."""
        arr = np.asarray(col)
        if n_items is None:
            arr = arr.reshape(-1)[:1]
        elif arr.ndim == 2:
            arr = arr[:, 0] if arr.shape[1] else np.full(arr.shape[0], "")
        if name in self.fields.numeric:  # its bucket, as the trainer's line has it; '' where missing
            v, present = numbers_of(arr.reshape(-1), name)
            big, t = bucket_tokens(np.where(present, v, 0.0))
            return np.where(present, np.char.add(np.where(big, "b", "v"), t.astype(str)), "")
        return arr.astype(str)

    def _cross_columns(
        self, items: Mapping[str, ColumnValues], context: Mapping[str, ColumnValues], n_items: int
    ) -> tuple[dict[str, ColumnValues], dict[str, ColumnValues]]:
        """items and context with the schema's crosses added as string columns."""
        items_out, context_out = dict(items), dict(context)
        for a, b, c in self.crosses:
            if a not in items and b not in items:
                if a in context and b in context:
                    ta, tb = self._token_text(a, context[a], None), self._token_text(b, context[b], None)
                    if ta.size and tb.size and ta[0] and tb[0]:
                        context_out[c] = np.asarray([f"{ta[0]}{CROSS_JOIN}{tb[0]}"])
                continue
            parts = []
            for name in (a, b):
                if name in items:
                    parts.append(self._token_text(name, items[name], n_items))
                elif name in context:
                    t = self._token_text(name, context[name], None)
                    parts.append(np.full(n_items, t[0] if t.size else "", dtype=t.dtype if t.size else "U1"))
                else:
                    parts.append(np.full(n_items, "", dtype="U1"))
            ta, tb = parts
            joined = np.char.add(np.char.add(ta, CROSS_JOIN), tb)
            items_out[c] = np.where((np.char.str_len(ta) > 0) & (np.char.str_len(tb) > 0), joined, "")
        return items_out, context_out


def _rendered(raw: Value, style: str | None) -> Value:
    """A value, or each of a list's, in its field's number style (ctr.data.number_text)."""
    if style is None:
        return raw
    return cast(Value, [render(v, style) for v in raw] if isinstance(raw, list) else render(raw, style))


def _text(name: str, raw: object) -> str:
    """A value as the text the trainer read: bytes as the UTF-8 they hold (str() wrote
    "b's1'", a token no sample had), a bool as pandas and Parquet write it (True); a
    mapping or a set is no value (str() hashed its repr)."""
    if isinstance(raw, bytes | bytearray | memoryview):
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise ParseError(f"field {name}: bytes that are not UTF-8 text") from None
    if isinstance(raw, Mapping | set | frozenset | tuple | list):
        raise ParseError(
            f"field {name}: a {type(raw).__name__} is not a value; send a string, a number, a list of them or (token, weight)"
        )
    return str(raw)


def _split_values(col: ColumnValues, sep: str, n_items: int | None) -> ColumnValues:
    """A multi-valued field's column of joined texts as its values: (n_items, m) for items,
    padded with '' (missing), and a flat array for the context. Integer columns pass."""
    arr = np.asarray(col)
    if arr.dtype.kind not in "US" or n_items == 0:
        return col
    if n_items is None:
        return np.asarray([piece for cell in arr.reshape(-1).tolist() for piece in cell.split(sep) if piece], dtype=str)
    rows = [[piece for cell in row for piece in cell.split(sep) if piece] for row in arr.reshape(n_items, -1).tolist()]
    width = max((len(r) for r in rows), default=0)
    out = np.full((n_items, max(width, 1)), "", dtype=object)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out.astype(str)


def request_proto(
    req: EncodedRequest, model: str, strict: bool, routing_key: str = "", *, label: str = "", version: int = 0
) -> predict_pb2.PredictRequest:
    """The Predict message of an encoded request (the gRPC client's, and REST's in serving)."""
    return predict_pb2.PredictRequest(
        model=model,
        item_count=req.item_count,
        dictionary=req.dictionary,
        values=req.values,
        context=req.context,
        items=req.items,
        fields=req.fields,
        tokens=req.tokens,
        compression=req.compression,
        unknown_features=req.unknown_features,
        unknown_fields=list(req.unknown_fields),
        strict=strict,
        routing_key=routing_key,
        label=label,
        version=version,
        transform_digest=req.transform_digest,
    )


def _with_unknown(req: EncodedRequest, unknown: dict[str, int]) -> EncodedRequest:
    if not unknown:
        return req
    names = tuple(sorted(unknown)[:UNKNOWN_NAMES])
    return dataclasses.replace(req, unknown_features=sum(unknown.values()), unknown_fields=names)


def encode_batch(batch: SampleBatch) -> EncodedRequest:
    """A request scoring every sample of a parsed batch as one item (no shared context)."""
    n = len(batch)
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(batch.offsets))
    fields = batch.fields.astype(np.int64)
    return encode(batch.keys, batch.values, fields, owner, n, fields)


# Scoring changes nothing, so a call that fails UNAVAILABLE before serving answered (its
# process died, or was stopping, with the request in flight) is sent again, on a fresh
# connection, to whichever process takes it: a replica or one of `serve --processes N`
# lost costs its callers no failed request. The retry buffer must hold a whole request
# (gRPC's default, 256 KiB, is smaller than a 200 x 500 one, which then goes unretried).
RETRY_POLICY = json.dumps(
    {
        "methodConfig": [
            {
                "name": [{"service": "boundless.predict.Predictor", "method": m} for m in ("Predict", "ModelStatus")],
                "retryPolicy": {
                    "maxAttempts": 4,
                    "initialBackoff": "0.02s",
                    "maxBackoff": "0.2s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)
CHANNEL_OPTIONS = (
    ("grpc.enable_retries", 1),
    ("grpc.service_config", RETRY_POLICY),
    ("grpc.per_rpc_retry_buffer_size", 64 << 20),
    ("grpc.use_local_subchannel_pool", 1),
)


class PredictClient:
    def __init__(
        self,
        address: str,
        model: str = "ctr",
        schema: FeatureSchema | None = None,
        fields: Sequence[str] | None = None,
        timeout: float = 10.0,
        identity: Identity | None = None,
        strict: bool = True,
        connections: int = 1,
    ) -> None:
        """schema, fields: the feature transform and field list to encode with; by default
        the served version's (ModelStatus), asked on first use. strict: serving refuses a
        request with features of fields the model does not have (INVALID_ARGUMENT, naming
        them); False drops them and counts them (Prediction.unknown_features).
        identity: TLS and token to call with (default: the process's, ctr.runtime.security).
        connections: TCP connections the calls take in turn. `serve --processes N` shares
        one port, and the kernel spreads connections, not requests, over its processes: one
        connection reaches one process, several (a few per process) reach them all."""
        if connections < 1:
            raise ValueError(f"connections {connections}: must be at least 1")
        # each channel keeps its own subchannel pool: gRPC otherwise shares one connection
        # among every channel of a process to the same target and options, so clients made
        # to spread over processes (or a benchmark's clients) would all ride one connection
        self.channels = [open_channel(address, CHANNEL_OPTIONS, identity=identity) for _ in range(connections)]
        self.stubs = [predict_pb2_grpc.PredictorStub(c) for c in self.channels]
        self.channel, self.stub = self.channels[0], self.stubs[0]
        self._turn = itertools.count()
        self.model = model
        self.schema = schema
        self.given_fields = fields
        self.strict = strict
        self._encoder = RequestEncoder(schema, fields) if fields is not None and schema is not None else None
        self.timeout = timeout

    @property
    def encoder(self) -> RequestEncoder:
        """The encoder for the served model's transform and fields (asked of serving on
        first use; a schema or field list given to the client replaces the served one)."""
        if self._encoder is None:
            status = self.status()
            schema = self.schema if self.schema is not None else schema_of(status.transform)
            fields = self.given_fields if self.given_fields is not None else list(status.fields)
            # the served version's own: checked by serving; a schema or fields given replace it knowingly
            checked = self.schema is None and self.given_fields is None
            self._encoder = RequestEncoder(schema, fields, checked)
        return self._encoder

    def refresh(self) -> None:
        """Forgets the cached transform and field list: the next request asks serving again
        (after a new model, not a new version of the same one, was published)."""
        self._encoder = None

    def wait_ready(self, timeout: float = 30.0) -> None:
        grpc.channel_ready_future(self.channel).result(timeout=timeout)

    def wait_for_model(self, timeout: float = 60.0) -> predict_pb2.ModelStatusResponse:
        """Waits until serving has loaded a version (it answers UNAVAILABLE before); returns
        its status. Raises the last RpcError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.status()
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def predict(
        self,
        items: Sequence[Mapping[str, Value]],
        context: Mapping[str, Value] | None = None,
        routing_key: str = "",
        *,
        label: str = "",
        version: int = 0,
    ) -> Prediction:
        """routing_key: what a traffic split routes by (a user id): one key, one version label.
        label or version: that version instead ("stable", a canary's label, or a number),
        NOT_FOUND unless serving has it loaded."""
        return self._asking_again(lambda: self.encoder.encode(items, context), routing_key, label, version)

    def predict_columns(
        self,
        items: Mapping[str, ColumnValues],
        context: Mapping[str, ColumnValues] | None = None,
        routing_key: str = "",
        *,
        label: str = "",
        version: int = 0,
    ) -> Prediction:
        return self._asking_again(lambda: self.encoder.encode_columns(items, context), routing_key, label, version)

    def _asking_again(self, encode: Callable[[], EncodedRequest], routing_key: str, label: str, version: int) -> Prediction:
        """Encodes and sends; when serving says the version's field list or transform is not
        the one encoded for (a new spec published, a rollback across one), asks ModelStatus
        again and sends it once more, encoded anew."""
        try:
            return self.predict_encoded(encode(), routing_key, label=label, version=version)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.FAILED_PRECONDITION or TRANSFORM_CHANGED not in (e.details() or ""):  # type: ignore[attr-defined]
                raise
        self.refresh()
        return self.predict_encoded(encode(), routing_key, label=label, version=version)

    def predict_encoded(self, req: EncodedRequest, routing_key: str = "", *, label: str = "", version: int = 0) -> Prediction:
        stub = self.stubs[next(self._turn) % len(self.stubs)]  # the connections in turn
        resp = stub.Predict(self.to_proto(req, routing_key, label=label, version=version), timeout=self.timeout)
        return Prediction(
            np.asarray(resp.scores, dtype=np.float32), resp.model, resp.version, resp.unknown_features, resp.label or "stable"
        )

    def to_proto(
        self, req: EncodedRequest, routing_key: str = "", *, label: str = "", version: int = 0
    ) -> predict_pb2.PredictRequest:
        return request_proto(req, self.model, self.strict, routing_key, label=label, version=version)

    def status(self) -> predict_pb2.ModelStatusResponse:
        return self.stub.ModelStatus(predict_pb2.ModelStatusRequest(model=self.model), timeout=self.timeout)

    def close(self) -> None:
        for c in self.channels:
            c.close()
