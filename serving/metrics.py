"""Prometheus metrics of the prediction service."""

from typing import NoReturn

import grpc
from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter("boundless_serving_requests_total", "Predict requests", ["code"])
for _code in ("OK", "INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL"):
    REQUESTS.labels(_code)  # each code a Predict answers with, at 0 from the start: an error rate has its series
ITEMS = Counter("boundless_serving_items_total", "items scored")
REST_CONNECTIONS_REFUSED = Counter(
    "boundless_serving_rest_connections_refused_total",
    "REST connections answered 503 and closed: --rest-max-connections were open (many clients, or slow ones)",
)
UNKNOWN_FEATURES = Counter(
    "boundless_serving_unknown_features_total",
    "features that clients dropped because the model has no field of their name (a client and model that disagree)",
)
LATENCY = Histogram(
    "boundless_serving_predict_seconds",
    "Predict latency inside the server",
    # fine around the few milliseconds a 200-item request takes, so a p99 near a 5 ms
    # objective reads from the buckets instead of between 2 and 5 ms
    buckets=(0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.5),
)
VERSION_LATENCY = Histogram(
    "boundless_serving_version_predict_seconds",
    "scoring time per model and version label (stable: the policy's version), live or as a shadow",
    ["model", "label", "path"],
    buckets=(0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.5),
)
SHADOW_DIFF = Histogram(
    "boundless_serving_shadow_score_difference",
    "mean absolute difference between a shadow's scores and the live answer's, per request",
    ["model", "label"],
    buckets=(1e-6, 1e-5, 1e-4, 1e-3, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0),
)
SHADOW_DROPPED = Counter(
    "boundless_serving_shadow_dropped_total", "shadow copies dropped: the queue was full", ["model", "label"]
)
SHADOW_FAILED = Counter("boundless_serving_shadow_failed_total", "shadow copies that failed to score", ["model", "label"])
IN_FLIGHT = Gauge(
    "boundless_serving_requests_in_flight",
    "requests holding a model version now; they share the scoring threads (--score-threads)",
)
VERSION = Gauge("boundless_serving_model_version", "version being served", ["model"])
KEYS = Gauge("boundless_serving_model_keys", "keys in the served version", ["model"])
LOAD_FAILURES = Counter("boundless_serving_load_failures_total", "versions that failed to load", ["model"])
REFUSED_VERSIONS = Counter(
    "boundless_serving_versions_over_budget_total",
    "versions not loaded because their files pass the model's memory budget (--model-memory-mb)",
    ["model"],
)
HEDGED = Counter("boundless_serving_hedged_requests_total", "second requests the router sent to a slow shard's next replica")
FANOUT_FAILURES = Counter("boundless_serving_fanout_failures_total", "router fan-outs that failed", ["code"])
SHARD_SECONDS = Histogram(
    "boundless_serving_shard_call_seconds",
    "router to shard answer time",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5),
)


def abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    """Ends the call with `code`, counted in the request metrics (by code)."""
    REQUESTS.labels(code.name).inc()
    context.abort(code, message)
    raise AssertionError("unreachable")  # context.abort raises
