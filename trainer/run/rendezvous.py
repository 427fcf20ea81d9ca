"""Where the ranks of a run meet (trainer.run.group), read from the flags or the
environment torchrun and Kubernetes set (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`,
`MASTER_PORT`), and how a rank tells its supervisor to start it again. No torch here: a
single-process run never loads it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ctr.runtime.config import ConfigError

EXIT_RESTART = 75  # a rank's exit code: start me again (a rank or a shard was lost; all go back to the last cut)


class GroupLost(RuntimeError):
    """A collective failed: another rank died or cannot be reached."""


@dataclass(frozen=True)
class Rendezvous:
    rank: int
    world: int
    host: str
    port: int

    @property
    def leader(self) -> bool:
        return self.rank == 0


def rendezvous(rank: int, world_size: int, master: str, environ: Mapping[str, str]) -> Rendezvous:
    """The flags, else the environment; a single process (world 1) when neither names a group."""
    try:
        world = world_size or int(environ.get("WORLD_SIZE", "1"))
        me = rank if rank >= 0 else int(environ.get("RANK", "0"))
    except ValueError as e:
        raise ConfigError(f"RANK / WORLD_SIZE: {e}") from None
    if world < 1 or not 0 <= me < world:
        raise ConfigError(f"--rank {me} of --world-size {world}: the rank must be 0..{world - 1}")
    host, port = "127.0.0.1", ""
    if master:
        host, _, port = master.rpartition(":")
    elif "MASTER_ADDR" in environ or "MASTER_PORT" in environ:
        host, port = environ.get("MASTER_ADDR", host), environ.get("MASTER_PORT", "")
    if world > 1 and not (host and port.isdigit() and 0 < int(port) < 65536):
        raise ConfigError(
            f"--world-size {world}: the ranks meet at rank 0's --master HOST:PORT (or MASTER_ADDR and MASTER_PORT);"
            f" got {master or (host + ':' + port)!r}"
        )
    return Rendezvous(me, world, host, int(port) if port.isdigit() else 0)


def share(total: int, index: int, count: int) -> int:
    """Rank `index`'s part of `total` samples dealt out to `count` ranks (0 where there are
    fewer samples than ranks: the limit is then 0, not none)."""
    if total <= 0:
        return 0
    return total // count + (1 if index < total % count else 0)
