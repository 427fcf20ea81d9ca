"""The ranks of one training run: trainer processes, on one host or many, that form a
torch.distributed group (gloo over TCP) through the standard rendezvous (`RANK`,
`WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`, as torchrun and Kubernetes set them, or
--rank, --world-size, --master) and train in rounds (docs/design/ranks.md).

A round is one all-reduce per batch boundary that every rank joins: a few control words
(whether this rank's stream is over, a stop, the samples it took since the last round, and
rank 0's calls for a cut, a progress report, an export, or samples for an export's holdout)
and, for wdl and deepfm, the MLP's gradient summed since the last round with its sample
count (trainer.step.dense_replica). So ranks whose streams differ in length stay in
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

import json
import logging
import pickle
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import torch
import torch.distributed as dist

from ctr.runtime.config import ConfigError
from trainer.run.agreement import disagreement_message, disagreements
from trainer.run.rendezvous import GroupLost, Rendezvous

log = logging.getLogger("trainer")
RANKS = "ranks"  # the wire ledger's kind for bytes between ranks


class Ledger(Protocol):
    """Where bytes are counted: the trainer's wire ledger (its PSClient's `wire`)."""

    def count(self, table: str, kind: str, sent: int, received: int) -> None: ...


AGREE_KEY = "boundless/settings"  # the rendezvous store's key of each rank's settings, /RANK
VERDICT_KEY = "boundless/verdict"  # rank 0's: "" where every rank agrees, else why not
READ_KEY = "boundless/read"  # /RANK: that rank has its answer (rank 0 may then go)
REFUSAL_WAIT_S = 10.0  # how long a refusing rank 0 keeps the store up for the others to read why
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
    samples: int = 0  # samples the ranks took into training since their last round, together
    holdout: int = 0  # samples rank 0's last export still needs for its holdout: every rank sends what it read


class Group:
    def __init__(self, rv: Rendezvous, settings: dict[str, str] | None = None, timeout_s: float = 1800.0) -> None:
        """settings: what every rank must share (trainer.run.agreement), compared with rank
        0's before the group forms; ConfigError on every rank where one differs."""
        self.rank, self.world = rv.rank, rv.world
        log.info("rank %d of %d: meeting at %s:%d", rv.rank, rv.world, rv.host, rv.port)
        timeout = timedelta(seconds=timeout_s)
        # rank 0 hosts the rendezvous store, as init_method tcp:// would; it is made here so
        # that the ranks compare their settings through it first: a rank started with another
        # --world-size would otherwise leave the rest waiting in their first collective
        try:
            store = dist.TCPStore(rv.host, rv.port, is_master=rv.leader, timeout=timeout, wait_for_workers=False)
        except RuntimeError as e:  # a port taken on rank 0's host, or no rank 0 within the timeout
            where = "cannot listen at" if rv.leader else "found no rank 0 at"
            raise GroupLost(f"{where} {rv.host}:{rv.port}, where the ranks meet: {_first_line(e)}") from None
        with _collective():
            if settings is not None:
                _agree(store, rv, settings)
            dist.init_process_group("gloo", store=store, rank=rv.rank, world_size=rv.world, timeout=timeout)
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
        self,
        over: bool,
        stop: bool,
        cut: bool = False,
        report: bool = False,
        dense: Any = None,
        export: bool = False,
        samples: int = 0,
        holdout: int = 0,
    ) -> Round:
        """One round: every rank's control words summed (cut, report, export and holdout
        count from rank 0 only), and `dense`'s gradient (a DenseReplica) summed and stepped
        in the same call. `samples`: this rank's since its last round, a batch's worth, so
        exact in the float32 words the MLP's round carries (a running count would not be)."""
        lead = self.leader
        words = [float(over), float(stop), float(cut and lead), float(report and lead), float(export and lead)]
        words += [float(samples), float(holdout if lead else 0)]
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
        stop_, cut_, report_, export_ = (bool(summed[i] > 0) for i in range(1, 5))
        return Round(int(summed[0]), stop_, cut_, report_, export_, round(float(summed[5])), round(float(summed[6])))

    def total(self, value: int) -> int:
        """The sum of every rank's `value`, exactly (int64)."""
        box = torch.tensor([value], dtype=torch.int64)
        with _collective():
            dist.all_reduce(box, group=self.pg)
        self._all_reduced("", box.element_size())
        return int(box[0])

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


def _agree(store: dist.Store, rv: Rendezvous, settings: dict[str, str]) -> None:
    """Every rank posts its settings; rank 0 compares each rank's with its own as they come
    and posts the verdict; every other rank compares its own with rank 0's (a rank past
    rank 0's --world-size is never read by it), waits for the verdict and says it read it:
    rank 0 hosts the store, so it stays until then (or a few seconds) when it refuses."""
    store.set(f"{AGREE_KEY}/{rv.rank}", json.dumps(settings))
    if rv.leader:
        refused = ""
        for r in range(1, rv.world):
            store.wait([f"{AGREE_KEY}/{r}"])
            found = disagreements(settings, json.loads(store.get(f"{AGREE_KEY}/{r}")))
            if found:
                refused = disagreement_message(r, found)
                break
        store.set(VERDICT_KEY, refused)
        if refused:
            with suppress(RuntimeError):  # a rank that never came, or went: nothing to wait for
                store.wait([f"{READ_KEY}/{r}" for r in range(1, rv.world)], timedelta(seconds=REFUSAL_WAIT_S))
    else:
        store.wait([f"{AGREE_KEY}/0"])
        found = disagreements(json.loads(store.get(f"{AGREE_KEY}/0")), settings)
        if found:
            store.set(f"{READ_KEY}/{rv.rank}", "")
            raise ConfigError(disagreement_message(rv.rank, found))
        store.wait([VERDICT_KEY])
        refused = store.get(VERDICT_KEY).decode()
        store.set(f"{READ_KEY}/{rv.rank}", "")
    if refused:
        raise ConfigError(refused)


def _first_line(e: BaseException) -> str:
    """An error's first line: torch's carry a C++ stack after it."""
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


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
