"""Trainer daemon configuration."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TrainerConfig:
    source: str = field(default="-", metadata={"help": "file or folder to stream ('-' is stdin)"})
    format: str = field(default="auto", metadata={"help": "schema preset (criteo, avazu, libsvm, libffm, kv...) or auto"})
    schema: str | None = field(default=None, metadata={"help": "YAML feature schema; overrides --format"})
    ps: str = field(default="local", metadata={"help": "'local' or comma-separated shard addresses"})
    local_shards: int = field(default=1, metadata={"help": "in-process shards with --ps local"})
    table: str = field(default="w", metadata={"help": "sparse weight table"})
    bias_table: str = field(default="bias", metadata={"help": "dense bias table"})
    codec: str = field(default="fp32", metadata={"help": "push codec (fp32, fp16)"})
    alpha: float = field(default=0.5, metadata={"help": "FTRL alpha (with --ps local)"})
    beta: float = field(default=1.0, metadata={"help": "FTRL beta (with --ps local)"})
    l1: float = field(default=0.1, metadata={"help": "FTRL L1 (with --ps local)"})
    l2: float = field(default=1.0, metadata={"help": "FTRL L2 (with --ps local)"})
    batch_size: int = field(default=256, metadata={"help": "samples per mini-batch"})
    max_samples: int = field(default=0, metadata={"help": "stop after this many samples (0: no limit)"})
    follow: bool = field(default=True, metadata={"help": "keep reading as files grow and new files land"})
    idle_exit_s: float = field(default=0.0, metadata={"help": "with --follow, stop after this long without data (0: never)"})
    window: int = field(default=10000, metadata={"help": "samples in the progressive-metric window"})
    export_dir: str | None = field(default=None, metadata={"help": "folder for model exports; none disables them"})
    export_interval_s: float = field(default=10.0, metadata={"help": "seconds between delta exports"})
    full_every: int = field(default=10, metadata={"help": "every Nth export is a full one"})
    checkpoint_interval_s: float = field(default=0.0, metadata={"help": "seconds between PS checkpoints (0: off)"})
    resume: bool = field(default=False, metadata={"help": "resume the stream from the PS checkpoint's offsets"})
    model_name: str = field(default="ctr", metadata={"help": "model name written in exports"})
    metrics_out: str | None = field(default=None, metadata={"help": "write final metrics JSON here"})
    metrics_port: int = field(default=0, metadata={"help": "Prometheus port (0 picks a free one; -1 disables)"})
    ready_file: str | None = field(default=None, metadata={"help": "write bound ports here as JSON"})
    log_level: str = field(default="INFO", metadata={"help": "logging level"})
