"""The pipelined worker (pull of batch i+1 during batch i, asynchronous pushes) trains the
exact model of the synchronous path, the DNNs (MLP on the worker) included."""

import time
from typing import cast

import numpy as np
import pytest
import torch

from ctr.data.batch import SampleBatch, build_batch
from ctr.data.formats import make_parser, resolve_fields
from ctr.data.schema import PRESETS
from ctr.model.spec import ModelSpec
from ps.api import ShardRestarted
from ps.client import PSClient
from trainer.step.factorization import TrainableModel, build_model
from trainer.step.pipeline import Pipeline

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize(
    ("model", "device"),
    [("lr", "cpu"), ("fm", "cpu"), ("ffm", "cpu"), ("deepfm", "cpu"), ("wdl", "cpu"), pytest.param("deepfm", "cuda", marks=CUDA)],
)
def test_pipelined_training_equals_the_synchronous_path(data_dir, model, device):
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:6000]
    fields = resolve_fields(PRESETS["libsvm"], lines, freeze=True)
    parse = make_parser(PRESETS["libsvm"], fields)
    batches = [build_batch([parse(x) for x in lines[i : i + 64]], fields.ids()) for i in range(0, len(lines), 64)]
    spec = ModelSpec(model, k=4, fields=tuple(fields.names), hidden=(16, 8))
    runs = []
    for pipelined in (False, True):
        client = PSClient.local(2)
        m = build_model(spec, device=device if spec.is_dnn else "auto")
        m.prepare(client)
        probs = []
        if pipelined:
            pipe = Pipeline(client, m, overlap=True)
            assert pipe.overlap
            for b in batches:
                done = pipe.submit(b)
                if done is not None:
                    probs.append(done[1])
            done = pipe.flush()
            assert done is not None
            probs.append(done[1])
            pipe.close()
        else:
            probs = [m.train(client, b) for b in batches]
        keys = np.unique(np.concatenate([b.keys for b in batches]))
        final: dict[str, np.ndarray] = {
            t: client.pull(t, keys, state=True)[0] for t in ("w", "v", "emb") if t in spec.table_names()
        }
        if spec.is_dnn:  # the MLP this worker trained, as a cut would write it
            m.finish(client)
            final["mlp"] = client.pull_dense("mlp", state=True)
        runs.append((np.concatenate(probs), final, client.pull_dense("bias", state=True)))
    (p0, s0, b0), (p1, s1, b1) = runs
    np.testing.assert_array_equal(p0, p1)
    for t in s0:
        np.testing.assert_allclose(s1[t], s0[t], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(b1, b0, rtol=1e-12)


class _PushFails:
    """A stepwise model whose first push fails after a while, as a push to a shard that did
    not answer within its deadline does (ShardRestarted), while the batch after it is trained."""

    pipelined = True

    def __init__(self) -> None:
        self.pushes = 0

    def fetch(self, client: object, batch: object) -> object:
        return batch

    def compute(self, batch: object, got: object, previous: object) -> tuple[np.ndarray, object]:
        return np.zeros(1, dtype=np.float32), got

    def push(self, client: object, got: object, trained: object) -> None:
        self.pushes += 1
        if self.pushes == 1:
            time.sleep(0.2)
            raise ShardRestarted(1, "PS shard 1 did not answer Push")


def test_a_push_that_fails_while_the_next_batch_trains_is_raised_not_dropped():
    """A flush trains the queued batch and pushes it: the push before it, still in flight,
    must not be forgotten (that lost a batch on one shard, silently, in CI's hung-shard test)."""
    model = _PushFails()
    pipe = Pipeline(PSClient.local(1), cast(TrainableModel, model), overlap=True)
    assert pipe.overlap
    pipe.submit(cast(SampleBatch, "batch 0"))
    pipe.submit(cast(SampleBatch, "batch 1"))  # trains batch 0: its push is in flight
    with pytest.raises(ShardRestarted):
        pipe.flush()  # trains batch 1: batch 0's push fails meanwhile
    pipe.abandon()
