"""Prometheus metrics of the prediction service."""

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter("boundless_serving_requests_total", "Predict requests", ["code"])
ITEMS = Counter("boundless_serving_items_total", "items scored")
LATENCY = Histogram(
    "boundless_serving_predict_seconds",
    "Predict latency inside the server",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5),
)
VERSION = Gauge("boundless_serving_model_version", "version being served")
KEYS = Gauge("boundless_serving_model_keys", "keys in the served version")
LOAD_FAILURES = Counter("boundless_serving_load_failures_total", "versions that failed to load")
