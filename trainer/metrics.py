"""Prometheus metrics of the trainer."""

from prometheus_client import Counter, Gauge

SAMPLES = Counter("boundless_trainer_samples_total", "samples trained")
BAD_LINES = Counter("boundless_trainer_bad_lines_total", "input lines rejected by the parser")
EXPORTS = Counter("boundless_trainer_exports_total", "exports requested")
WINDOW_AUC = Gauge("boundless_trainer_window_auc", "progressive AUC over the window")
WINDOW_LOGLOSS = Gauge("boundless_trainer_window_logloss", "progressive logloss over the window")
PUSH_BYTES = Counter("boundless_trainer_push_bytes_total", "bytes this trainer put on the wire for pushes (headers, keys)")
PULL_BYTES = Counter("boundless_trainer_pull_bytes_total", "bytes of pull requests and replies (headers, keys, rows)")
