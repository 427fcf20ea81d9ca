"""The ShardScorer servicer of a serving shard (`boundless serve --shard i/N`): rows, or LR
and FM partial sums per item, for the keys it owns; the router does the rest."""

from __future__ import annotations

import grpc
import numpy as np
import numpy.typing as npt

from protos import predict_pb2, predict_pb2_grpc
from serving import metrics
from serving.loading.watcher import ModelWatcher
from serving.metrics import abort
from serving.request.encoding import DecodedRequest


def _array(context: grpc.ServicerContext, raw: bytes, dtype: str, name: str) -> npt.NDArray[np.generic]:
    size = np.dtype(dtype).itemsize
    if len(raw) % size:
        abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"{name}: {len(raw)} bytes is not a whole number of {dtype}")
    return np.frombuffer(raw, dtype=dtype)


EMPTY_LISTS = (np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64))  # no context, no items


class ShardScorerServicer(predict_pb2_grpc.ShardScorerServicer):
    def __init__(self, watcher: ModelWatcher) -> None:
        self.watcher = watcher

    def Lookup(self, request: predict_pb2.LookupRequest, context: grpc.ServicerContext) -> predict_pb2.LookupResponse:
        with self.watcher.use() as model:
            if model is None:
                abort(context, grpc.StatusCode.UNAVAILABLE, "no model version is loaded yet")
            keys = _array(context, request.keys, "<u8", "keys").astype(np.uint64)
            rows = model.rows(keys)
            self.watcher.remember(DecodedRequest(keys, np.ones(0, np.float32), np.zeros(0, np.int32), *EMPTY_LISTS))
            metrics.REQUESTS.labels("OK").inc()
            return predict_pb2.LookupResponse(rows=rows.tobytes(), width=rows.shape[1], version=model.version)

    def Partial(self, request: predict_pb2.PartialRequest, context: grpc.ServicerContext) -> predict_pb2.PartialResponse:
        with self.watcher.use() as model:
            if model is None:
                abort(context, grpc.StatusCode.UNAVAILABLE, "no model version is loaded yet")
            if not model.family.partial_sums:
                abort(context, grpc.StatusCode.FAILED_PRECONDITION, f"Partial: a {model.spec.type} model sends rows (Lookup)")
            keys = _array(context, request.keys, "<u8", "keys").astype(np.uint64)
            values = _array(context, request.values, "<f4", "values").astype(np.float32)
            ctx = _array(context, request.context, "<i4", "context").astype(np.int64)
            offsets = _array(context, request.offsets, "<i4", "offsets").astype(np.int64)
            indices = _array(context, request.indices, "<i4", "indices").astype(np.int64)
            n = keys.shape[0]
            if values.shape[0] != n:
                abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"values: {values.shape[0]} for {n} keys")
            if offsets.shape[0] != request.item_count + 1 or offsets[0] != 0 or offsets[-1] != indices.shape[0]:
                abort(context, grpc.StatusCode.INVALID_ARGUMENT, "offsets: not item_count + 1 bounds of indices")
            if (np.diff(offsets) < 0).any():
                abort(context, grpc.StatusCode.INVALID_ARGUMENT, "offsets: not ascending")
            for name, idx in (("context", ctx), ("indices", indices)):
                if idx.shape[0] and (idx.min() < 0 or idx.max() >= n):
                    abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"{name}: an index outside the {n} keys")
            req = DecodedRequest(keys, values, np.zeros(n, np.int32), ctx, offsets, indices)
            sums = model.partial(req)
            self.watcher.remember(req)
            metrics.REQUESTS.labels("OK").inc()
            return predict_pb2.PartialResponse(sums=sums.tobytes(), width=sums.shape[1], version=model.version)
