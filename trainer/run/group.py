"""The ranks of one training run: trainer processes, on one host or many, that form a
torch.distributed group (gloo over TCP) through the standard rendezvous (`RANK`,
`WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, as torchrun and Kubernetes set them, or
--rank, --world-size, --master) and train in rounds (docs/design/ranks.md).

A round is one all-reduce per batch boundary that every rank joins: a few control words
(whether this rank's stream is over, a stop, and rank 0's calls for a cut or a progress
report) and, for wdl and deepfm, the MLP's gradient summed since the last round with its
sample count (trainer.step.dense_replica). So ranks whose streams differ in length stay in
step (a rank whose stream is over joins with nothing until every rank's is: they all leave
at the first round where all are over), and a cut is taken by every rank at the same batch
boundary. A rank that dies fails the others' collective: every rank then exits with
EXIT_RESTART for its supervisor to start it again, and all take up at the last common cut.
Importing this module imports torch."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from trainer.run.rendezvous import GroupLost, Rendezvous

log = logging.getLogger("trainer")


@dataclass(frozen=True)
class Round:
    over: int  # ranks whose stream is over (they only join the rounds)
    stop: bool  # some rank was asked to stop
    cut: bool  # rank 0 calls a checkpoint cut at this boundary
    report: bool  # rank 0 calls for the merged progress
    export: bool = False  # rank 0 calls an export: every rank drains its residuals first


class Group:
    def __init__(self, rv: Rendezvous, timeout_s: float = 1800.0) -> None:
        self.rank, self.world = rv.rank, rv.world
        log.info("rank %d of %d: meeting at %s:%d", rv.rank, rv.world, rv.host, rv.port)
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{rv.host}:{rv.port}",
            rank=rv.rank,
            world_size=rv.world,
            timeout=timedelta(seconds=timeout_s),
        )
        self.pg = dist.group.WORLD
        log.info("rank %d of %d: the group is formed", rv.rank, rv.world)

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def round(
        self, over: bool, stop: bool, cut: bool = False, report: bool = False, dense: Any = None, export: bool = False
    ) -> Round:
        """One round: every rank's control words summed (cut and report count from rank 0
        only), and `dense`'s gradient (a DenseReplica) summed and stepped in the same call."""
        lead = self.leader
        words = [float(over), float(stop), float(cut and lead), float(report and lead), float(export and lead)]
        control = torch.tensor(words, dtype=torch.float64)
        with _collective():
            if dense is not None:
                summed = dense.sync(control, self.pg)
            else:
                dist.all_reduce(control, group=self.pg)
                summed = control
        return Round(int(summed[0]), bool(summed[1] > 0), bool(summed[2] > 0), bool(summed[3] > 0), bool(summed[4] > 0))

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's `obj`, in rank order, at rank 0 (None elsewhere)."""
        out: list[Any] | None = [None] * self.world if self.leader else None
        with _collective():
            dist.gather_object(obj, out, dst=0, group=self.pg)
        return out

    def broadcast(self, obj: Any = None) -> Any:
        """Rank 0's `obj`, on every rank."""
        box = [obj]
        with _collective():
            dist.broadcast_object_list(box, src=0, group=self.pg)
        return box[0]

    def barrier(self) -> None:
        with _collective():
            dist.barrier(group=self.pg)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


@contextmanager
def _collective() -> Iterator[None]:
    """A collective that fails (a peer's connection closed, a timeout) means a lost rank."""
    try:
        yield
    except RuntimeError as e:
        raise GroupLost(f"a rank was lost: {e}") from None
