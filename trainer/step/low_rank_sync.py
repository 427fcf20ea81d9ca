"""The MLP's gradients between ranks in low rank: PowerSGD (Vogels, Karimireddy and Jaggi,
2019) through torch's own hook (`torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook`),
fed the round's gradients as the one bucket DDP would hand it.

Each weight matrix M's gradient [n, m] crosses the wire as two rank-r factors, P = M Q [n, r]
and Q = M^T P [m, r] (one all-reduce each, Q warm-started from the last round); vectors
(biases) and matrices too small to gain go whole. Error feedback keeps on each rank what the
approximation left out and adds it to the next round's gradient, so nothing is lost, only
late. The first `warmup` rounds go whole (the hook's start_powerSGD_iter), while the
gradients change fastest. Every rank decodes the same average, so every rank's MLP stays
the same (docs/design/low-rank-sync.md).

Importing this module imports torch.distributed."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState, powerSGD_hook


class _Bucket:
    """What powerSGD_hook reads of a DDP GradBucket: one flat buffer, the parameters'
    gradients as views of it (the hook writes the result through them), its index, and
    whether it is the round's last (the hook counts rounds on it)."""

    def __init__(self, flat: torch.Tensor, shapes: list[torch.Size]) -> None:
        self._flat = flat
        self._views = []
        at = 0
        for shape in shapes:
            n = shape.numel()
            self._views.append(flat[at : at + n].view(shape))
            at += n

    def buffer(self) -> torch.Tensor:
        return self._flat

    def gradients(self) -> list[torch.Tensor]:
        return self._views

    def index(self) -> int:
        return 0

    def is_last(self) -> bool:
        return True


class _Inline:
    """The group as the hook sees it, each all-reduce finished before the hook chains its next
    step on it, so the chain's callbacks run on the calling thread. Left to gloo, they run on
    its worker threads, which release the callbacks' Python objects only after the caller has
    its mean: a group destroyed or an interpreter exiting in that moment aborts the process
    ("Resource deadlock avoided", "terminate called without an active exception"; one run in
    three of two ranks that destroy their group right after a round). Nothing overlapped is
    lost: the hook waits for each all-reduce before it computes the next factor anyway. With
    NCCL, wait() only orders the device's stream."""

    def __init__(self, group: dist.ProcessGroup) -> None:
        self._group = group

    def size(self) -> int:
        return self._group.size()

    def allreduce(self, tensors: list[torch.Tensor], opts: dist.AllreduceOptions) -> dist.Work:
        work = self._group.allreduce(tensors, opts)
        work.wait()
        return work


class LowRankSync:
    """The rounds' MLP gradients averaged over the group in rank `rank`."""

    def __init__(self, rank: int, warmup: int, group: dist.ProcessGroup | None) -> None:
        # the same seed on every rank: Q starts alike everywhere, so P and Q sum meaningfully
        self.state = PowerSGDState(
            process_group=_Inline(group if group is not None else dist.group.WORLD),  # type: ignore[arg-type]
            matrix_approximation_rank=rank,
            start_powerSGD_iter=warmup,
            min_compression_rate=2,
            use_error_feedback=True,
            warm_start=True,
            random_seed=0,
            compression_stats_logging_frequency=1 << 62,  # the trainer's ledger says it
        )
        self.floats = 0  # what the last round all-reduced, in float32 values

    def mean(self, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        """The group's mean of each tensor (float32, on the tensors' device), approximated
        after the warm-up rounds; every rank gets the same."""
        flat = torch.cat([g.reshape(-1).float() for g in grads])
        before = self.state.total_numel_after_compression
        out = powerSGD_hook(self.state, _Bucket(flat, [g.shape for g in grads])).wait()  # type: ignore[arg-type]
        sent = self.state.total_numel_after_compression - before
        self.floats = int(sent) if sent else int(flat.numel())  # the warm-up goes whole, uncounted by the hook
        parts = out.split([g.numel() for g in grads])
        return [v.view(g.shape).to(g.dtype) for v, g in zip(parts, grads, strict=True)]
