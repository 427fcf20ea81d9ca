"""Thin gRPC servicer of the prediction service."""

from __future__ import annotations

import time
from typing import NoReturn

import grpc

from protos import predict_pb2, predict_pb2_grpc
from serving import metrics
from serving.encoding import EncodedRequest, EncodingError, decode
from serving.watcher import ModelWatcher


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    metrics.REQUESTS.labels(code.name).inc()
    context.abort(code, message)
    raise AssertionError("unreachable")  # context.abort raises


class PredictorServicer(predict_pb2_grpc.PredictorServicer):
    def __init__(self, watcher: ModelWatcher) -> None:
        self.watcher = watcher

    def Predict(self, request: predict_pb2.PredictRequest, context: grpc.ServicerContext) -> predict_pb2.PredictResponse:
        start = time.perf_counter()
        model = self.watcher.current  # one read: the whole request uses this version
        if model is None:
            _abort(context, grpc.StatusCode.UNAVAILABLE, "no model version is loaded yet")
        if request.model and request.model != model.name:
            _abort(context, grpc.StatusCode.NOT_FOUND, f"model: {request.model!r} is not served here (serving {model.name!r})")
        try:
            encoded = EncodedRequest(
                request.item_count, request.dictionary, request.values, request.context, request.items, request.fields
            )
            req = decode(encoded, max(1, model.spec.field_count))
        except EncodingError as e:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"Predict: {e}")
        if model.spec.needs_fields and not request.fields:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"Predict: fields: a {model.spec.type} model needs field indices")
        scores = model.score(req)
        metrics.REQUESTS.labels("OK").inc()
        metrics.ITEMS.inc(request.item_count)
        metrics.LATENCY.observe(time.perf_counter() - start)
        return predict_pb2.PredictResponse(scores=scores.tolist(), model=model.name, version=model.version)

    def ModelStatus(
        self, request: predict_pb2.ModelStatusRequest, context: grpc.ServicerContext
    ) -> predict_pb2.ModelStatusResponse:
        model = self.watcher.current
        if model is None:
            _abort(context, grpc.StatusCode.UNAVAILABLE, "no model version is loaded yet")
        return predict_pb2.ModelStatusResponse(
            model=model.name,
            version=model.version,
            base_version=model.base_version,
            policy=self.watcher.repo.policy().describe(),
            keys=model.keys,
            loaded_at=model.loaded_at,
            model_type=model.spec.type,
            fields=list(model.spec.fields),
        )
