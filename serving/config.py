"""Prediction-service configuration."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ctr.runtime.config import WRITES, ConfigError
from ctr.runtime.server_config import ServerConfig


@dataclass(frozen=True)
class DnnBatching:
    """When wdl and deepfm batch concurrent requests' items (serving.scoring.batcher)."""

    mode: str = "auto"  # auto: with CUDA only; on; off
    wait_s: float = 0.0005
    max_items: int = 16384
    cuda_graphs: bool = True  # replay captured CUDA graphs of the MLP (serving.scoring.mlp_cuda)

    def enabled(self, cuda: bool) -> bool:
        return self.mode == "on" or (self.mode == "auto" and cuda)


HELP_GROUPS: dict[str, tuple[str, ...]] = {
    "essential": (
        "repo",
        "model_name",
        "models",
        "model_memory_mb",
        "host",
        "port",
        "rest_port",
        "metrics_port",
        "processes",
        "strict_features",
    ),
    "sharded serving": ("shard_index", "shard_count", "router", "shard_replicas", "fanout_deadline_ms", "hedge_min_ms"),
    "scoring": ("score_threads", "score_spin_us", "dnn_batching", "dnn_batch_wait_ms", "dnn_batch_items", "dnn_cuda_graphs"),
    "limits": ("max_concurrent", "max_request_mb", "max_items"),
}
HELP_EXAMPLES = """\
  boundless serve --repo repo --port 7100
      serve the model 'ctr' of a local repository; the version its policy names
  boundless serve --repo s3://models --model-name criteo --strict-features
      another model, from S3, refusing requests that name fields it does not have
"""


@dataclass(frozen=True)
class ServingConfig(ServerConfig):
    repo: str = field(default="repo", metadata={"help": "model repository folder"})
    model_name: str = field(default="ctr", metadata={"help": "the served model's name in the repository"})
    models: str = field(
        default="",
        metadata={
            "help": "serve several models of the repository: names, comma-separated, or 'all' (the models it holds at"
            " start); a request names its model. Empty: --model-name alone"
        },
    )
    model_memory_mb: float = field(
        default=0.0,
        metadata={
            "help": "each model's budget: a version whose files take more is not loaded, and ModelStatus says why (0: none)"
        },
    )
    poll_s: float = field(default=0.5, metadata={"help": "seconds between policy checks"})
    rest_port: int = field(
        default=-1,
        metadata={"help": "REST/JSON port beside gRPC (POST /v1/models/NAME:predict; 0 picks a free one; -1: none)"},
    )
    rest_idle_s: float = field(
        default=60.0,
        metadata={
            "help": "a REST connection idle this long between requests, or stalled this long inside one (a slow or"
            " silent client, a TLS handshake never made), is closed"
        },
    )
    rest_max_connections: int = field(
        default=256,
        metadata={"help": "REST connections open at once (each holds a thread); one more is answered 503 and closed"},
    )
    processes: int = field(
        default=1,
        metadata={
            "help": "serving processes on the one port (SO_REUSEPORT), sharing the model's mapped files and a"
            " supervisor that restarts them and merges their metrics (0: one per core this process may use)"
        },
    )
    port_shared: bool = field(
        default=False,
        metadata={
            "help": "bind the gRPC and REST ports with SO_REUSEPORT, beside the other processes of one `serve --processes`"
            " group (its supervisor sets it); a server started alone takes its ports to itself"
        },
    )
    score_threads: int = field(
        default=0,
        metadata={"help": "threads for one request's lookups and scoring, shared by the requests in flight (0: one per core)"},
    )
    score_spin_us: float = field(
        default=200.0,
        metadata={"help": "how long an idle scoring thread spins for the next hand-off before it sleeps (0: never spins)"},
    )
    shard_index: int = field(
        default=0, metadata={"help": "with --shard-count N: serve part i of N (the PS shard files s with s mod N == i)"}
    )
    shard_count: int = field(
        default=1, metadata={"help": "serving shards the model is split over, behind a router (1: the whole model)"}
    )
    router: bool = field(default=False, metadata={"help": "be the front end of sharded serving (needs --shard-replicas)"})
    shard_replicas: str = field(
        default="", metadata={"help": "the router's serving shards: replicas of a shard split by |, shards by comma"}
    )
    fanout_deadline_ms: float = field(default=200.0, metadata={"help": "the router's deadline for every shard's answer"})
    hedge_min_ms: float = field(
        default=2.0, metadata={"help": "the least wait before a hedged request to a shard's next replica"}
    )
    dnn_batching: str = field(
        default="auto",
        metadata={"help": "batch concurrent wdl/deepfm requests into one MLP pass: auto (with a GPU), on, off"},
    )
    dnn_batch_wait_ms: float = field(default=0.5, metadata={"help": "longest wait for a batch to fill"})
    dnn_batch_items: int = field(default=16384, metadata={"help": "most items in one MLP batch"})
    dnn_cuda_graphs: bool = field(
        default=True, metadata={"help": "on a GPU, run the MLP as CUDA graphs captured when a version loads"}
    )
    max_request_mb: float = field(default=32.0, metadata={"help": "largest request accepted, MiB (RESOURCE_EXHAUSTED above)"})
    max_items: int = field(default=20000, metadata={"help": "most items in one request (RESOURCE_EXHAUSTED above)"})
    strict_features: bool = field(
        default=False,
        metadata={
            "help": "refuse (INVALID_ARGUMENT) every request with features of fields the model does not have; by default"
            " they are dropped and counted (boundless_serving_unknown_features_total)"
        },
    )
    copies_dir: str | None = field(
        default=None,
        metadata={
            WRITES: "folder",
            "help": "folder for serving's checked copies of the files it maps (default: a temporary one)",
        },
    )
    # the server settings (ctr.runtime.server_config) with serving's defaults
    max_concurrent: int = field(
        default=16, metadata={"help": "requests in flight at once; more are refused with RESOURCE_EXHAUSTED"}
    )

    def validate(self) -> None:
        super().validate()
        if "://" not in self.repo and Path(self.repo).is_file():
            raise ConfigError(f"--repo {self.repo}: a file, where the model repository's folder is needed")
        if self.shard_count < 1:
            raise ConfigError(f"--shard-count {self.shard_count}: must be at least 1")
        if not 0 <= self.shard_index < self.shard_count:
            last = self.shard_count - 1
            raise ConfigError(f"--shard-index {self.shard_index}: must be 0..{last} (--shard-count {self.shard_count})")
        if self.router and self.shard_count > 1:
            raise ConfigError("--router and --shard-count exclude each other")
        if self.router and not self.shard_replicas:
            raise ConfigError("--router needs --shard-replicas A1|A2,B1|B2 (each shard's replicas)")
        if self.shard_replicas and not self.router:
            raise ConfigError("--shard-replicas is the router's list of shard replicas: add --router")
        if self.dnn_batching not in ("auto", "on", "off"):
            raise ConfigError(f"--dnn-batching {self.dnn_batching!r}: expected auto, on or off")
        if not -1 <= self.rest_port <= 65535:
            raise ConfigError(f"--rest-port {self.rest_port}: must be 0..65535, or -1 (none)")
        if not self.rest_idle_s > 0 or self.rest_max_connections < 1:
            raise ConfigError("--rest-idle-s must be > 0 and --rest-max-connections >= 1")
        if self.models and (self.router or self.shard_count > 1):
            raise ConfigError("--models serves whole models; sharded serving (--router, --shard-count) takes one --model-name")
        if self.model_memory_mb < 0:
            raise ConfigError(f"--model-memory-mb {self.model_memory_mb}: must be >= 0 (0: no budget)")
        if self.processes < 0:
            raise ConfigError(f"--processes {self.processes}: must be >= 0 (0: one per core)")
        if self.score_threads < 0:
            raise ConfigError(f"--score-threads {self.score_threads}: must be >= 0 (0: one per core)")
        if self.max_request_mb <= 0 or self.max_items < 1:
            raise ConfigError("--max-request-mb must be > 0 and --max-items >= 1")
