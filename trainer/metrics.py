"""Prometheus metrics of the trainer."""

from prometheus_client import Counter, Gauge, Histogram

SAMPLES = Counter("boundless_trainer_samples_total", "samples trained")
BAD_LINES = Counter("boundless_trainer_bad_lines_total", "input lines rejected by the parser")
SOURCE_FILES_LOST = Counter(
    "boundless_trainer_source_files_lost_total",
    "files (or S3 objects) of the stream not trained: removed before they were read whole (a retention ahead of the"
    " trainer), or changed after the checkpoint cut under a name before its file (landed late)",
)
SOURCE_MESSAGES_LOST = Counter(
    "boundless_trainer_source_messages_lost_total",
    "messages of a Kafka topic not trained: removed by the topic's retention before the trainer read them",
)
SOURCE_S3_FAILURES = Counter(
    "boundless_trainer_source_s3_failures_total",
    "listings and reads of an S3 prefix's objects that failed (S3 or the network down): the stream waited and tried again",
)
SOURCE_KAFKA_FAILURES = Counter(
    "boundless_trainer_source_kafka_failures_total",
    "questions to a Kafka topic's broker that went unanswered while the stream had no message (the broker or the"
    " network down): the stream waited and asked again",
)
SOURCE_PARTITIONS_RESET = Counter(
    "boundless_trainer_source_partitions_reset_total",
    "Kafka partitions read again from their oldest message: the stream's offset named none of their messages (the topic"
    " was deleted and created again, or truncated)",
)
EXPORTS = Counter("boundless_trainer_exports_total", "exports written (each READY once its holdout has come)")
EXPORTS_READY = Counter("boundless_trainer_exports_ready_total", "exports marked READY for the model manager")
EXPORT_HOLDOUT_NEEDED = Gauge(
    "boundless_trainer_export_holdout_needed_samples",
    "samples the newest export still waits for before it is READY (its holdout: read after it, never trained on it); 0: none"
    " waits. Above 0 for long: the stream is quiet, and no new version is published until it brings them",
)
EXPORT_FAILURES = Counter(
    "boundless_trainer_export_failures_total", "exports that could not be written (a full export disk): training went on"
)
WINDOW_AUC = Gauge("boundless_trainer_window_auc", "progressive AUC over the window")
WINDOW_LOGLOSS = Gauge("boundless_trainer_window_logloss", "progressive logloss over the window")
PROGRESSIVE_LOGLOSS = Gauge("boundless_trainer_progressive_logloss", "progressive logloss over every sample trained")
PUSH_BYTES = Counter("boundless_trainer_push_bytes_total", "bytes this trainer put on the wire for pushes (headers, keys)")
PULL_BYTES = Counter("boundless_trainer_pull_bytes_total", "bytes of pull requests and replies (headers, keys, rows)")
WIRE_BYTES = Counter(
    "boundless_trainer_wire_bytes_total",
    "serialized bytes of PS calls: per table and kind (sparse/dense pull/push, drain_<cause>, control), sent and received",
    ["table", "kind", "direction"],
)
MLP_STEPS = Counter("boundless_trainer_mlp_steps_total", "Adam steps of the MLP (wdl, deepfm) on this trainer")
MLP_CLIPPED = Counter(
    "boundless_trainer_mlp_clipped_steps_total",
    "Adam steps of the MLP whose mean gradient was scaled down to the optimizer's clip_norm",
)
MLP_WAITING_SAMPLES = Gauge(
    "boundless_trainer_mlp_waiting_samples",
    "samples whose MLP gradients wait for --mlp-step-positives positives and negatives before a step",
)
RECOVERIES = Counter("boundless_trainer_recoveries_total", "times a PS shard restarted and every shard went back to a common cut")
BACKLOG = {  # what the stream holds past the trained position (the trainer's lag)
    "bytes": Gauge(
        "boundless_trainer_backlog_bytes",
        "bytes on disk of the source's files past the trained position (within a compressed or Parquet file:"
        " estimated from the bytes on disk read per byte of its text)",
    ),
    "messages": Gauge("boundless_trainer_backlog_messages", "messages of the topic's partitions past the trained position"),
}
EXPORT_SECONDS = Histogram(
    "boundless_trainer_export_seconds",
    "one export: the shards' files, the dense weights and the manifest",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
CHECKPOINT_WRITE_SECONDS = Histogram(
    "boundless_trainer_checkpoint_write_seconds",
    "from a cut's snapshot to its commit on every shard (written in the background)",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
CHECKPOINT_STALL = Histogram(
    "boundless_trainer_checkpoint_stall_seconds",
    "training stalled per checkpoint (flush and snapshot; the write runs in the background)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CHECKPOINT_STALL_PARTS = Counter(
    "boundless_trainer_checkpoint_stall_part_seconds_total",
    "training stalled at checkpoints, by part: the pipeline's flush, the model's write (a DNN's"
    " dense tower), the residuals' drains, the prepare (with a group: the host's sums, the gather)",
    ["part"],
)
