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
The MLP's gradients go over NCCL instead when every rank's MLP is on a GPU of its own
(`place_dense`): the control words still go over gloo first, so a lost rank still fails a
round at once rather than at NCCL's timeout.

The bytes of these collectives cross the wire between ranks, so they are counted in the
trainer's wire ledger as kind `ranks` (table "mlp" for the MLP's gradients, "" for the rest):
gloo and NCCL do not count their bytes, so an all-reduce counts what a bandwidth-optimal one
(ring, or halving-doubling, which both run) sends and receives per rank, 2 (W-1)/W of the
buffer each way; a gather or broadcast its pickled objects (docs/design/wire-bytes.md).
Importing this module imports torch."""

from __future__ import annotations

import logging
import pickle
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import torch
import torch.distributed as dist

from trainer.run.rendezvous import GroupLost, Rendezvous

log = logging.getLogger("trainer")
RANKS = "ranks"  # the wire ledger's kind for bytes between ranks


class Ledger(Protocol):
    """Where bytes are counted: the trainer's wire ledger (its PSClient's `wire`)."""

    def count(self, table: str, kind: str, sent: int, received: int) -> None: ...


NCCL_TIMEOUT_S = 300.0  # a dense all-reduce that waits this long for a rank gives up (after the round's gloo words passed)


def dense_backend(places: Sequence[tuple[str, str]], nccl: bool) -> str:
    """How the ranks sum the MLP's gradients, from each rank's (host, device): 'nccl' when
    every MLP is on a GPU and no two ranks share one (NCCL refuses two ranks on one
    device), else 'gloo' on the CPU."""
    on_gpus = all(device.startswith("cuda") for _, device in places)
    return "nccl" if nccl and on_gpus and len(set(places)) == len(places) else "gloo"


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
        self.dense_pg: Any = None  # the NCCL group of the MLP's gradients, when place_dense chose it
        self.ledger: Ledger | None = None  # where the collectives' bytes are counted (the trainer's)
        log.info("rank %d of %d: the group is formed", rv.rank, rv.world)

    def place_dense(self, device: torch.device) -> str:
        """Every rank says where its MLP trains (a collective, once, before the first
        round); the MLP's gradients then go over NCCL or gloo (dense_backend)."""
        places: list[Any] = [None] * self.world
        with _collective():
            dist.all_gather_object(places, (socket.gethostname(), str(device)), group=self.pg)
        backend = dense_backend([tuple(p) for p in places], dist.is_nccl_available())
        if backend == "nccl":
            with _collective():
                self.dense_pg = dist.new_group(backend="nccl", timeout=timedelta(seconds=NCCL_TIMEOUT_S))
        log.info("rank %d of %d: the MLP on %s; its gradients summed over %s", self.rank, self.world, device, backend)
        return backend

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def _count(self, table: str, sent: int, received: int) -> None:
        if self.ledger is not None and self.world > 1 and sent + received > 0:
            self.ledger.count(table, RANKS, sent, received)

    def _all_reduced(self, table: str, nbytes: int) -> None:
        """An all-reduce of an `nbytes` buffer: what a bandwidth-optimal one moves per rank."""
        share = 2 * (self.world - 1) * nbytes // self.world
        self._count(table, share, share)

    def round(
        self, over: bool, stop: bool, cut: bool = False, report: bool = False, dense: Any = None, export: bool = False
    ) -> Round:
        """One round: every rank's control words summed (cut and report count from rank 0
        only), and `dense`'s gradient (a DenseReplica) summed and stepped in the same call."""
        lead = self.leader
        words = [float(over), float(stop), float(cut and lead), float(report and lead), float(export and lead)]
        control = torch.tensor(words, dtype=torch.float64)
        with _collective():
            if dense is not None and self.dense_pg is not None:
                dist.all_reduce(control, group=self.pg)  # gloo first: a lost rank fails here, not at NCCL's timeout
                dense.sync_on_device(self.dense_pg)
                summed = control
            elif dense is not None:
                summed = dense.sync(control, self.pg)
            else:
                dist.all_reduce(control, group=self.pg)
                summed = control
        word_bytes, mlp_bytes = dense.synced if dense is not None else (0, 0)  # what the replica's sync all-reduced
        if dense is None or self.dense_pg is not None:  # the words went alone, over gloo
            word_bytes = control.element_size() * control.shape[0]
        self._all_reduced("", word_bytes)
        self._all_reduced("mlp", mlp_bytes)
        return Round(int(summed[0]), bool(summed[1] > 0), bool(summed[2] > 0), bool(summed[3] > 0), bool(summed[4] > 0))

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's `obj`, in rank order, at rank 0 (None elsewhere)."""
        out: list[Any] | None = [None] * self.world if self.leader else None
        with _collective():
            dist.gather_object(obj, out, dst=0, group=self.pg)
        if out is None:
            self._count("", _pickled(obj), 0)
        else:
            self._count("", 0, sum(_pickled(o) for o in out[1:]))
        return out

    def broadcast(self, obj: Any = None) -> Any:
        """Rank 0's `obj`, on every rank."""
        box = [obj]
        with _collective():
            dist.broadcast_object_list(box, src=0, group=self.pg)
        size = _pickled(box[0])
        if self.leader:
            self._count("", size * (self.world - 1), 0)
        else:
            self._count("", 0, size)
        return box[0]

    def barrier(self) -> None:
        with _collective():
            dist.barrier(group=self.pg)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def _pickled(obj: Any) -> int:
    """The bytes torch.distributed's object collectives send for `obj` (they pickle it)."""
    return len(pickle.dumps(obj))


@contextmanager
def _collective() -> Iterator[None]:
    """A collective that fails (a peer's connection closed, a timeout) means a lost rank."""
    try:
        yield
    except RuntimeError as e:
        raise GroupLost(f"a rank was lost: {e}") from None
