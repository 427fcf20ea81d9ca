"""Hybrid training's dense half: the worker's Adam is the shard's, the PS round trip loses
nothing, and two ranks on the halves of a batch end where one rank on the whole batch does.
Moments and weights rounded at a write (--mlp-moment-bits, --mlp-weight-bits) are rounded as
arithmetic says, on every rank, and the cut holds exactly what training goes on from."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from ctr.model.mlp import DeepCTR
from ctr.model.optim import OptimizerSpec, step_rows
from ctr.model.spec import ModelSpec
from ps.client import PSClient
from tests.unit.trainer.spawned_ranks import run_ranks
from trainer.step.dense_replica import DenseReplica, round_mantissa_

SPEC = ModelSpec("deepfm", k=2, fields=("a", "b", "c"), hidden=(8, 4))
OPT = OptimizerSpec("adam", lr=0.01, l2=1e-3)


def _grads(net: DeepCTR, pooled: torch.Tensor, dlogit: torch.Tensor) -> None:
    net.zero_grad(set_to_none=True)
    net(pooled).backward(dlogit)


def _batch(seed: int, n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 2, generator=g), torch.randn(n, generator=g)


def test_the_workers_adam_is_the_shards():
    net = DeepCTR(SPEC, seed=1)
    replica = DenseReplica(net, OPT)
    rows = replica.state_rows()
    assert rows.shape == (sum(int(np.prod(s)) for _, s in SPEC.mlp_shapes()), 4) and (rows[:, 1:] == 0).all()
    for i in range(5):
        pooled, dlogit = _batch(i)
        _grads(net, pooled, dlogit)
        mean = torch.cat([p.grad.reshape(-1) for p in net.params]).double().numpy() / 32  # type: ignore[union-attr]
        step_rows(rows, mean.reshape(-1, 1), 1, OPT.params())  # the shard's Adam, in float64
        replica.step(32)
    np.testing.assert_allclose(replica.state_rows(), rows, rtol=2e-4, atol=1e-6)
    assert replica.state_rows()[0, 3] == 5


def test_the_ps_holds_the_replica_exactly_and_a_new_worker_takes_it_up():
    client = PSClient.local(1)
    client.control.declare(SPEC.tables())
    a = DenseReplica(DeepCTR(SPEC, seed=1), OPT)
    for i in range(3):
        _grads(a.net, *_batch(i))
        a.step(32)
    a.write_to(client)
    b = DenseReplica(DeepCTR(SPEC, seed=2), OPT)  # another start: the PS's MLP replaces it
    b.read_from(client)
    np.testing.assert_array_equal(b.state_rows(), a.state_rows())
    for r in (a, b):  # and both go on alike
        _grads(r.net, *_batch(9))
        r.step(32)
    np.testing.assert_array_equal(b.state_rows(), a.state_rows())
    client.close()


def _rank(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    client = PSClient.local(1)
    client.control.declare(SPEC.tables())
    try:
        replica = DenseReplica(DeepCTR(SPEC, seed=1), OPT, rounds=True, rank=rank, moment_bits=4)
        for i in range(3):
            if i == 2:
                replica.write_to(client)  # a cut: every rank rounds its moments, rank 0 writes them
            pooled, dlogit = _batch(i)
            half = slice(0, 20) if rank == 0 else slice(20, 32)  # uneven halves: the mean is over samples
            _grads(replica.net, pooled[half], dlogit[half])
            replica.step(20 if rank == 0 else 12)  # held for the round
            control = replica.sync(torch.tensor([1.0, float(rank)], dtype=torch.float64), torch.distributed.group.WORLD)
            assert control.tolist() == [2.0, 1.0]  # the control words are summed in the same call
        # a round where rank 1 has nothing (its stream ended): rank 0's batch alone steps
        pooled, dlogit = _batch(7)
        if rank == 0:
            _grads(replica.net, pooled, dlogit)
            replica.step(32)
        replica.sync(torch.zeros(1, dtype=torch.float64), torch.distributed.group.WORLD)
        np.save(out, np.concatenate([replica.state_rows().reshape(-1), [float(replica.digest())]]))
    finally:
        client.close()
        torch.distributed.destroy_process_group()


def test_two_ranks_on_halves_of_each_batch_end_as_one_rank_on_the_whole(tmp_path: Path):
    """With a cut between the second and third rounds, where each rank rounds its moments."""
    whole = DenseReplica(DeepCTR(SPEC, seed=1), OPT, moment_bits=4)
    for i in (0, 1, 2, 7):
        if i == 2:
            whole.round_moments()
        _grads(whole.net, *_batch(i))
        whole.step(32)
    ranks = [np.load(path) for path in run_ranks(_rank, tmp_path, ".npy")]
    np.testing.assert_array_equal(ranks[0], ranks[1])  # every rank holds the same MLP, digest included
    np.testing.assert_allclose(ranks[0][:-1].reshape(-1, 4), whole.state_rows(), rtol=1e-4, atol=1e-6)


def test_the_digest_sees_a_weights_last_bit_and_nothing_else():
    a, b = DenseReplica(DeepCTR(SPEC, seed=1), OPT), DenseReplica(DeepCTR(SPEC, seed=1), OPT)
    assert a.digest() == b.digest()
    with torch.no_grad():
        b.m[0].add_(1.0)  # the moments are not the weights the check compares
    assert a.digest() == b.digest()
    bits = b.params[-1].view(torch.int32)
    bits[0] ^= 1
    assert a.digest() != b.digest()


def test_only_adam_trains_on_the_worker():
    with pytest.raises(ValueError, match="--opt-mlp sgd"):
        DenseReplica(DeepCTR(SPEC), OptimizerSpec("sgd"))


def test_a_write_is_exact_where_a_delta_would_round():
    """Held 1.0, wanted 1e-30: 1.0 + (1e-30 - 1.0) is 0 in float64, which a delta could not
    have written; the state goes whole, and the PS holds the replica bit for bit."""
    client = PSClient.local(1)
    client.control.declare(SPEC.tables())
    r = DenseReplica(DeepCTR(SPEC, seed=1), OPT)
    size = r.state_rows().shape[0]
    client.push_dense("mlp", np.ones((size, 4)) - client.pull_dense("mlp", state=True), kind="delta")
    with torch.no_grad():
        r.v[0].fill_(1e-30)
        r.m[0].fill_(-3.5e-20)
    r.steps = 7
    r.write_to(client)
    np.testing.assert_array_equal(client.pull_dense("mlp", state=True), r.state_rows())
    client.close()


def _mlp_push_bytes(client: PSClient) -> int:
    return sum(sent for sent, _ in client.wire.snapshot().get("mlp", {}).values())


def test_the_mlp_goes_as_float32_state_once_and_not_again_while_unchanged():
    """A write sends the state's rows as float32 (4 words a parameter), which a torch MLP's
    weights and moments are exactly; a second write of the same state sends nothing."""
    client = PSClient.local(1)
    client.control.declare(SPEC.tables())
    r = DenseReplica(DeepCTR(SPEC, seed=1), OPT)
    r.read_from(client)
    _grads(r.net, *_batch(3))
    r.step(32)
    before = _mlp_push_bytes(client)
    r.write_to(client)
    sent = _mlp_push_bytes(client) - before
    params = r.state_rows().shape[0]
    assert 16 * params <= sent < 16 * params + 256  # float32, not float64 (32 bytes a parameter)
    r.write_to(client)
    assert _mlp_push_bytes(client) - before == sent
    np.testing.assert_array_equal(client.pull_dense("mlp", state=True), r.state_rows())
    client.close()


def test_a_large_mlps_write_goes_in_byte_planes_bit_for_bit():
    """An MLP of a few thousand parameters goes as fp32z (zstd over its columns' byte
    planes): the step column, the same for every parameter, costs next to nothing, and the
    shards hold the state bit for bit."""
    spec = ModelSpec("deepfm", k=8, fields=("a", "b", "c", "d"), hidden=(64, 64))
    client = PSClient.local(2, push_codec="onebit")  # a compressing codec: in process, `auto` is `none`
    client.control.declare(spec.tables())
    r = DenseReplica(DeepCTR(spec, seed=1), OPT)
    for _ in range(3):  # Glorot weights and three steps' moments: no zeros to flatter it
        _grads(r.net, torch.randn(32, 4, 8), torch.randn(32))
        r.step(32)
    before = _mlp_push_bytes(client)
    r.write_to(client)
    sent = _mlp_push_bytes(client) - before
    params = r.state_rows().shape[0]
    assert sent < 13 * params, (sent, params)  # 16 raw; the step column alone is 4 of them
    np.testing.assert_array_equal(client.pull_dense("mlp", state=True).view(np.uint64), r.state_rows().view(np.uint64))
    client.close()


def _rank_nccl(rank: int, world: int, port: int, out: str) -> None:
    """A rank whose MLP is on its own GPU, summing its gradients over NCCL as the group
    does (trainer.run.group: Group.place_dense)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    torch.distributed.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    try:
        replica = DenseReplica(DeepCTR(SPEC, seed=1).to(device), OPT, rounds=True, rank=rank)
        for i in range(3):
            pooled, dlogit = _batch(i)
            cut = 20 if world > 1 else 32
            half = slice(0, cut) if rank == 0 else slice(cut, 32)
            _grads(replica.net, pooled[half].to(device), dlogit[half].to(device))
            replica.step(half.stop - half.start)  # type: ignore[operator]
            world_group = torch.distributed.group.WORLD
            assert world_group is not None
            replica.sync_on_device(world_group)
        np.save(out, replica.state_rows())
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_ranks_on_gpus_sum_their_gradients_over_nccl_on_the_device(tmp_path: Path):
    """Two ranks on halves of each batch where there are two GPUs; a group of one on one
    GPU otherwise (NCCL refuses two ranks on one device): the same MLP as one CPU process
    on the whole batches."""
    whole = DenseReplica(DeepCTR(SPEC, seed=1), OPT)
    for i in range(3):
        _grads(whole.net, *_batch(i))
        whole.step(32)
    world = min(2, torch.cuda.device_count())
    ranks = [np.load(path) for path in run_ranks(_rank_nccl, tmp_path, ".npy", world, (world,))]
    for r in ranks:
        np.testing.assert_allclose(r, whole.state_rows(), rtol=1e-4, atol=1e-6)


def test_a_later_write_goes_as_its_difference_from_the_last_and_whole_when_the_base_moved():
    """Where pushes compress, the write after a known one sends the state as its
    difference from what the shards hold: fewer bytes than the state's planes, and the
    shards hold the replica bit for bit. When a shard's range is not that base any more
    (here another writer's push; in a run a restart or a restore), the shard refuses the
    difference and the state goes whole, still bit for bit."""
    spec = ModelSpec("deepfm", k=8, fields=("a", "b", "c", "d"), hidden=(64, 64))
    client = PSClient.local(2, push_codec="onebit")
    client.control.declare(spec.tables())
    r = DenseReplica(DeepCTR(spec, seed=1), OPT)
    client.push_dense("mlp", r.state_rows(), kind="state")
    r.read_from(client)

    def train_and_write() -> int:
        for _ in range(3):
            _grads(r.net, torch.randn(32, 4, 8), torch.randn(32))
            r.step(32)
        before = _mlp_push_bytes(client)
        r.write_to(client)
        np.testing.assert_array_equal(client.pull_dense("mlp", state=True).view(np.uint64), r.state_rows().view(np.uint64))
        return _mlp_push_bytes(client) - before

    whole = r.state_rows().shape[0] * 16
    diff = train_and_write()
    assert diff < 0.8 * whole, (diff, whole)
    # the shards' range moves under the replica: its next difference is refused, then sent whole
    moved = client.pull_dense("mlp", state=True)
    moved[:, 0] += 0.5
    client.push_dense("mlp", moved, kind="state")
    before = _mlp_push_bytes(client)
    train_and_write()
    assert _mlp_push_bytes(client) - before > diff  # the refused difference, then the whole state
    client.close()


def _rounded_by_arithmetic(x: np.ndarray, bits: int) -> np.ndarray:
    """float32 `x` to `bits` mantissa bits in float64 arithmetic: each normal value to the
    nearest multiple of its binade's spacing at that width (np.round: ties to even);
    zeros, subnormals, infs, NaNs and values that would round past float32's largest stay."""
    out = x.astype(np.float64)
    normal = np.isfinite(x) & (np.abs(x) >= np.finfo(np.float32).tiny)
    _, e = np.frexp(out[normal])  # |x| = f 2^e, 0.5 <= f < 1: the binade's spacing is 2^(e - 1 - bits)
    step = np.ldexp(1.0, e - 1 - bits)
    r = np.round(out[normal] / step) * step
    out[normal] = np.where(np.abs(r) > np.finfo(np.float32).max, out[normal], r)
    return out.astype(np.float32)


@pytest.mark.parametrize("bits", [1, 2, 4, 7, 22, 23])
def test_moments_round_to_nearest_with_ties_to_even_as_arithmetic_says(bits: int):
    rng = np.random.default_rng(bits)
    spread = rng.choice([-1.0, 1.0], 5000) * np.exp2(rng.uniform(-140, 128, 5000))  # every binade, subnormals too
    fraction = rng.integers(0, 1 << bits, 200)
    ties = (1.0 + (2 * fraction + 1) / 2.0 ** (bits + 1)) * np.exp2(rng.integers(-120, 120, 200))  # exactly halfway
    ends = [0.0, -0.0, np.inf, -np.inf, np.nan, np.finfo(np.float32).max, -np.finfo(np.float32).max, 1e-45, 1.17e-38]
    with np.errstate(over="ignore"):
        x = np.concatenate([spread, ties, -ties, ends]).astype(np.float32)
    want = _rounded_by_arithmetic(x, bits)
    got = torch.from_numpy(x.copy())
    round_mantissa_(got, bits)
    np.testing.assert_array_equal(got.numpy().view(np.uint32), want.view(np.uint32))
    if bits < 23:
        # normal values in every binade but the last (where rounding up may pass the largest float32)
        normal = np.isfinite(want) & (np.abs(want) >= np.finfo(np.float32).tiny) & (np.abs(x) < 2.0**127)
        assert (want[normal].view(np.uint32) & ((1 << (23 - bits)) - 1) == 0).all()  # the bits dropped are zero
        assert not np.array_equal(x[normal], want[normal])  # something was rounded
    assert np.count_nonzero(want) == np.count_nonzero(x)  # nothing became zero


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_moments_on_a_gpu_round_to_the_same_bits_as_on_the_cpu():
    x = torch.randn(100_000, generator=torch.Generator().manual_seed(3)) * torch.exp2(torch.randint(-60, 60, (100_000,)))
    on_cpu, on_gpu = x.clone(), x.to("cuda")
    round_mantissa_(on_cpu, 4)
    round_mantissa_(on_gpu, 4)
    assert torch.equal(on_gpu.cpu().view(torch.int32), on_cpu.view(torch.int32))


@pytest.mark.parametrize("weight_bits", [23, 8])
def test_a_write_rounds_the_mlp_and_the_cut_holds_what_training_goes_on_from(weight_bits: int):
    """The moments come within 2^-5 of what they were, their dropped bits zero; the weights
    stay whole, or with weight_bits 8 come within 2^-9, their low 15 bits zero; the PS holds
    that state bit for bit, and a worker that takes it up (a restart at this cut) goes on
    exactly as the writer does."""
    client = PSClient.local(1)
    client.control.declare(SPEC.tables())
    a = DenseReplica(DeepCTR(SPEC, seed=1), OPT, moment_bits=4, weight_bits=weight_bits)
    for i in range(3):
        _grads(a.net, *_batch(i))
        a.step(32)
    before = a.state_rows()
    a.write_to(client)
    after = a.state_rows()
    if weight_bits == 23:
        np.testing.assert_array_equal(after[:, 0], before[:, 0])
    else:
        assert not np.array_equal(after[:, 0], before[:, 0])
        np.testing.assert_allclose(after[:, 0], before[:, 0], rtol=2.0**-9, atol=0)
        assert (after[:, 0].astype(np.float32).view(np.uint32) & ((1 << 15) - 1) == 0).all()
    assert not np.array_equal(after[:, 1:3], before[:, 1:3])
    np.testing.assert_allclose(after[:, 1:3], before[:, 1:3], rtol=2.0**-5, atol=0)
    assert (after[:, 1:3].astype(np.float32).view(np.uint32) & ((1 << 19) - 1) == 0).all()
    np.testing.assert_array_equal(client.pull_dense("mlp", state=True), after)
    b = DenseReplica(DeepCTR(SPEC, seed=2), OPT, moment_bits=4, weight_bits=weight_bits)
    b.read_from(client)
    assert b.digest() == a.digest()
    for r in (a, b):
        _grads(r.net, *_batch(9))
        r.step(32)
    np.testing.assert_array_equal(b.state_rows(), a.state_rows())
    client.close()


def test_a_width_a_float32_cannot_keep_is_refused():
    with pytest.raises(ValueError, match="--mlp-moment-bits 0"):
        DenseReplica(DeepCTR(SPEC, seed=1), OPT, moment_bits=0)
    with pytest.raises(ValueError, match="--mlp-weight-bits 24"):
        DenseReplica(DeepCTR(SPEC, seed=1), OPT, weight_bits=24)


def test_every_rank_rounds_at_a_write_and_only_rank_0_sends():
    client = PSClient.local(1)
    client.control.declare(SPEC.tables())
    zero, one = (DenseReplica(DeepCTR(SPEC, seed=1), OPT, rank=r, moment_bits=4, weight_bits=8) for r in (0, 1))
    for r in (zero, one):
        for i in range(3):
            _grads(r.net, *_batch(i))
            r.step(32)
    before = _mlp_push_bytes(client)
    one.write_to(client)
    assert _mlp_push_bytes(client) == before
    zero.write_to(client)
    np.testing.assert_array_equal(one.state_rows(), zero.state_rows())
    np.testing.assert_array_equal(client.pull_dense("mlp", state=True), one.state_rows())
    client.close()


def test_rounded_moments_and_weights_make_a_compressed_write_smaller():
    """Where pushes compress, the write after a known one with moments at 4 bits sends fewer
    bytes than the same training's write with whole moments, and fewer again with the
    weights at 8 bits."""
    spec = ModelSpec("deepfm", k=8, fields=("a", "b", "c", "d"), hidden=(64, 64))
    sent = {}
    for bits, wbits in ((23, 23), (4, 23), (4, 8)):
        client = PSClient.local(2, push_codec="onebit")
        client.control.declare(spec.tables())
        r = DenseReplica(DeepCTR(spec, seed=1), OPT, moment_bits=bits, weight_bits=wbits)
        g = torch.Generator().manual_seed(5)
        for _write in range(2):
            for _ in range(20):
                _grads(r.net, torch.randn(32, 4, 8, generator=g), torch.randn(32, generator=g))
                r.step(32)
            before = _mlp_push_bytes(client)
            r.write_to(client)
            np.testing.assert_array_equal(client.pull_dense("mlp", state=True), r.state_rows())
        sent[bits, wbits] = _mlp_push_bytes(client) - before  # the second write: a difference from the first
        client.close()
    assert sent[4, 23] < 0.8 * sent[23, 23], sent
    assert sent[4, 8] < 0.85 * sent[4, 23], sent


@pytest.mark.parametrize("model", ["deepfm", "wdl"])
def test_the_default_mlp_takes_no_whole_steps_on_the_gradients_of_a_fitted_stream(model: str):
    """A stream fitted to a logloss near 0 leaves the MLP gradients of about 1e-7 a weight.
    Adam's step is m / (sqrt(v) + eps): with eps 1e-8 that is a whole step (lr) a round
    whatever the gradient's size, so the tower drifts until the loss spikes; the default
    eps keeps such steps to a few hundredths of lr (docs/design/mlp-step.md)."""
    spec = ModelSpec(model, k=2, fields=("a", "b", "c"), hidden=(8, 4))
    opt = spec.optimizer("mlp")
    replica = DenseReplica(DeepCTR(spec, seed=1), opt)
    before = [p.detach().clone() for p in replica.params]
    signs = [torch.sign(torch.randn(p.shape, generator=torch.Generator().manual_seed(i))) for i, p in enumerate(replica.params)]
    steps = 50
    for _ in range(steps):
        for p, s in zip(replica.params, signs, strict=True):
            p.grad = 1e-7 * s * 256  # summed over a 256-example batch
        replica.step(256)
    moved = max(float((p.detach() - b).abs().max()) for p, b in zip(replica.params, before, strict=True))
    assert moved < 0.05 * steps * opt.lr, (moved, opt)
    whole = DenseReplica(DeepCTR(spec, seed=1), OptimizerSpec("adam", lr=opt.lr))  # eps 1e-8
    for _ in range(steps):
        for p, s in zip(whole.params, signs, strict=True):
            p.grad = 1e-7 * s * 256
        whole.step(256)
    assert max(float((p.detach() - b).abs().max()) for p, b in zip(whole.params, before, strict=True)) > 0.5 * steps * opt.lr


def _merged(batches: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    parts = [_batch(i) for i in batches]
    return torch.cat([p for p, _ in parts]), torch.cat([d for _, d in parts])


def test_a_step_waits_for_enough_of_both_labels_then_takes_the_batches_summed():
    """step_positives 4: batches of 1, 2 and 3 positives wait until their sum holds 4, and
    the step is the one a single batch of all of them would take."""
    waits = DenseReplica(DeepCTR(SPEC, seed=1), OPT, step_positives=4)
    whole = DenseReplica(DeepCTR(SPEC, seed=1), OPT)
    for i, positives in enumerate((1.0, 2.0)):
        _grads(waits.net, *_batch(i))
        waits.step(32, positives)
        assert waits.steps == 0 and waits.waiting_samples == 32 * (i + 1)
    _grads(waits.net, *_batch(2))
    waits.step(32, 3.0)  # 6 positives and 90 negatives: a step
    _grads(whole.net, *_merged([0, 1, 2]))
    whole.step(96)
    assert waits.steps == 1 and waits.waiting_samples == 0
    np.testing.assert_allclose(waits.state_rows(), whole.state_rows(), rtol=1e-5, atol=1e-7)
    _grads(waits.net, *_batch(3))
    waits.step(32, 30.0)  # 30 positives, 2 negatives: too few negatives
    assert waits.steps == 1


def test_without_a_threshold_every_batch_steps_as_before():
    a, b = DenseReplica(DeepCTR(SPEC, seed=1), OPT, step_positives=0), DenseReplica(DeepCTR(SPEC, seed=1), OPT)
    for i in range(3):
        _grads(a.net, *_batch(i))
        a.step(32, 0.0)  # no positives at all
        _grads(b.net, *_batch(i))
        b.step(32)
    assert a.steps == b.steps == 3
    np.testing.assert_array_equal(a.state_rows(), b.state_rows())


def test_a_rounding_cut_steps_on_what_waits_and_a_take_up_forgets_it():
    """Where the write rounds the MLP (--mlp-moment-bits), where the cuts fall shapes the
    model already: the write steps on the waiting gradients, so the cut holds every sample."""
    client = PSClient.local(1)
    client.control.declare(SPEC.tables())
    a = DenseReplica(DeepCTR(SPEC, seed=1), OPT, moment_bits=4, step_positives=100)
    whole = DenseReplica(DeepCTR(SPEC, seed=1), OPT, moment_bits=4)
    for i in range(2):
        _grads(a.net, *_batch(i))
        a.step(32, 3.0)
    assert a.steps == 0 and not a.exact
    a.write_to(client)
    _grads(whole.net, *_merged([0, 1]))
    whole.step(64)
    whole.round_moments()
    whole.round_weights()
    assert a.steps == 1 and a.waiting_samples == 0 and a.waiting_state() is None
    np.testing.assert_allclose(client.pull_dense("mlp", state=True), whole.state_rows(), rtol=1e-5, atol=1e-7)
    _grads(a.net, *_batch(5))
    a.step(32, 3.0)
    a.read_from(client)  # back at the cut: batch 5 is trained again from there, so it must not wait
    assert a.waiting_samples == 0
    np.testing.assert_array_equal(a.state_rows(), client.pull_dense("mlp", state=True))
    client.close()


def test_an_exact_cut_carries_what_waits_so_where_it_falls_changes_nothing():
    """A whole write leaves the gradients waiting; the cut carries them (waiting_state) and
    a replica that takes up there goes on bit for bit as one that never stopped."""
    client = PSClient.local(1)
    client.control.declare(SPEC.tables())
    a = DenseReplica(DeepCTR(SPEC, seed=1), OPT, step_positives=8)
    never = DenseReplica(DeepCTR(SPEC, seed=1), OPT, step_positives=8)
    for r in (a, never):
        for i in range(2):
            _grads(r.net, *_batch(i))
            r.step(32, 3.0)
    a.write_to(client)  # a cut between the batches
    assert a.exact and a.steps == 0 and a.waiting_samples == 64
    carried = a.waiting_state()
    assert carried is not None and carried[1:] == (64, 6.0)
    b = DenseReplica(DeepCTR(SPEC, seed=2), OPT, step_positives=8)  # a restarted worker
    b.read_from(client)
    b.take_waiting(*carried)
    for r in (b, never):
        _grads(r.net, *_batch(2))
        r.step(32, 3.0)  # 9 positives: the step, on all three batches
    assert b.steps == never.steps == 1
    np.testing.assert_array_equal(b.state_rows(), never.state_rows())
    with pytest.raises(ValueError, match="waiting MLP gradients hold 3 values"):
        b.take_waiting(np.zeros(3, np.float32), 32, 1.0)
    client.close()


def test_a_negative_threshold_is_refused():
    with pytest.raises(ValueError, match="--mlp-step-positives -1"):
        DenseReplica(DeepCTR(SPEC), OPT, step_positives=-1)


def _rank_waiting(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        replica = DenseReplica(DeepCTR(SPEC, seed=1), OPT, rounds=True, rank=rank, step_positives=3)
        steps = []
        for i, positives in enumerate(((1.0, 1.0), (0.0, 1.0), (2.0, 2.0))):  # round sums 2, 1, 4
            pooled, dlogit = _batch(i)
            half = slice(0, 20) if rank == 0 else slice(20, 32)
            _grads(replica.net, pooled[half], dlogit[half])
            replica.step(20 if rank == 0 else 12, positives[rank])
            replica.sync(torch.zeros(1, dtype=torch.float64), torch.distributed.group.WORLD)
            steps.append(replica.steps)
        np.save(out, np.concatenate([replica.state_rows().reshape(-1), [float(replica.digest())], steps]))
    finally:
        torch.distributed.destroy_process_group()


def test_ranks_wait_for_the_groups_positives_and_step_alike(tmp_path: Path):
    """The rounds' positives are summed over the ranks: rounds of 2 and then 3 positives in
    all step once, at the second, on both rounds' gradients (a rank alone has fewer)."""
    ranks = [np.load(path) for path in run_ranks(_rank_waiting, tmp_path, ".npy")]
    np.testing.assert_array_equal(ranks[0], ranks[1])
    assert ranks[0][-3:].tolist() == [0.0, 1.0, 2.0]
    whole = DenseReplica(DeepCTR(SPEC, seed=1), OPT)
    _grads(whole.net, *_merged([0, 1]))
    whole.step(64)
    _grads(whole.net, *_batch(2))
    whole.step(32)
    np.testing.assert_allclose(ranks[0][:-4].reshape(-1, 4), whole.state_rows(), rtol=1e-4, atol=1e-6)


def _mean_norm(net: DeepCTR, n: int) -> float:
    return float(torch.sqrt(sum(((p.grad / n) ** 2).sum() for p in net.params)))  # type: ignore[operator]


def test_a_mean_gradient_past_clip_norm_steps_as_adam_on_it_scaled_down_to_that_norm():
    """clip_norm (the default MLPs' 1.0): a step whose mean gradient is longer is Adam's on
    that gradient scaled to the norm; a shorter one steps exactly as without the clip."""
    clip = 0.05
    clipped = DenseReplica(DeepCTR(SPEC, seed=1), OptimizerSpec("adam", lr=0.01, l2=1e-3, clip_norm=clip))
    plain = DenseReplica(DeepCTR(SPEC, seed=1), OPT)
    for i in range(4):
        pooled, dlogit = _batch(i)
        _grads(clipped.net, pooled, 100 * dlogit)
        norm = _mean_norm(clipped.net, 32)
        assert norm > clip
        for p, q in zip(plain.params, clipped.params, strict=True):
            p.grad = q.grad * (clip / norm)  # type: ignore[operator]
        clipped.step(32)
        plain.step(32)
    np.testing.assert_allclose(clipped.state_rows(), plain.state_rows(), rtol=1e-5, atol=1e-7)
    assert clipped.clipped_steps == 4

    loose = DenseReplica(DeepCTR(SPEC, seed=1), OptimizerSpec("adam", lr=0.01, l2=1e-3, clip_norm=1e6))
    free = DenseReplica(DeepCTR(SPEC, seed=1), OPT)
    for i in range(3):
        for r in (loose, free):
            _grads(r.net, *_batch(i))
            r.step(32)
    np.testing.assert_array_equal(loose.state_rows(), free.state_rows())
    assert loose.clipped_steps == 0


def test_clip_norm_is_the_mlps_only():
    from ctr.model.spec import ModelSpecError

    with pytest.raises(ModelSpecError, match="clip_norm is the MLP's"):
        ModelSpec("deepfm", k=2, fields=("a", "b"), optimizers=(("v", OptimizerSpec("adagrad", clip_norm=1.0)),))
    with pytest.raises(ValueError, match="clip_norm must be >= 0"):
        OptimizerSpec("adam", clip_norm=-1.0)
    assert ModelSpec("deepfm", k=2, fields=("a", "b")).optimizer("mlp").clip_norm == 1.0
