"""The DNN step's one backward: the MLP's output, its Jacobian and its parameter gradient
are those of separate autograd passes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from ctr.data.batch import SampleBatch
from ctr.model.dnn import deep_partials_reference, pool_fields
from ctr.model.optim import PLAIN, plain_state
from ctr.model.spec import ModelSpec
from trainer.step.dnn import DeepModel

SPEC = ModelSpec("deepfm", k=3, fields=("a", "b", "c", "d"), hidden=(16, 8))


def _batch(rng: np.random.Generator, n: int = 24) -> tuple[SampleBatch, np.ndarray]:
    counts = rng.integers(1, 5, n)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    uidx = rng.integers(0, 10, int(offsets[-1])).astype(np.int64)
    batch = SampleBatch(
        labels=(rng.random(n) < 0.4).astype(np.float32),
        offsets=offsets,
        keys=(uidx + 1).astype(np.uint64),
        fields=(uidx % 4).astype(np.int32),
        values=np.asarray(rng.uniform(0.5, 1.5, uidx.shape[0]), dtype=np.float32),
    )
    return batch, uidx


def test_one_backward_gives_the_jacobian_and_the_gradient_of_two():
    rng = np.random.default_rng(0)
    model = DeepModel(SPEC)
    batch, uidx = _batch(rng)
    emb = rng.normal(scale=0.3, size=(10, 3)).astype(np.float32)
    w = rng.normal(scale=0.3, size=(10, 1))
    pooled = pool_fields(batch.offsets, uidx, batch.fields, batch.values, emb, 4)
    p = PLAIN.params()
    out, jac = model._mlp_step(batch, uidx, pooled, plain_state(w), p, plain_state(np.array([[0.1]])), p)
    grads = [q.grad.clone() for q in model.net.params]  # type: ignore[union-attr]

    x = torch.from_numpy(pooled).requires_grad_(True)
    model.net.zero_grad(set_to_none=True)
    expected_out = model.net(x)
    (expected_jac,) = torch.autograd.grad(expected_out.sum(), x, retain_graph=True)
    partial = deep_partials_reference(batch.offsets, uidx, batch.values, w[:, 0].astype(np.float32), pooled, 0.1, True, True)
    dlogit = torch.sigmoid(expected_out.detach() + torch.from_numpy(partial)) - torch.from_numpy(batch.labels)
    expected_out.backward(dlogit)
    np.testing.assert_allclose(out, expected_out.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(jac, expected_jac.numpy(), rtol=1e-3, atol=1e-6)
    for got, q in zip(grads, model.net.params, strict=True):
        np.testing.assert_allclose(got.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-7)  # type: ignore[union-attr]


def test_an_mlp_step_does_not_load_torchs_symbolic_shapes_module():
    # a gradient tensor passed to Tensor.backward makes torch import its symbolic-shapes
    # module and sympy at the first call: half a second of a rank's CPU, inside training
    code = textwrap.dedent(
        """
        import sys
        import numpy as np
        from ctr.model.dnn import pool_fields
        from ctr.model.optim import PLAIN, plain_state
        from tests.unit.trainer.step.test_dnn import SPEC, _batch
        from trainer.step.dnn import DeepModel
        rng = np.random.default_rng(0)
        batch, uidx = _batch(rng)
        pooled = pool_fields(batch.offsets, uidx, batch.fields, batch.values, rng.normal(size=(10, 3)).astype(np.float32), 4)
        p, w = PLAIN.params(), plain_state(rng.normal(size=(10, 1)))
        DeepModel(SPEC)._mlp_step(batch, uidx, pooled, w, p, plain_state(np.array([[0.1]])), p)
        print(sorted(m for m in ("sympy", "torch.fx.experimental.symbolic_shapes") if m in sys.modules))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_step_on_a_gpu_equals_the_step_on_the_cpu():
    rng = np.random.default_rng(1)
    batch, uidx = _batch(rng)
    emb = rng.normal(scale=0.3, size=(10, 3)).astype(np.float32)
    pooled = pool_fields(batch.offsets, uidx, batch.fields, batch.values, emb, 4)
    p, w, bias = PLAIN.params(), plain_state(rng.normal(scale=0.3, size=(10, 1))), plain_state(np.array([[0.1]]))
    cpu, gpu = DeepModel(SPEC), DeepModel(SPEC, device=torch.device("cuda"))
    assert gpu.device == "cuda" and gpu.replica is not None
    for model in (cpu, gpu):
        model._mlp_step(batch, uidx, pooled, w, p, bias, p)
        model.replica.step(len(batch))  # type: ignore[union-attr]
    got, want = (m._mlp_step(batch, uidx, pooled, w, p, bias, p) for m in (gpu, cpu))
    for g, c in zip(got, want, strict=True):
        np.testing.assert_allclose(g, c, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(gpu.replica.state_rows(), cpu.replica.state_rows(), rtol=1e-4, atol=1e-6)  # type: ignore[union-attr]


def test_a_new_mlp_table_is_written_once_and_not_read_back_and_a_second_worker_reads_it():
    """The worker that creates the `mlp` table writes its start as one STATE push and takes
    it up without a pull; a second worker (the table exists) reads it and holds the same."""
    from ps.client import PSClient

    client = PSClient.local(2)
    first = DeepModel(SPEC)
    first.prepare(client)
    first.take_up(client, {})
    kinds = client.wire.snapshot()["mlp"]
    assert set(kinds) == {"dense_push"}  # no dense_pull
    assert first.replica is not None
    np.testing.assert_array_equal(client.pull_dense("mlp", state=True), first.replica.state_rows())
    second = DeepModel(SPEC, rank=1, world=2)
    torch.nn.init.zeros_(second.net.params[0])  # another start, which the table's replaces
    second.prepare(client)
    second.take_up(client, {})
    assert second.replica is not None
    np.testing.assert_array_equal(second.replica.state_rows(), first.replica.state_rows())
    client.close()


@pytest.mark.parametrize("replicated", [True, False])
def test_the_mlp_steps_once_its_batches_hold_enough_of_both_labels(replicated: bool):
    """step_positives 8 over batches of 3 positives: Adam steps at every third batch, on
    the worker or on the shards alike, and the end steps on what still waits."""
    from ps.client import PSClient

    client = PSClient.local(1)
    model = DeepModel(SPEC, replicated=replicated, step_positives=8)
    model.prepare(client)
    model.take_up(client, {})
    rng = np.random.default_rng(2)
    for positives in (3, 3, 3, 3, 3, 3, 1):
        batch, _ = _batch(rng)
        batch.labels[:] = 0.0
        batch.labels[:positives] = 1.0
        model.train(client, batch)
    if model.replica is not None:
        assert model.replica.steps == 2 and model.replica.waiting_samples == 24
    model.finish(client)
    # Adam's step count, as the shards hold it: a whole write leaves the last batch waiting
    # (the cut's worker state carries it); a sync through the shards pushes it
    assert int(client.pull_dense("mlp", state=True)[0, 3]) == (2 if replicated else 3)
    assert ("mlp_waiting" in model.state(client)) == replicated
    client.close()


def test_a_cut_carries_the_waiting_gradients_and_a_restarted_worker_goes_on_from_them():
    """Killed after a cut that left gradients waiting, a worker that takes up at the cut
    ends bit for bit where one that never stopped does."""
    from ps.client import PSClient

    def batches() -> list[SampleBatch]:
        rng = np.random.default_rng(3)
        out = []
        for positives in (3, 3, 3, 3, 3, 3):
            batch, _ = _batch(rng)
            batch.labels[:] = 0.0
            batch.labels[:positives] = 1.0
            out.append(batch)
        return out

    never_client, client = PSClient.local(1), PSClient.local(1)
    never = DeepModel(SPEC, step_positives=8)
    never.prepare(never_client)
    never.take_up(never_client, {})
    for b in batches():
        never.train(never_client, b)
    first = DeepModel(SPEC, step_positives=8)
    first.prepare(client)
    first.take_up(client, {})
    data = batches()
    for b in data[:4]:  # a step after the third; the fourth waits
        first.train(client, b)
    first.finish(client)  # the cut
    state = json.loads(json.dumps(first.state(client)))  # as a cut stores it
    assert state["mlp_waiting"]["samples"] == 24
    restarted = DeepModel(SPEC, step_positives=8)
    restarted.prepare(client)  # the table exists: the cut's MLP is read
    restarted.take_up(client, state)
    for b in data[4:]:  # the second step, after the sixth: on the fourth's gradients too
        restarted.train(client, b)
    assert restarted.replica is not None and never.replica is not None
    assert restarted.replica.steps == never.replica.steps == 2
    np.testing.assert_array_equal(restarted.replica.state_rows(), never.replica.state_rows())
    never_client.close()
    client.close()
