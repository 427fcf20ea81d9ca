"""The MLP's gradients between ranks in low rank: PowerSGD (Vogels, Karimireddy and Jaggi,
2019) with its two factors sent in alternate rounds (ACP-SGD, Zhang et al., 2023): one
all-reduce a round.

Each weight matrix M's gradient [n, m] crosses the wire as one rank-r factor: in one round
P = M Q [n, r], against the shared orthonormal Q, and the mean of M is approximated as
mean(P) Q^T; in the next Q = M^T P [m, r], against the shared P, giving P mean(Q)^T. The
mean factor, orthonormalized, is the shared one of the round after, so the rounds together
run PowerSGD's power iteration, one half-step a round. Vectors (biases) and matrices too
small to gain go whole. Error feedback keeps on each rank what the approximation left out
of its matrices and adds it to the next round's gradient, so nothing is lost, only late.
The first `warmup` trained rounds go whole, while the gradients change fastest. Every rank
decodes the same mean, so every rank's MLP stays the same (docs/design/low-rank-sync.md).

A round's collectives are the ranks' meeting points, and on a busy host each costs a
wake-up of every rank. So the round's control words and sample count travel in the same
all-reduce as the vectors and the factors (the whole gradient in a warm-up round): one
all-reduce, where PowerSGD as torch's DDP hook (`powerSGD_hook`) runs it takes three
besides the words'. The factors are sent before the ranks know whether any of them
trained; a round that finds the summed count zero keeps nothing of them and does not count
(the next trained round sends the same factor). After a round that no rank trained, the
next sends its words alone first, so an idle group sends no factors.

Importing this module imports torch.distributed."""

from __future__ import annotations

import torch
import torch.distributed as dist

MIN_GAIN = 2  # a matrix goes in factors only when they are at most half its values (torch's hook's rule)


def compressed(shape: torch.Size, rank: int) -> bool:
    """Whether a gradient of this shape goes as rank-`rank` factors (a vector never does)."""
    if len(shape) < 2:
        return False
    n, m = shape[0], shape[1:].numel()
    r = min(n, m, rank)
    return (n + m) * r * MIN_GAIN < n * m


def orthonormal(f: torch.Tensor) -> torch.Tensor:
    """A factor's columns made orthonormal (QR's Q): the span an approximation projects onto."""
    return torch.linalg.qr(f).Q


class LowRankSync:
    """The rounds' MLP gradients averaged over the group in rank `rank`."""

    def __init__(self, rank: int, warmup: int, group: dist.ProcessGroup | None) -> None:
        if rank < 1 or warmup < 0:
            raise ValueError(f"powersgd rank {rank} and warm-up {warmup}: rank at least 1, warm-up at least 0")
        self.rank = rank
        self.warmup = warmup
        self.group = group
        self.rounds = 0  # trained rounds so far (the warm-up counts these)
        self.floats = 0  # the gradient values the last round all-reduced (float32; the words not counted)
        self._expect = True  # the last round trained: send the factors with the words
        self._q: list[torch.Tensor] = []  # each compressed matrix's Q [m, r], orthonormal, the same on every rank
        self._p: list[torch.Tensor] = []  # ... and its P [n, r], once a round has sent P
        self._error: list[torch.Tensor] = []  # what each compressed matrix's approximations left out here

    def mean(self, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        """The group's mean of each tensor, when every rank trained (a test's view of round)."""
        _, mean = self.round(torch.ones(1), grads)
        assert mean is not None
        return mean

    def round(self, words: torch.Tensor, grads: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """One round: `words` (small non-negative counts, float32-exact; the last one this
        rank's sample count) summed over the group, and the group's mean of each gradient,
        approximated after the warm-up (float32, on the gradients' device; every rank gets
        the same); None where the summed count says no rank trained."""
        device = grads[0].device
        words = words.to(device=device, dtype=torch.float32)
        n = words.shape[0]
        whole = self.rounds < self.warmup
        shapes = [g.shape for g in grads]
        packs = [i for i, s in enumerate(shapes) if compressed(s, self.rank)] if not whole else []
        vectors = [i for i in range(len(grads)) if i not in packs]
        if packs and not self._q:
            self._start(grads, packs)
        # the compressed rounds alternate: even ones send P = M Q (Q the shared, orthonormal
        # factor), odd ones Q = M^T P (P likewise); the mean factor, orthonormalized, is the
        # next round's shared one, so each round is one step of the power iteration
        send_p = (self.rounds - self.warmup) % 2 == 0
        matrices = [grads[i].reshape(shapes[i][0], -1).float() + e for i, e in zip(packs, self._error, strict=True)]
        if send_p:
            factors = [m @ q for m, q in zip(matrices, self._q, strict=True)]
        else:  # M^T P as (P^T M)^T: torch multiplies a transposed [n, m] 5-8x slower (229 against 31 us at 400x400)
            factors = [(p.T @ m).T for m, p in zip(matrices, self._p, strict=True)]
        first = [grads[i].reshape(-1).float() for i in vectors] + [f.reshape(-1) for f in factors]
        if self._expect:
            sent = torch.cat([words, *first])
            self._all_reduce(sent)
            summed, rest = sent[:n], sent[n:]
        else:  # after an idle round: the words alone first
            summed = words.clone()
            self._all_reduce(summed)
            rest = None
        self.floats = sum(t.numel() for t in first) if self._expect else 0
        trained = bool(summed[-1] > 0)
        self._expect = trained
        if not trained:
            return summed, None
        if rest is None:
            rest = torch.cat(first)
            self._all_reduce(rest)
            self.floats += rest.numel()
        world = dist.get_world_size(self.group)
        out: list[torch.Tensor] = [torch.empty(0)] * len(grads)
        at = 0
        for i in vectors:
            k = shapes[i].numel()
            out[i] = (rest[at : at + k] / world).view(shapes[i])
            at += k
        for j, (i, m, f) in enumerate(zip(packs, matrices, factors, strict=True)):
            mean = rest[at : at + f.numel()].view_as(f) / world
            at += f.numel()
            if send_p:  # the mean gradient projected on Q's span; P's span is the next round's
                approx = mean @ self._q[j].T
                self._p[j] = orthonormal(mean)
            else:  # ... on P's span; Q's span is the next round's
                approx = self._p[j] @ mean.T
                self._q[j] = orthonormal(mean)
            self._error[j] = m.sub_(approx)  # m is this round's own copy
            out[i] = approx.view(shapes[i])
        self.rounds += 1
        return summed, out

    def _start(self, grads: list[torch.Tensor], packs: list[int]) -> None:
        """Q's first factors, from one seed on every rank so that the ranks' P sum meaningfully."""
        gen = torch.Generator().manual_seed(0)
        for i in packs:
            n, m = grads[i].shape[0], grads[i][0].numel()
            q = torch.randn(m, min(n, m, self.rank), generator=gen).to(grads[i].device)
            self._q.append(orthonormal(q))
            self._p.append(torch.zeros(n, q.shape[1], device=q.device))
            self._error.append(torch.zeros(n, m, device=grads[i].device))

    def _all_reduce(self, t: torch.Tensor) -> None:
        dist.all_reduce(t, group=self.group)
