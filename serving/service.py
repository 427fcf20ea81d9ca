"""Thin gRPC servicer of the prediction service."""

from __future__ import annotations

import time
from typing import NoReturn

import grpc
import numpy as np

from protos import predict_pb2, predict_pb2_grpc
from serving import metrics
from serving.encoding import EncodedRequest, EncodingError, decode
from serving.kernels import lr_score_items
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
            req = decode(EncodedRequest(request.item_count, request.dictionary, request.values, request.context, request.items))
        except EncodingError as e:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"Predict: {e}")
        contrib = np.ascontiguousarray(model.weights(req.keys)[:, 0]) * req.values
        scores = lr_score_items(req.context, req.item_offsets, req.item_indices, contrib, model.bias)
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
        )
