"""Prometheus metrics of the model manager."""

from prometheus_client import Counter, Gauge

PUBLISHED = Counter("boundless_modelmgr_published_total", "versions published")
REJECTED = Counter("boundless_modelmgr_rejected_total", "exports rejected, by stage", ["stage"])
STAGES = ("identity", "lineage", "schema", "verify", "gate", "order", "internal")  # modelmgr.publish.decide.Reject
for _stage in STAGES:  # every stage's series from the start: a rate() or an alert sees 0, not no data
    REJECTED.labels(_stage)
LATEST = Gauge("boundless_modelmgr_latest_version", "newest published version")
ROLLBACKS = Counter("boundless_modelmgr_auto_rollbacks_total", "live versions rolled back for falling behind their predecessor")
STORAGE_FAILURES = Counter(
    "boundless_modelmgr_storage_failures_total",
    "exports left for the next scan: the repository could not be written (a full disk, S3 unreachable)",
)
NOTIFY_FAILURES = Counter("boundless_modelmgr_notify_failures_total", "serving replicas that did not take a refresh")
HOLDOUT_AUC = Gauge("boundless_modelmgr_holdout_auc", "AUC on the newest holdout", ["role"])
