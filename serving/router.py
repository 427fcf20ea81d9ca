"""The front end of sharded serving (`boundless serve --router --shards ...`): it decodes a
request, sends each serving shard the request's keys that the shard owns, and finishes the
scores. LR and FM shards answer with a few partial sums per item (serving.kernels); FFM
and the DNNs fetch the rows and score here. The router follows the repository's policy
like any replica, holding the spec and the dense weights only; shards answering with
another version (a swap in progress) are asked again, a few times, before UNAVAILABLE."""

from __future__ import annotations

import time

import grpc
import numpy as np
import numpy.typing as npt

from ctr.routing import shard_of
from protos import predict_pb2
from serving.encoding import DecodedRequest
from serving.fanout import FanOut, FanOutError
from serving.kernels import finish_fm, sum_squares_per_item
from serving.model import ServableModel
from serving.watcher import ModelWatcher

SKEW_RETRIES = 3
SKEW_WAIT_S = 0.02


class Router:
    def __init__(self, fanout: FanOut, watcher: ModelWatcher) -> None:
        self.fanout = fanout
        self.watcher = watcher

    def score(self, model: ServableModel, req: DecodedRequest) -> tuple[npt.NDArray[np.float32], int]:
        """Scores and the version they come from: the router's, which every shard confirmed."""
        owner = shard_of(np.ascontiguousarray(req.keys, dtype=np.uint64), model.shard_count) % len(self.fanout)
        for attempt in range(SKEW_RETRIES + 1):
            if model.spec.type in ("lr", "fm"):
                scores, versions = self._partial(model, req, owner)
            else:
                scores, versions = self._rows(model, req, owner)
            if all(v == model.version for v in versions):
                return scores, model.version
            self.watcher.wake()
            if attempt < SKEW_RETRIES:
                time.sleep(SKEW_WAIT_S)
        raise FanOutError(
            grpc.StatusCode.UNAVAILABLE, f"the shards serve versions {sorted(set(versions))}, this router {model.version}"
        )

    def _rows(
        self, model: ServableModel, req: DecodedRequest, owner: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.float32], list[int]]:
        where = [np.flatnonzero(owner == j) for j in range(len(self.fanout))]
        answers = self.fanout.call(
            "Lookup", [predict_pb2.LookupRequest(model=model.name, keys=req.keys[w].tobytes()) for w in where]
        )
        width = sum(d for _, d in model.columns.values())  # the kernels index rows by it
        rows = np.zeros((req.keys.shape[0], width), dtype=np.float32)
        for w, a in zip(where, answers, strict=True):
            if int(a.width) != width or len(a.rows) != 4 * width * w.shape[0]:
                raise FanOutError(grpc.StatusCode.INTERNAL, f"a shard answered rows {a.width} wide; this version's are {width}")
            rows[w] = np.frombuffer(a.rows, dtype="<f4").reshape(-1, width)
        return model.score(req, rows), [int(a.version) for a in answers]

    def _partial(
        self, model: ServableModel, req: DecodedRequest, owner: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.float32], list[int]]:
        n_items = req.item_offsets.shape[0] - 1
        item_of = np.repeat(np.arange(n_items), np.diff(req.item_offsets))
        local = np.empty(req.keys.shape[0], dtype=np.int64)
        asks = []
        for j in range(len(self.fanout)):
            mine = np.flatnonzero(owner == j)
            local[mine] = np.arange(mine.shape[0])
            ctx = req.context[owner[req.context] == j]
            sel = owner[req.item_indices] == j
            offsets = np.concatenate([[0], np.cumsum(np.bincount(item_of[sel], minlength=n_items))])
            asks.append(
                predict_pb2.PartialRequest(
                    model=model.name,
                    item_count=n_items,
                    keys=req.keys[mine].tobytes(),
                    values=req.values[mine].astype("<f4").tobytes(),
                    context=local[ctx].astype("<i4").tobytes(),
                    offsets=offsets.astype("<i4").tobytes(),
                    indices=local[req.item_indices[sel]].astype("<i4").tobytes(),
                )
            )
        answers = self.fanout.call("Partial", asks)
        k = model.spec.k if model.spec.type == "fm" else 0
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
