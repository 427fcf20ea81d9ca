"""Which part of a model a serving process holds: `--shard-index i --shard-count N` keeps the images (and delta
rows) of the parameter-server shards s with s mod N == i, so N serving shards split a model
larger than one machine along the shard files the repository already has."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ShardPart:
    index: int
    count: int  # 0: holds no sparse rows (the router)

    def holds(self, ps_shard: int) -> bool:
        return self.count > 0 and ps_shard % self.count == self.index

    def check(self, ps_shards: int) -> None:
        """A part must hold at least one of the version's shard files."""
        if self.count > ps_shards:
            raise ValueError(
                f"shard {self.index}/{self.count}: the version has {ps_shards} shard files, "
                f"so at most {ps_shards} serving shards can split it"
            )

    def __str__(self) -> str:
        return "router" if self.count == 0 else f"{self.index}/{self.count}"


WHOLE = ShardPart(0, 1)
ROUTER = ShardPart(0, 0)
