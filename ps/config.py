"""PS shard daemon configuration. Tables and their optimizers are not configured here: the
trainer declares them (DeclareTables), and a shard with a data directory loads them at its
committed checkpoint cut when it starts."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctr.runtime.config import ConfigError
from ctr.runtime.server_config import ServerConfig

HELP_GROUPS: dict[str, tuple[str, ...]] = {
    "essential": ("shard_index", "shard_count", "host", "port", "metrics_port", "data_dir", "export_root"),
    "row lifecycle": ("admit_after", "bloom_mb", "ttl_s", "ttl_updates", "max_rows"),
    "checkpoints": ("full_checkpoint_every",),
}
HELP_EXAMPLES = """\
  boundless ps --shard-index 0 --shard-count 2 --port 7000 --data-dir ps0 --export-root exports
      shard 0 of 2, checkpointing into RocksDB under ps0, writing exports under exports/
"""


@dataclass(frozen=True)
class PSConfig(ServerConfig):
    shard_index: int = field(default=0, metadata={"help": "this shard's index"})
    shard_count: int = field(default=1, metadata={"help": "number of shards"})
    data_dir: str | None = field(default=None, metadata={"help": "RocksDB folder; none keeps state in memory only"})
    admit_after: int = field(
        default=1, metadata={"help": "a key gets a row from the Nth push that names it (a counting Bloom filter counts)"}
    )
    bloom_mb: int = field(default=16, metadata={"help": "counters of each table's counting Bloom filter, MiB (--admit-after)"})
    ttl_s: float = field(default=0.0, metadata={"help": "evict rows not updated for this many seconds (0: never)"})
    ttl_updates: int = field(
        default=0, metadata={"help": "evict rows not updated for this many of the shard's updates (0: never)"}
    )
    max_rows: int = field(
        default=0, metadata={"help": "rows per table; past it (by 5%) the least recently updated are evicted (0: no cap)"}
    )
    full_checkpoint_every: int = field(
        default=10, metadata={"help": "every Nth checkpoint cut holds every row (the others: rows changed since the last)"}
    )
    export_root: str | None = field(
        default=None,
        metadata={"help": "folder the trainer's exports land in (its --export-dir, shared): Export writes only under it"},
    )
    # the server settings (ctr.runtime.server_config) with a shard's defaults
    grpc_threads: int = field(default=8, metadata={"help": "threads that run gRPC calls"})
    max_concurrent: int = field(
        default=64,
        metadata={"help": "calls in flight at once; more are refused with RESOURCE_EXHAUSTED (trainers back off and retry)"},
    )

    def validate(self) -> None:
        super().validate()
        if not 0 <= self.shard_index < self.shard_count:
            last = self.shard_count - 1
            raise ConfigError(f"--shard-index {self.shard_index}: must be 0..{last} (--shard-count {self.shard_count})")
        if self.full_checkpoint_every < 1:
            raise ConfigError(f"--full-checkpoint-every {self.full_checkpoint_every}: must be >= 1")
        if self.admit_after < 1 or self.bloom_mb < 1 or self.ttl_s < 0 or self.ttl_updates < 0 or self.max_rows < 0:
            raise ConfigError("--admit-after and --bloom-mb must be >= 1; --ttl-s, --ttl-updates and --max-rows >= 0")
