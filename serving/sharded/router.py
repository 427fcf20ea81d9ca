"""The front end of sharded serving (`boundless serve --router --shard-replicas ...`): it decodes a
request, sends each serving shard the request's keys that the shard owns, and finishes the
scores. LR and FM shards answer with a few partial sums per item (ctr.model.partial_sums); FFM
and the DNNs fetch the rows and score here. The router follows the repository's policy
like any replica, holding the spec and the dense weights only; shards answering with
another version (a swap in progress) are asked again, a few times, before UNAVAILABLE."""

from __future__ import annotations

import time

import grpc
import numpy as np
import numpy.typing as npt

from ctr.model.family import Request
from ctr.model.first_use import in_first_use_order
from ctr.model.partial_sums import finish_fm, sum_squares_per_item
from protos import predict_pb2
from serving.loading.servable import ServableModel
from serving.loading.watcher import ModelWatcher
from serving.sharded.fanout import FanOut, FanOutError
from serving.sharded.request_split import KeySplit, split_request_features, split_request_keys

SKEW_RETRIES = 3
SKEW_WAIT_S = 0.02


class Router:
    def __init__(self, fanout: FanOut, watcher: ModelWatcher) -> None:
        self.fanout = fanout
        self.watcher = watcher

    def score(self, model: ServableModel, req: Request) -> tuple[npt.NDArray[np.float32], int]:
        """Scores and the version they come from: the router's, which every shard confirmed."""
        if model.family.first_use and not model.family.partial_sums:
            # the rows are fetched here: in the order the items read them, only those they name
            req = in_first_use_order(req)
        split = split_request_keys(req.keys, model.shard_count, len(self.fanout))
        for attempt in range(SKEW_RETRIES + 1):
            if model.family.partial_sums:
                scores, versions = self._partial(model, req, split)
            else:
                scores, versions = self._rows(model, req, split)
            if all(v == model.version for v in versions):
                return scores, model.version
            self.watcher.wake()
            if attempt < SKEW_RETRIES:
                time.sleep(SKEW_WAIT_S)
        raise FanOutError(
            grpc.StatusCode.UNAVAILABLE, f"the shards serve versions {sorted(set(versions))}, this router {model.version}"
        )

    def _rows(self, model: ServableModel, req: Request, split: KeySplit) -> tuple[npt.NDArray[np.float32], list[int]]:
        b = split.bounds
        where = [split.order[b[j] : b[j + 1]] for j in range(len(self.fanout))]
        answers = self.fanout.call(
            "Lookup", [predict_pb2.LookupRequest(model=model.name, keys=req.keys[w].tobytes()) for w in where]
        )
        width = sum(d for _, d in model.columns.values())  # the kernels index rows by it
        rows = np.empty((req.keys.shape[0], width), dtype=np.float32)
        for w, a in zip(where, answers, strict=True):
            if int(a.width) != width or len(a.rows) != 4 * width * w.shape[0]:
                raise FanOutError(grpc.StatusCode.INTERNAL, f"a shard answered rows {a.width} wide; this version's are {width}")
            rows[w] = np.frombuffer(a.rows, dtype="<f4").reshape(-1, width)
        return model.score(req, rows), [int(a.version) for a in answers]

    def _partial(self, model: ServableModel, req: Request, keys: KeySplit) -> tuple[npt.NDArray[np.float32], list[int]]:
        n_items = req.item_offsets.shape[0] - 1
        feats = split_request_features(keys, len(self.fanout), req.context, req.item_offsets, req.item_indices)
        kb, cb, ib = keys.bounds, feats.context_bounds, feats.index_bounds
        values = req.values.astype("<f4", copy=False)
        asks = []
        for j in range(len(self.fanout)):
            mine = keys.order[kb[j] : kb[j + 1]]
            asks.append(
                predict_pb2.PartialRequest(
                    model=model.name,
                    item_count=n_items,
                    keys=req.keys[mine].tobytes(),
                    values=values[mine].tobytes(),
                    context=feats.context[cb[j] : cb[j + 1]].astype("<i4", copy=False).tobytes(),
                    offsets=feats.offsets[j].astype("<i4", copy=False).tobytes(),
                    indices=feats.indices[ib[j] : ib[j + 1]].astype("<i4", copy=False).tobytes(),
                )
            )
        answers = self.fanout.call("Partial", asks)
        k = model.family.partial_factors(model.spec)
        total = np.zeros((n_items, 1 + 2 * k), dtype=np.float64)
        for a in answers:
            if int(a.width) != 1 + 2 * k or len(a.sums) != 4 * n_items * (1 + 2 * k):
                raise FanOutError(grpc.StatusCode.INTERNAL, "a shard answered partial sums of another shape")
            total += np.frombuffer(a.sums, dtype="<f4").reshape(n_items, 1 + 2 * k)
        scale = np.ones(n_items)
        if k and model.spec.pair_norm:
            sq = sum_squares_per_item(req.context, req.item_offsets, req.item_indices, req.values)
            scale = np.where(sq > 0, 1.0 / np.where(sq > 0, sq, 1.0), 0.0)
        return finish_fm(total, k, model.bias, scale), [int(a.version) for a in answers]
