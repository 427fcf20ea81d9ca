"""PS shard daemon configuration. Tables and their optimizers are not configured here: the
trainer declares them (DeclareTables), and a shard with a data directory loads them at its
committed checkpoint cut when it starts."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctr.runtime.config import WRITES, ConfigError, flag, section
from ctr.runtime.server_config import ServerConfig
from ps.api import Lifecycle

HELP_GROUPS: dict[str, tuple[str, ...]] = {
    "essential": ("shard_index", "shard_count", "host", "port", "metrics_port", "data_dir", "export_root"),
    "checkpoints": ("full_checkpoint_every",),
}
HELP_EXAMPLES = """\
  boundless ps --shard-index 0 --shard-count 2 --port 7000 --data-dir ps0 --export-root exports
      shard 0 of 2, checkpointing into RocksDB under ps0, writing exports under exports/
"""


@dataclass(frozen=True)
class RowLifecycleSettings:
    """Admission and eviction of sparse rows: a shard process's, and (as --local-*) the
    trainer's in-process shards'."""

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

    def validate(self, prefix: str = "") -> None:
        for name in ("admit_after", "bloom_mb"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{flag(name, prefix)} {getattr(self, name)}: must be >= 1")
        for name in ("ttl_s", "ttl_updates", "max_rows"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{flag(name, prefix)} {getattr(self, name)}: must be >= 0 (0: off)")

    def policy(self) -> Lifecycle:
        return Lifecycle(self.admit_after, self.bloom_mb << 20, self.ttl_s, self.ttl_updates, self.max_rows)


@dataclass(frozen=True)
class PSConfig(ServerConfig):
    shard_index: int = field(default=0, metadata={"help": "this shard's index"})
    shard_count: int = field(default=1, metadata={"help": "number of shards"})
    data_dir: str | None = field(
        default=None, metadata={WRITES: "folder", "help": "RocksDB folder; none keeps state in memory only"}
    )
    lifecycle: RowLifecycleSettings = section(RowLifecycleSettings, "row lifecycle")
    full_checkpoint_every: int = field(
        default=10, metadata={"help": "every Nth checkpoint cut holds every row (the others: rows changed since the last)"}
    )
    export_root: str | None = field(
        default=None,
        metadata={
            WRITES: "folder",
            "help": "folder the trainer's exports land in (its --export-dir, shared): Export writes only under it",
        },
    )
    write_lease_s: float = field(
        default=1.0,
        metadata={
            "help": "a trainer that alone writes a table skips pulls of the rows it holds for this long after each push;"
            " another writer's first push waits for it (docs/design/write-leases.md; 0: off)"
        },
    )
    # the server settings (ctr.runtime.server_config) with a shard's defaults
    grpc_threads: int = field(default=8, metadata={"help": "threads that run gRPC calls"})
    max_concurrent: int = field(
        default=64,
        metadata={"help": "calls in flight at once; more are refused with RESOURCE_EXHAUSTED (trainers back off and retry)"},
    )

    def validate(self) -> None:
        super().validate()
        if self.shard_count < 1:
            raise ConfigError(f"--shard-count {self.shard_count}: must be at least 1")
        if not 0 <= self.shard_index < self.shard_count:
            last = self.shard_count - 1
            raise ConfigError(f"--shard-index {self.shard_index}: must be 0..{last} (--shard-count {self.shard_count})")
        if self.full_checkpoint_every < 1:
            raise ConfigError(f"--full-checkpoint-every {self.full_checkpoint_every}: must be >= 1")
        if not 0 <= self.write_lease_s <= 60:
            raise ConfigError(f"--write-lease-s {self.write_lease_s}: must be 0..60 (0: off)")
