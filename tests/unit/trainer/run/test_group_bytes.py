"""The ranks' collectives are counted on the trainer's wire ledger (kind `ranks`): an
all-reduce as a bandwidth-optimal one moves it, 2 (W-1)/W of its buffer each way per rank
(the MLP's gradients under table "mlp", the control words under ""), a gather or broadcast
as its pickled objects. Two real gloo ranks in separate processes."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

from ctr.model.mlp import DeepCTR
from ctr.model.optim import OptimizerSpec
from ctr.model.spec import ModelSpec
from ps.transport import WireLedger
from tests.unit.trainer.spawned_ranks import run_ranks
from trainer.run.group import RANKS, Group
from trainer.run.rendezvous import Rendezvous
from trainer.step.dense_replica import DenseReplica

SPEC = ModelSpec("deepfm", k=2, fields=("a", "b", "c"), hidden=(8, 4))
OPT = OptimizerSpec("adam", lr=0.01)
FIGURES = {"samples": 12345, "window": list(range(100))}


def _rank(rank: int, port: int, out: str) -> None:
    group = Group(Rendezvous(rank, 2, "127.0.0.1", port), timeout_s=60)
    group.ledger = WireLedger()
    try:
        replica = DenseReplica(DeepCTR(SPEC, seed=1), OPT, rounds=True, rank=rank)
        for _ in range(3):
            group.round(over=False, stop=False, dense=replica)
        group.round(over=False, stop=False)  # LR, FM, FFM: the control words alone
        group.gather(FIGURES)
        group.broadcast({"cut": 7} if rank == 0 else None)
        Path(out).write_text(json.dumps(group.ledger.snapshot()))
    finally:
        group.close()


def test_two_ranks_count_what_their_collectives_move(tmp_path: Path) -> None:
    ledgers = [json.loads(path.read_text()) for path in run_ranks(_rank, tmp_path, ".json")]
    params = sum(p.numel() for p in DeepCTR(SPEC, seed=1).params)
    mlp = 3 * 4 * (params + 2)  # three rounds of float32 gradients, positives and a count; W = 2: the whole buffer each way
    words = 3 * 4 * 7 + 8 * 7  # the words in the MLP's float32 buffer, then a float64 round of them alone
    figures, cut = len(pickle.dumps(FIGURES)), len(pickle.dumps({"cut": 7}))
    assert ledgers[0]["mlp"][RANKS] == ledgers[1]["mlp"][RANKS] == [mlp, mlp]
    assert ledgers[0][""][RANKS] == [words + cut, words + figures]  # rank 0 gathers and broadcasts
    assert ledgers[1][""][RANKS] == [words + figures, words + cut]
