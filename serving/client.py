"""Python client of the prediction service: encodes plain dicts compactly, so callers never
hand-build bytes.

    client = PredictClient("127.0.0.1:50051")
    result = client.predict(items=[{"item": "42"}, {"item": "7"}], context={"user": "u1"})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import grpc
import numpy as np
import numpy.typing as npt

from ctr.batch import SampleBatch
from ctr.formats import FieldEncoder, ParsedSample
from ctr.hashing import hash_features
from ctr.schema import FeatureSchema
from protos import predict_pb2, predict_pb2_grpc
from serving.encoding import EncodedRequest, encode

# a categorical value, a number (bucketed when the schema says the field is numeric),
# or (token, value) for a weighted feature such as libsvm's index:value
Value = str | int | float | tuple[str, float]


@dataclass(frozen=True)
class Prediction:
    scores: npt.NDArray[np.float32]
    model: str
    version: int


class RequestEncoder:
    def __init__(self, schema: FeatureSchema | None = None) -> None:
        self.fields = FieldEncoder(schema or FeatureSchema())

    def encode(self, items: Sequence[Mapping[str, Value]], context: Mapping[str, Value] | None = None) -> EncodedRequest:
        ranks: dict[str, int] = {}
        acc = ParsedSample(0.0, [], [], [])
        owner: list[int] = []
        rank: list[int] = []
        for who, features in [(-1, context or {}), *enumerate(items)]:
            for name, raw in features.items():
                before = len(acc.tokens)
                if isinstance(raw, tuple):
                    acc.fields.append(self.fields.field(name))
                    acc.tokens.append(str(raw[0]))
                    acc.values.append(float(raw[1]))
                else:
                    self.fields.add(acc, name, str(raw))
                added = len(acc.tokens) - before
                owner += [who] * added
                rank += [ranks.setdefault(name, len(ranks))] * added
        keys = hash_features(acc.fields, acc.tokens)
        return encode(
            keys, np.asarray(acc.values, np.float32), np.asarray(rank, np.int64), np.asarray(owner, np.int64), len(items)
        )


def encode_batch(batch: SampleBatch) -> EncodedRequest:
    """A request scoring every sample of a parsed batch as one item (no shared context)."""
    n = len(batch)
    counts = np.diff(batch.offsets)
    owner = np.repeat(np.arange(n, dtype=np.int64), counts)
    rank = np.arange(batch.keys.shape[0], dtype=np.int64) - np.repeat(batch.offsets[:-1], counts)
    return encode(batch.keys, batch.values, rank, owner, n)


class PredictClient:
    def __init__(self, address: str, model: str = "ctr", schema: FeatureSchema | None = None, timeout: float = 10.0) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = predict_pb2_grpc.PredictorStub(self.channel)
        self.model = model
        self.encoder = RequestEncoder(schema)
        self.timeout = timeout

    def wait_ready(self, timeout: float = 30.0) -> None:
        grpc.channel_ready_future(self.channel).result(timeout=timeout)

    def predict(self, items: Sequence[Mapping[str, Value]], context: Mapping[str, Value] | None = None) -> Prediction:
        return self.predict_encoded(self.encoder.encode(items, context))

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
        )

    def status(self) -> predict_pb2.ModelStatusResponse:
        return self.stub.ModelStatus(predict_pb2.ModelStatusRequest(model=self.model), timeout=self.timeout)

    def close(self) -> None:
        self.channel.close()
