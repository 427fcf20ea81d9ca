"""Hybrid training's dense half (PERSIA's split, docs/design/hybrid-training.md): the MLP's
weights and its Adam state live on this worker's device. Alone, it steps after every batch;
with several ranks, once a round, on the gradients and sample counts every rank summed since
the last (one all-reduce with the round's control words, trainer.run.group), so every rank
holds the same MLP.
Adam is the shard's (ctr.model.optim: L2 in the gradient, bias corrections per step) in
torch's foreach ops: torch.optim would import torch._dynamo, a second of start-up.

The PS holds the MLP only where it must: before a checkpoint cut or an export, rank 0 writes
the weights and the Adam state into the dense table `mlp` (the layout the shard's Adam
keeps, w | m | v | t per element), and every rank that takes up at a cut reads them back.
Sparse rows stay on the PS.

A step waits for enough of both labels (step_positives, docs/design/mlp-step.md): on a
stream with rare positives a 256-sample batch holds one or two, and Adam, which scales
every step to about its rate whatever the gradient's size, would step as far on one
positive as on many. The gradients of the batches (or rounds) before it are summed and
wait. Where the cut's write holds the MLP whole, what waits goes into the cut too (the
worker state: trainer.step.dnn), so where the cuts fall changes nothing and a restart ends
bit for bit where an uninterrupted run does; where the write rounds the MLP (and with it
where the cuts fall already shapes the model), the write steps on what waits first. Either
way the cut holds every sample trained.

Where the cut writes compress (docs/design/moment-bits.md), each write first rounds the
live Adam moments and weights to fewer mantissa bits, on every rank alike: the cut then
holds exactly what training goes on from, in under half the bytes."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from ctr.model.mlp import DeepCTR
from ctr.model.optim import FP32_MANTISSA, OptimizerSpec
from ps.api import STATE
from ps.client import PSClient
from trainer import metrics
from trainer.step.step_gate import StepGate

F64 = npt.NDArray[np.float64]
TABLE = "mlp"


def round_mantissa_(t: torch.Tensor, bits: int) -> None:
    """Rounds float32 `t` in place to `bits` mantissa bits, to nearest with ties to even.
    The exponent keeps its range and subnormals stay as they are, so nothing becomes zero
    that was not (a second moment of 0 would make Adam's step m / eps); a value that would
    round past the largest float32, or an inf or NaN, stays as it is too."""
    drop = FP32_MANTISSA - bits
    if drop <= 0:
        return
    if t.dtype != torch.float32:
        raise ValueError(f"rounding mantissas of {t.dtype}: float32 only")
    b = t.view(torch.int32)  # sign | exponent | mantissa: adding rounds the magnitude, whatever the sign
    rounded = (b + ((1 << (drop - 1)) - 1) + ((b >> drop) & 1)) & ~((1 << drop) - 1)
    keep = ~torch.isfinite(rounded.view(torch.float32)) | ~torch.isfinite(t) | ((b & 0x7F800000) == 0)
    b.copy_(torch.where(keep, b, rounded))


class DenseReplica:
    """rounds: the MLP steps in the ranks' rounds (trainer.run.group: `sync`), on the sum of
    every rank's gradients since the last one; otherwise (one process) after every batch.
    moment_bits: the mantissa bits the Adam moments keep at each write (23: whole);
    weight_bits: those the weights keep.
    low_rank: (rank, warm-up rounds) to send the rounds' gradients as PowerSGD's low-rank
    factors (trainer.step.low_rank_sync); None: whole.
    step_positives: Adam steps once the gradients since its last step hold at least this
    many positive and this many negative samples (0: at every batch or round)."""

    def __init__(
        self,
        net: DeepCTR,
        opt: OptimizerSpec,
        rounds: bool = False,
        rank: int = 0,
        moment_bits: int = FP32_MANTISSA,
        low_rank: tuple[int, int] | None = None,
        weight_bits: int = FP32_MANTISSA,
        step_positives: int = 0,
    ) -> None:
        if opt.kind != "adam":
            raise ValueError(f"--opt-mlp {opt.kind}: the MLP trains on the worker with Adam; give 'adam lr=...'")
        for flag, bits in (("--mlp-moment-bits", moment_bits), ("--mlp-weight-bits", weight_bits)):
            if not 1 <= bits <= FP32_MANTISSA:
                raise ValueError(f"{flag} {bits}: keep 1 to {FP32_MANTISSA} of a float32 mantissa's bits")
        self.gate = StepGate(step_positives)
        self.moment_bits = moment_bits
        self.weight_bits = weight_bits
        self.net = net
        self.opt = opt
        self.rounds = rounds
        self.rank = rank
        self.params = list(net.params)
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.steps = 0
        self.clipped_steps = 0  # steps whose mean gradient clip_norm scaled down
        self._held: npt.NDArray[np.float64] | None = None  # what the shards' mlp table holds, once known
        self._acc: list[torch.Tensor] | None = None  # gradients summed since the last step
        self._acc_samples = 0
        self._acc_positives = 0.0
        # summed gradients (the group's, after a round: the same on every rank) waiting for
        # step_positives of each label (the gate counts their samples and positives)
        self._waiting: list[torch.Tensor] | None = None
        self.low_rank = low_rank
        self._low_rank: Any = None  # its LowRankSync, made at the first round (it needs the group)
        # bytes the last round all-reduced: (the control words, the MLP's gradients and count)
        self.synced: tuple[int, int] = (0, 0)

    def step(self, samples: int, positives: float = 0.0) -> None:
        """After a batch's backward: its gradient (of its summed loss, in the parameters'
        .grad) over `samples` samples, `positives` of them labelled 1, joins what this rank
        holds for the next step; alone, it steps now (or waits: step_positives)."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        if self._acc is None:
            self._acc = grads
        else:
            torch._foreach_add_(self._acc, grads)
        self._acc_samples += samples
        self._acc_positives += positives
        for p in self.params:
            p.grad = None
        if not self.rounds:
            acc, total, pos = self._take()
            self._advance(acc, total, pos)

    def sync(self, control: torch.Tensor, group: torch.distributed.ProcessGroup | None = None) -> torch.Tensor:
        """A round over gloo: `control` and this rank's gradient sum and sample count, summed
        over the group in one all-reduce on the CPU; Adam steps on the mean when any rank
        trained. Returns the summed control."""
        acc, total, pos = self._take()
        n = control.shape[0]
        if self.low_rank is not None:
            words = torch.cat([control.float(), torch.tensor([pos, float(total)])])
            summed = self._step_low_rank(words, [g.cpu() for g in acc], group)
            self.synced = (4 * n, 8 + 4 * self._low_rank.floats)  # the counts go with the MLP's share
            return summed[:n].double()
        flat = torch.cat([control.float(), *(g.reshape(-1).float().cpu() for g in acc), torch.tensor([pos, float(total)])])
        torch.distributed.all_reduce(flat, group=group)
        self.synced = (4 * n, 4 * (flat.numel() - n))
        self._step_on(flat[n:])
        return flat[:n].double()

    def _step_low_rank(
        self, words: torch.Tensor, acc: list[torch.Tensor], group: torch.distributed.ProcessGroup | None
    ) -> torch.Tensor:
        """Adam on the group's gradients as PowerSGD approximates their mean (every rank
        decodes the same), in the round's all-reduces with `words` (the last: this rank's
        positives and sample count); a round where no rank trained steps nothing. Returns the
        summed words."""
        if self._low_rank is None:
            from trainer.step.low_rank_sync import LowRankSync  # torch.distributed: only for ranks

            assert self.low_rank is not None
            self._low_rank = LowRankSync(*self.low_rank, group)
        summed, mean = self._low_rank.round(words, acc)
        if mean is not None:
            world = torch.distributed.get_world_size(group)
            device = self.params[0].device
            # the mean's tensors are this round's own: scaled in place, not copied again
            self._advance([m.to(device).mul_(world) for m in mean], int(summed[-1]), float(summed[-2]))
        return summed  # type: ignore[no-any-return]

    def sync_on_device(self, group: torch.distributed.ProcessGroup) -> None:
        """A round's gradients over NCCL (every rank's MLP on a GPU of its own): this rank's
        gradient sum and sample count summed where they are, on the device; Adam steps on
        the mean when any rank trained."""
        acc, total, pos = self._take()
        device = self.params[0].device
        if self.low_rank is not None:
            self._step_low_rank(torch.tensor([pos, float(total)], device=device), acc, group)
            self.synced = (0, 8 + 4 * self._low_rank.floats)
            return
        flat = torch.cat([*(g.reshape(-1).float() for g in acc), torch.tensor([pos, float(total)], device=device)])
        torch.distributed.all_reduce(flat, group=group)
        self.synced = (0, 4 * flat.numel())
        self._step_on(flat)

    def _step_on(self, flat: torch.Tensor) -> None:
        """Adam on a summed round: the parameters' gradients, flat, then the positives and
        the sample count."""
        total = int(flat[-1])
        if total > 0:
            sizes = [p.numel() for p in self.params]
            device = self.params[0].device
            summed = [g.view_as(p).to(device) for g, p in zip(flat[:-2].split(sizes), self.params, strict=True)]
            self._advance(summed, total, float(flat[-2]))

    def _take(self) -> tuple[list[torch.Tensor], int, float]:
        acc = self._acc if self._acc is not None else [torch.zeros_like(p) for p in self.params]
        total, positives = self._acc_samples, self._acc_positives
        self._acc, self._acc_samples, self._acc_positives = None, 0, 0.0
        return acc, total, positives

    def _advance(self, grads: list[torch.Tensor], total: int, positives: float) -> None:
        """The summed `grads` of `total` samples join those waiting; Adam steps on them all
        once they hold step_positives of each label."""
        if total <= 0:
            return
        if self._waiting is None:
            self._waiting = grads
        else:
            torch._foreach_add_(self._waiting, grads)
        if self.gate.add(total, positives):
            self._step_waiting()

    def _step_waiting(self) -> None:
        """Adam steps on the gradients waiting, whatever their labels (due, or a rounding write)."""
        waiting, total = self._waiting, self.gate.samples
        self._forget_waiting()
        if waiting is not None:
            self._adam(waiting, total)

    def _forget_waiting(self) -> None:
        self._waiting = None
        self.gate.reset()

    @property
    def waiting_samples(self) -> int:
        """Samples whose gradients wait for the next step."""
        return self.gate.samples

    @property
    def exact(self) -> bool:
        """A write holds the MLP and its Adam state whole (nothing rounded)."""
        return self.moment_bits >= FP32_MANTISSA and self.weight_bits >= FP32_MANTISSA

    def waiting_state(self) -> tuple[npt.NDArray[np.float32], int, float] | None:
        """What waits, for a cut: the summed gradients (flat, float32, in parameter order),
        their samples and positives; None when nothing does."""
        if self._waiting is None or self.gate.samples <= 0:
            return None
        flat = torch.cat([g.reshape(-1).float().cpu() for g in self._waiting]).numpy()
        return flat, self.gate.samples, self.gate.positives

    def take_waiting(self, flat: npt.NDArray[np.float32], samples: int, positives: float) -> None:
        """Takes up what waited at a cut (after its MLP: read_from or take)."""
        sizes = [p.numel() for p in self.params]
        if flat.shape != (sum(sizes),):
            raise ValueError(f"the cut's waiting MLP gradients hold {flat.shape[0]} values; this MLP has {sum(sizes)}")
        device = self.params[0].device
        parts = torch.from_numpy(np.array(flat, dtype=np.float32)).split(sizes)
        self._waiting = [g.view_as(p).to(device) for g, p in zip(parts, self.params, strict=True)]
        self.gate.resume(samples, positives)

    def _adam(self, grads: list[torch.Tensor], total: int) -> None:
        """One Adam step on the mean gradient: the summed `grads` over `total` samples."""
        if total <= 0:
            return
        o = self.opt
        t = self.steps + 1
        c1, c2 = 1.0 - o.beta1**t, 1.0 - o.beta2**t
        with torch.no_grad():
            torch._foreach_div_(grads, float(total))
            if o.clip_norm > 0:  # the same on every rank: each holds the group's summed gradient
                norm = float(torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads))))
                if norm > o.clip_norm:
                    torch._foreach_mul_(grads, o.clip_norm / norm)
                    self.clipped_steps += 1
                    metrics.MLP_CLIPPED.inc()
            if o.l2:
                torch._foreach_add_(grads, self.params, alpha=o.l2)
            torch._foreach_lerp_(self.m, grads, 1.0 - o.beta1)  # m = beta1 m + (1 - beta1) g
            torch._foreach_mul_(self.v, o.beta2)
            torch._foreach_addcmul_(self.v, grads, grads, value=1.0 - o.beta2)
            denom = torch._foreach_div(self.v, c2)
            torch._foreach_sqrt_(denom)
            torch._foreach_add_(denom, o.eps)
            torch._foreach_addcdiv_(self.params, self.m, denom, value=-o.lr / c1)
        self.steps = t
        metrics.MLP_STEPS.inc()

    def state_rows(self) -> F64:
        """The MLP as the PS's adam rows [n, 4]: weight, m, v, t, in ModelSpec.mlp_shapes() order."""
        with torch.no_grad():
            cols = [
                torch.stack([p.reshape(-1), m.reshape(-1), v.reshape(-1)], dim=1)
                for p, m, v in zip(self.params, self.m, self.v, strict=True)
            ]
            rows = torch.cat(cols).double().cpu().numpy()
        return np.concatenate([rows, np.full((rows.shape[0], 1), float(self.steps))], axis=1)

    def load_rows(self, rows: F64) -> None:
        """Takes up the PS's adam rows [n, 4] (see state_rows)."""
        offset = 0
        with torch.no_grad():
            for p, m, v in zip(self.params, self.m, self.v, strict=True):
                n = p.numel()
                part = torch.from_numpy(np.ascontiguousarray(rows[offset : offset + n, :3], np.float32)).to(p.device)
                p.copy_(part[:, 0].view_as(p))
                m.copy_(part[:, 1].view_as(p))
                v.copy_(part[:, 2].view_as(p))
                offset += n
        self.steps = int(rows[0, 3]) if rows.shape[0] else 0

    def write_to(self, client: PSClient) -> None:
        """Rank 0 makes the PS's `mlp` table hold exactly this MLP and its Adam state; the
        other ranks hold the same and write nothing. The state goes as a STATE push (the
        shards' range becomes it), in fp32 where every value is one, which the weights
        and moments of a torch MLP are: half the bytes of the float64 delta it
        replaced, and a write must not change the model, or where the cuts fell would
        (exactly-once compares digests bit for bit). Where pushes compress, a write after
        a known one goes as its bitwise difference from it (STATE_DIFF), which a shard
        holding anything else refuses, and then gets whole. Nothing goes when the shards
        hold it already (no batch trained since the last write or read).
        First every rank rounds its moments to moment_bits and its weights to
        weight_bits (the same values on every rank, so the replicas stay equal): the
        write is exact, and what a cut holds is what training goes on from. Where they
        round, Adam first steps on the gradients that wait (on every rank: they are the
        group's), so the write holds every sample trained; where nothing rounds, they wait
        on and the cut carries them (waiting_state)."""
        if not self.exact:
            self._step_waiting()
        self.round_moments()
        self.round_weights()
        if self.rank != 0:
            return
        mine = self.state_rows()
        if self._held is not None and np.array_equal(mine, self._held):
            return
        base, self._held = self._held, None  # unknown if the push fails part way
        client.push_dense(TABLE, mine, kind=STATE, base=base)  # as its difference from the last, where that pays
        self._held = mine

    def digest(self) -> int:
        """CRC-32 of the MLP's weights, bit for bit: ranks whose round steps agree hold the
        same (trainer.run.loop compares them at every progress report)."""
        crc = 0
        with torch.no_grad():
            for p in self.params:
                crc = zlib.crc32(p.detach().cpu().contiguous().view(torch.uint8).numpy().data, crc)
        return crc

    def round_moments(self) -> None:
        """The Adam moments, in place, to moment_bits mantissa bits (docs/design/moment-bits.md)."""
        with torch.no_grad():
            for t in (*self.m, *self.v):
                round_mantissa_(t, self.moment_bits)

    def round_weights(self) -> None:
        """The weights, in place, to weight_bits mantissa bits
        (docs/design/moment-bits.md#the-weights-at-8-mantissa-bits-2026-12-03)."""
        with torch.no_grad():
            for p in self.params:
                round_mantissa_(p.data, self.weight_bits)

    def read_from(self, client: PSClient) -> None:
        """Takes up the MLP the PS holds (at a cut, or the initial one rank 0 wrote)."""
        self.take(np.asarray(client.pull_dense(TABLE, state=True), dtype=np.float64))

    def take(self, held: F64) -> None:
        """Takes up rows the PS's `mlp` table is known to hold (read, or just written); the
        gradients that waited are of samples trained after it, which will be trained again."""
        self._forget_waiting()
        self._acc, self._acc_samples, self._acc_positives = None, 0, 0.0
        self.load_rows(held)
        self._held = held.copy()  # load_rows may share its memory
