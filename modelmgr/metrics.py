"""Prometheus metrics of the model manager."""

from prometheus_client import Counter, Gauge

PUBLISHED = Counter("boundless_modelmgr_published_total", "versions published")
REJECTED = Counter("boundless_modelmgr_rejected_total", "exports rejected (verification or gate)")
LATEST = Gauge("boundless_modelmgr_latest_version", "newest published version")
