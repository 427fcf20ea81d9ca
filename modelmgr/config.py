"""Model-manager daemon configuration."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelMgrConfig:
    exports: str = field(default="exports", metadata={"help": "folder the trainer exports into"})
    repo: str = field(default="repo", metadata={"help": "model repository folder"})
    model: str = field(default="ctr", metadata={"help": "model name"})
    poll_s: float = field(default=0.5, metadata={"help": "seconds between scans of the exports"})
    min_auc: float = field(default=0.5, metadata={"help": "quality gate: lowest window AUC"})
    max_logloss: float = field(default=1.0, metadata={"help": "quality gate: highest window logloss"})
    min_samples: int = field(default=1000, metadata={"help": "quality gate: window size needed to judge"})
    host: str = field(default="127.0.0.1", metadata={"help": "address for health and metrics"})
    port: int = field(default=0, metadata={"help": "gRPC health port (0 picks a free one)"})
    metrics_port: int = field(default=0, metadata={"help": "Prometheus port (0 picks a free one)"})
    ready_file: str | None = field(default=None, metadata={"help": "write bound ports here as JSON"})
    log_level: str = field(default="INFO", metadata={"help": "logging level"})
