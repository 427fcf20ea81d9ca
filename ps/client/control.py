"""The coordinator's side of the PS, apart from the data path (ps.client.ps_client): declaring
the tables, exports, two-phase checkpoint cuts, restores, and the shards' status. Workers
that only pull and push never call it; it blocks until every shard has answered."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from ctr.model.spec import TableSpec
from ps.api import OFFSETS_SHARD, ExportedFile, ShardStatus

if TYPE_CHECKING:
    from ps.client.ps_client import PSClient

log = logging.getLogger("trainer")


class ControlPlane:
    """client: the data path it steers (its dense table lengths, residuals and row-drop flag
    follow what the control plane learns)."""

    def __init__(self, client: PSClient) -> None:
        self.client = client
        self.transport = client.transport

    def declare(self, specs: list[TableSpec]) -> dict[str, bool]:
        """Declares the tables on every shard; per table, True when it starts empty everywhere.
        Tables the shards held with other optimizer settings now follow these: said here,
        where the trainer's operator reads it."""
        self.client.know(specs)
        answers = self.client.on_shards(lambda s: self.transport.declare(s, specs))
        for change in dict.fromkeys(c for a in answers for c in a.retuned):
            table, settings = change.split(": ", 1)
            log.warning(
                "table %s: the PS shards held it with other settings, and take this trainer's from now on (%s): its rows"
                " keep their state; new steps, new rows and the weights pulled, exported and served follow the new settings",
                table,
                settings,
            )
        out = {}
        for i, spec in enumerate(specs):
            flags = {a.created[i] for a in answers}
            if len(flags) != 1:
                raise RuntimeError(f"table {spec.name}: some shards restored it and others start empty; restore them all")
            out[spec.name] = flags.pop()
        return out

    def export(self, full: bool, name: str) -> tuple[list[ExportedFile], list[int]]:
        """Every shard writes export `name`, a folder under its export root (the trainer's
        export folder, shared with the shards)."""
        results = self.client.on_shards(lambda s: self.transport.export(s, full, name))
        files = [dataclasses.replace(f, shard=s) for s, (got, _) in enumerate(results) for f in got]
        return files, [seq for _, seq in results]

    def prepare(self, cut: int, offsets: bytes) -> int:
        """Phase one of checkpoint cut `cut` on every shard (each snapshots its changed rows
        and writes them in the background); returns the rows in the cut. The trainer's
        `offsets` (its stream position and metrics window, tens of KB) go to shard 0 alone,
        which every reader takes them from (trainer.run.recovery): a copy on every shard
        cost each cut N times the bytes for nothing."""
        return sum(self.client.on_shards(lambda s: self.transport.prepare(s, cut, offsets if s == OFFSETS_SHARD else b"")))

    def commit(self, cut: int) -> int:
        """Phase two, once every shard prepared: waits for the writes, commits the cut."""
        return sum(self.client.on_shards(lambda s: self.transport.commit(s, cut)))

    def restore(self, cut: int, generation: int) -> None:
        """Takes every shard back to cut `cut` (0: empty); from now on the shards refuse
        pushes of generations before `generation`, which this client's pushes carry."""
        self.transport.forget_incarnations()
        restored = self.client.on_shards(lambda s: self.transport.restore(s, cut, generation))
        self.transport.incarnations.update(enumerate(restored))  # another process from now on: a restart
        self.transport.generation = generation
        self.client.reset()

    def status(self) -> list[ShardStatus]:
        statuses: list[ShardStatus] = self.client.on_shards(self.transport.status)
        self.client.rows_may_drop = any(s.drops_rows for s in statuses)
        return statuses
