"""Thin gRPC servicer of the prediction service."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping

import grpc
import numpy as np

from ctr.data.schema import FeatureSchema
from protos import predict_pb2, predict_pb2_grpc
from serving import metrics
from serving.loading.servable import ServableModel
from serving.loading.shard_part import WHOLE
from serving.loading.watcher import ModelWatcher, NotLoaded
from serving.metrics import abort
from serving.request.encoding import TRANSFORM_CHANGED, EncodedRequest, EncodingError, decode, field_hash_ids
from serving.scoring.shadow import ShadowScorer
from serving.sharded.fanout import FanOutError
from serving.sharded.router import Router


class PredictorServicer(predict_pb2_grpc.PredictorServicer):
    def __init__(
        self,
        watchers: ModelWatcher | Mapping[str, ModelWatcher],
        max_items: int = 20000,
        router: Router | None = None,
        strict_features: bool = False,
        shadow: ShadowScorer | None = None,
    ) -> None:
        # one watcher per model served (serve --models a,b): a request names its model
        self.watchers = dict(watchers) if isinstance(watchers, Mapping) else {watchers.repo.model: watchers}
        self.max_items = max_items
        self.shadow = shadow  # scores labelled versions' shadow copies off the request path
        self._count = itertools.count()  # requests without a routing key take shadow shares by count
        self.router = router  # sharded serving: the shards hold the rows
        self.strict_features = strict_features  # refuse every request that names a field the model lacks

    def watcher_for(self, name: str, context: grpc.ServicerContext) -> ModelWatcher:
        """The watcher of the model a call names; a call naming none goes to the one model
        of a one-model server (NOT_FOUND for a model not served, INVALID_ARGUMENT for no
        name where several are)."""
        if name:
            found = self.watchers.get(name)
            if found is None:
                served = ", ".join(map(repr, sorted(self.watchers)))
                abort(context, grpc.StatusCode.NOT_FOUND, f"model: {name!r} is not served here (serving {served})")
            return found
        if len(self.watchers) == 1:
            return next(iter(self.watchers.values()))
        served = ", ".join(map(repr, sorted(self.watchers)))
        abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"model: this server serves {served}: name the model")

    def Predict(self, request: predict_pb2.PredictRequest, context: grpc.ServicerContext) -> predict_pb2.PredictResponse:
        start = time.perf_counter()
        watcher = self.watcher_for(request.model, context)
        try:
            routed = watcher.use_routed(request.routing_key, request.label, request.version)
            with routed as (label, model):  # the whole request uses this version
                return self._predict(request, context, watcher, model, start, label)
        except NotLoaded as e:  # raised before the block: the request named a version not loaded here
            abort(context, grpc.StatusCode.NOT_FOUND, str(e))

    def _predict(
        self,
        request: predict_pb2.PredictRequest,
        context: grpc.ServicerContext,
        watcher: ModelWatcher,
        model: ServableModel | None,
        start: float,
        label: str = "stable",
    ) -> predict_pb2.PredictResponse:
        if model is None:
            abort(context, grpc.StatusCode.UNAVAILABLE, f"no version of model {watcher.repo.model!r} is loaded yet")
        if request.item_count > self.max_items:
            abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"Predict: item_count {request.item_count} above this server's {self.max_items}",
            )
        if self.router is None and model.part != WHOLE:
            abort(context, grpc.StatusCode.FAILED_PRECONDITION, f"this is serving shard {model.part}: send Predict to the router")
        if request.model and request.model != model.name:
            abort(context, grpc.StatusCode.NOT_FOUND, f"model: {request.model!r} is not served here (serving {model.name!r})")
        if request.transform_digest and request.transform_digest != model.transform_digest:
            abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{TRANSFORM_CHANGED}: version {model.version} ({label}) has {model.spec.field_count} fields"
                f" ({', '.join(model.spec.fields[:6])}{', ...' if model.spec.field_count > 6 else ''}) and its own"
                " transform, not the ones the request was encoded for: ask ModelStatus again (PredictClient does)",
            )
        if request.unknown_features:
            metrics.UNKNOWN_FEATURES.inc(request.unknown_features)
            if request.strict or self.strict_features:
                abort(context, grpc.StatusCode.INVALID_ARGUMENT, unknown_message(request, model))
        try:
            encoded = EncodedRequest(
                request.item_count,
                request.dictionary,
                request.values,
                request.context,
                request.items,
                request.fields,
                request.tokens,
                request.compression,
            )
            req = decode(
                encoded, max(1, model.spec.field_count), field_hash_ids(tuple(model.spec.fields)), both=model.splitter.both
            )
        except EncodingError as e:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"Predict: {e}")
        if model.spec.needs_fields and not request.fields and not request.tokens:
            abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"Predict: fields: a {model.spec.type} model needs field indices")
        version = model.version
        if self.router is not None:
            try:
                scores, version = self.router.score(model, req)
            except FanOutError as e:
                metrics.FANOUT_FAILURES.labels(e.code.name).inc()
                abort(context, e.code, f"Predict: {e}")
        else:
            scored = time.perf_counter()
            scores = model.score(req)
            metrics.VERSION_LATENCY.labels(model.name, label, "live").observe(time.perf_counter() - scored)
            watcher.remember(req)  # the router holds no rows to warm
            if self.shadow is not None and watcher.labels:
                for shadow_label, shadow_model in watcher.shadows(request.routing_key, next(self._count)):
                    if shadow_model is not model:
                        self.shadow.submit(model.name, shadow_label, shadow_model, req, scores)
        if not np.isfinite(scores).all():  # never an OK answer with NaN scores
            abort(context, grpc.StatusCode.INTERNAL, f"version {version} gave a non-finite score")
        metrics.REQUESTS.labels("OK").inc()
        metrics.ITEMS.inc(request.item_count)
        metrics.LATENCY.observe(time.perf_counter() - start)
        return predict_pb2.PredictResponse(
            scores=scores.tolist(), model=model.name, version=version, unknown_features=request.unknown_features, label=label
        )

    def Refresh(self, request: predict_pb2.RefreshRequest, context: grpc.ServicerContext) -> predict_pb2.RefreshResponse:
        if not request.model and len(self.watchers) > 1:  # the manager of one model says its repository changed
            for w in self.watchers.values():
                w.wake()
            return predict_pb2.RefreshResponse(version=0)
        watcher = self.watcher_for(request.model, context)
        watcher.wake()
        current = watcher.current
        return predict_pb2.RefreshResponse(version=current.version if current is not None else 0)

    def ModelStatus(
        self, request: predict_pb2.ModelStatusRequest, context: grpc.ServicerContext
    ) -> predict_pb2.ModelStatusResponse:
        watcher = self.watcher_for(request.model, context)
        model = watcher.current
        if model is None:
            why = f": {watcher.last_error}" if watcher.last_error else ""
            abort(context, grpc.StatusCode.UNAVAILABLE, f"no version of model {watcher.repo.model!r} is loaded yet{why}")
        return predict_pb2.ModelStatusResponse(
            model=model.name,
            version=model.version,
            base_version=model.base_version,
            policy=watcher.policy.describe(),  # as last read: a call never waits on the repository
            keys=model.keys,
            loaded_at=model.loaded_at,
            model_type=model.spec.type,
            fields=list(model.spec.fields),
            transform=transform_of(model.schema),
            load_error=watcher.last_error,
            served=sorted(self.watchers),
            shadows=[e.to_message() for e in (self.shadow.evidence(model.name) if self.shadow is not None else [])],
            labels=labelled_versions(watcher),
        )


def labelled_versions(watcher: ModelWatcher) -> list[predict_pb2.LabelledVersion]:
    entries = watcher.labels  # read once: the watcher replaces it whole
    return [
        predict_pb2.LabelledVersion(label=label, version=m.version, share=entry.share, shadow=entry.shadow)
        for label, m in watcher.loaded()
        if (entry := entries.get(label)) is not None
    ]


def transform_of(schema: FeatureSchema) -> predict_pb2.FeatureTransform:
    return predict_pb2.FeatureTransform(
        format=schema.format,
        label=schema.label,
        numeric=list(schema.numeric),
        skip=list(schema.skip),
        cross=[predict_pb2.FieldCross(a=a, b=b) for a, b in schema.cross],
        multi_valued=[predict_pb2.MultiValued(field=f, separator=sep) for f, sep in schema.multi_valued],
        delimiter=schema.delimiter,
        number_text=dict(schema.number_text),
    )


def unknown_message(request: predict_pb2.PredictRequest, model: ServableModel) -> str:
    names = ", ".join(repr(n) for n in request.unknown_fields[:5])
    known = ", ".join(model.spec.fields[:8]) + (", ..." if len(model.spec.fields) > 8 else "")
    return (
        f"Predict: {request.unknown_features} feature(s) of fields model {model.name!r} does not have: {names}"
        f" (its fields: {known}); strict feature checking refuses them"
    )
