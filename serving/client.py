"""Python client of the prediction service: encodes plain dicts compactly, so callers never
hand-build bytes. Feature names map to the model's field indices; the client asks serving
for the model's field list on first use unless it is given one.

    client = PredictClient("127.0.0.1:50051")
    result = client.predict(items=[{"item": "42"}, {"item": "7"}], context={"user": "u1"})
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import grpc
import numpy as np
import numpy.typing as npt

from ctr.batch import SampleBatch
from ctr.fields import FieldIndex
from ctr.formats import FieldEncoder, ParsedSample
from ctr.hashing import hash_tokens, pack_tokens
from ctr.schema import FeatureSchema
from ctr.security import Identity, open_channel
from protos import predict_pb2, predict_pb2_grpc
from serving.columns import ColumnValues, flatten_columns, flatten_token_columns
from serving.encoding import EncodedRequest, encode, encode_tokens

# a categorical value, a number (bucketed when the schema says the field is numeric),
# or (token, value) for a weighted feature such as libsvm's index:value
Value = str | int | float | tuple[str, float]


@dataclass(frozen=True)
class Prediction:
    scores: npt.NDArray[np.float32]
    model: str
    version: int


class RequestEncoder:
    """Encodes named features under a schema and the model's field list (names of fields
    outside a given list are dropped, as the trainer drops them)."""

    def __init__(self, schema: FeatureSchema | None = None, fields: Sequence[str] = ()) -> None:
        self.index = FieldIndex(tuple(fields), frozen=bool(fields))
        self.fields = FieldEncoder(schema or FeatureSchema(), self.index)

    def encode(self, items: Sequence[Mapping[str, Value]], context: Mapping[str, Value] | None = None) -> EncodedRequest:
        acc = ParsedSample(0.0, [], [], [])
        owner: list[int] = []
        for who, features in [(-1, context or {}), *enumerate(items)]:
            for name, raw in features.items():
                before = len(acc.tokens)
                if isinstance(raw, tuple):
                    f = self.index.add(name)
                    if f >= 0:
                        acc.fields.append(f)
                        acc.tokens.append(str(raw[0]))
                        acc.values.append(float(raw[1]))
                else:
                    self.fields.add(acc, name, str(raw))
                owner += [who] * (len(acc.tokens) - before)
        fields = np.asarray(acc.fields, np.int64)
        buf, offsets = pack_tokens(acc.tokens)
        keys = hash_tokens(buf, offsets, np.ascontiguousarray(self.index.ids()[fields], dtype=np.uint32))
        values = np.asarray(acc.values, np.float32)
        return encode(keys, values, fields, np.asarray(owner, np.int64), len(items), fields)

    def encode_columns(
        self,
        items: Mapping[str, ColumnValues],
        context: Mapping[str, ColumnValues] | None = None,
        compress: bool | None = None,
        tokens: bool | None = None,
    ) -> EncodedRequest:
        """Encodes columnar input (serving.columns): numpy arrays per field, one row per item.
        With the model's field list, integer ids travel as raw tokens (the server hashes
        them), zstd-compressed when `compress`, or by default when that saves 1/8 of the
        bytes (serving.encoding.MIN_ZSTD_SAVING); without it, as hashed keys."""
        n_items = len(np.asarray(next(iter(items.values())))) if items else 0
        numeric = self.fields.numeric
        if self.index.frozen if tokens is None else tokens:
            features = flatten_token_columns([(context or {}, None), (items, n_items)], self.index.add, numeric)
            return encode_tokens(features, n_items, compress)
        ck, cf, co = flatten_columns(context or {}, None, self.index.add, numeric)
        ik, if_, io = flatten_columns(items, n_items, self.index.add, numeric)
        keys, fields, owner = np.concatenate([ck, ik]), np.concatenate([cf, if_]), np.concatenate([co, io])
        return encode(keys, np.ones(keys.shape[0], np.float32), fields, owner, n_items, fields)


def encode_batch(batch: SampleBatch) -> EncodedRequest:
    """A request scoring every sample of a parsed batch as one item (no shared context)."""
    n = len(batch)
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(batch.offsets))
    fields = batch.fields.astype(np.int64)
    return encode(batch.keys, batch.values, fields, owner, n, fields)


class PredictClient:
    def __init__(
        self,
        address: str,
        model: str = "ctr",
        schema: FeatureSchema | None = None,
        fields: Sequence[str] | None = None,
        timeout: float = 10.0,
        identity: Identity | None = None,
    ) -> None:
        """identity: TLS and token to call with (default: the process's, ctr.security)."""
        self.channel = open_channel(address, identity=identity)
        self.stub = predict_pb2_grpc.PredictorStub(self.channel)
        self.model = model
        self.schema = schema
        self._encoder = RequestEncoder(schema, fields) if fields is not None else None
        self.timeout = timeout

    @property
    def encoder(self) -> RequestEncoder:
        """The encoder for the served model's fields (asked of serving on first use)."""
        if self._encoder is None:
            self._encoder = RequestEncoder(self.schema, list(self.status().fields))
        return self._encoder

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

    def predict(self, items: Sequence[Mapping[str, Value]], context: Mapping[str, Value] | None = None) -> Prediction:
        return self.predict_encoded(self.encoder.encode(items, context))

    def predict_columns(self, items: Mapping[str, ColumnValues], context: Mapping[str, ColumnValues] | None = None) -> Prediction:
        return self.predict_encoded(self.encoder.encode_columns(items, context))

    def predict_encoded(self, req: EncodedRequest) -> Prediction:
        resp = self.stub.Predict(self.to_proto(req), timeout=self.timeout)
        return Prediction(np.asarray(resp.scores, dtype=np.float32), resp.model, resp.version)

    def to_proto(self, req: EncodedRequest) -> predict_pb2.PredictRequest:
        return predict_pb2.PredictRequest(
            model=self.model,
            item_count=req.item_count,
            dictionary=req.dictionary,
            values=req.values,
            context=req.context,
            items=req.items,
            fields=req.fields,
            tokens=req.tokens,
            compression=req.compression,
        )

    def status(self) -> predict_pb2.ModelStatusResponse:
        return self.stub.ModelStatus(predict_pb2.ModelStatusRequest(model=self.model), timeout=self.timeout)

    def close(self) -> None:
        self.channel.close()
