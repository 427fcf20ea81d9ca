"""How often the trainer takes a checkpoint cut, from what was asked and what the shards keep.

A shard started with a data directory (`boundless ps --data-dir`, `train --local-data-dir`)
keeps its cuts in RocksDB; without one it holds rows in memory only and refuses a cut. The
default (`--checkpoint-interval-s -1`, auto) takes a cut every AUTO_INTERVAL_S seconds,
and one at the end of a stream, where every shard keeps a data directory: before, the
default was off, so shards given a data directory wrote nothing to it, and the first shard
restart took every shard back to empty tables and the stream to its start. No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence

from ps.api import ShardStatus

AUTO = -1.0
AUTO_INTERVAL_S = 60.0  # a restart retrains at most a minute of the stream


def cut_interval(asked: float, statuses: Sequence[ShardStatus], addresses: Sequence[str]) -> tuple[float, str, bool]:
    """(seconds between cuts, 0 for none; what to log; whether it is a warning: a restart
    would lose what the shards hold). Raises ValueError for cuts asked of shards that cannot
    keep them."""
    memory = [f"shard {s.index} ({addr})" for s, addr in zip(statuses, addresses, strict=True) if not s.durable]
    if asked > 0:
        if memory:
            raise ValueError(
                f"--checkpoint-interval-s {asked:g}: {', '.join(memory)} keeps no data directory, so it cannot keep a"
                " checkpoint cut: start every shard with --data-dir (--local-data-dir with --ps local), or give"
                " --checkpoint-interval-s 0"
            )
        return asked, f"checkpoint cuts every {asked:g} s", False
    if asked == 0:
        if memory:
            return 0.0, "no checkpoint cuts (--checkpoint-interval-s 0)", False
        return (
            0.0,
            "no checkpoint cuts (--checkpoint-interval-s 0): the shards' data directories stay empty, and a shard that"
            " restarts takes every shard back to empty tables and the stream to its start",
            True,
        )
    if not memory:
        return AUTO_INTERVAL_S, f"checkpoint cuts every {AUTO_INTERVAL_S:g} s (auto: every shard keeps a data directory)", False
    if len(memory) == len(statuses):
        return 0.0, "no checkpoint cuts (auto: the shards keep no data directory; a shard that restarts comes back empty)", False
    return (
        0.0,
        f"no checkpoint cuts (auto): {', '.join(memory)} keeps no data directory, so no cut can be whole; a shard"
        " that restarts takes every shard back to empty tables and the stream to its start",
        True,
    )
