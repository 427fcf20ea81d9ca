"""The settings every daemon's server takes: where it listens, its gRPC threads and limits,
metrics, the ready file, logging, and (from SecurityConfig) TLS and tokens. Each daemon's
typed config extends it, and every config checks itself (`validate`, called by
ctr.runtime.config.build), raising ConfigError naming the setting."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctr.runtime.config import WRITES, ConfigError
from ctr.runtime.security import SecurityConfig

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True)
class ServerConfig(SecurityConfig):
    host: str = field(default="127.0.0.1", metadata={"help": "address the gRPC server and metrics listen on"})
    port: int = field(default=0, metadata={"help": "gRPC port (0 picks a free one; -1 disables where a daemon allows)"})
    metrics_port: int = field(default=0, metadata={"help": "Prometheus port (0 picks a free one; -1 disables)"})
    grpc_threads: int = field(default=4, metadata={"help": "threads that run gRPC calls"})
    max_concurrent: int = field(
        default=16, metadata={"help": "calls in flight at once; more are refused with RESOURCE_EXHAUSTED"}
    )
    reflection: bool = field(default=False, metadata={"help": "enable gRPC server reflection (lists the services to any client)"})
    ready_file: str | None = field(default=None, metadata={WRITES: "file", "help": "write bound ports here as JSON"})
    log_level: str = field(default="INFO", metadata={"help": "logging level"})

    def validate(self) -> None:
        """Checks the server settings; a daemon's config adds its own checks after these."""
        if not -1 <= self.port <= 65535:
            raise ConfigError(f"--port {self.port}: must be 0..65535, or -1")
        if not -1 <= self.metrics_port <= 65535:
            raise ConfigError(f"--metrics-port {self.metrics_port}: must be 0..65535, or -1")
        if self.grpc_threads < 1:
            raise ConfigError(f"--grpc-threads {self.grpc_threads}: must be >= 1")
        if self.max_concurrent < 1:
            raise ConfigError(f"--max-concurrent {self.max_concurrent}: must be >= 1")
        if self.log_level.upper() not in LOG_LEVELS:
            raise ConfigError(f"--log-level {self.log_level!r}: expected one of {', '.join(LOG_LEVELS)}")
