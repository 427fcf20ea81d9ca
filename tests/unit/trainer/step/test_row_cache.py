"""Bounded staleness (SSP): the worker's row cache and what it does to the model."""

import numpy as np
import pytest

from ctr.data.batch import build_batch
from ctr.data.formats import make_parser, resolve_fields
from ctr.data.schema import PRESETS
from ctr.model.spec import ModelSpec
from ps.client import PSClient
from trainer.step.factorization import FactorizationModel, build_model
from trainer.step.pipeline import Pipeline
from trainer.step.row_cache import RowCache


@pytest.fixture(scope="module")
def frappe(data_dir):
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:6000]
    fields = resolve_fields(PRESETS["libsvm"], lines, freeze=True)
    parse = make_parser(PRESETS["libsvm"], fields)
    batches = [build_batch([parse(x) for x in lines[i : i + 64]], fields.ids()) for i in range(0, len(lines), 64)]
    return fields, batches


def train(spec, batches, staleness, pipelined, shards=2):
    client = PSClient.local(shards)
    m = build_model(spec, staleness)
    m.prepare(client)
    probs = []
    pipe = Pipeline(client, m, overlap=pipelined)
    for b in batches:
        done = pipe.submit(b)
        if done is not None:
            probs.append(done[1])
    done = pipe.flush()
    if done is not None:
        probs.append(done[1])
    pipe.close()
    keys = np.unique(np.concatenate([b.keys for b in batches]))
    final = {t: client.pull(t, keys, state=True)[0] for t in ("w", "v") if t in spec.table_names()}
    return np.concatenate(probs), final, client.pull_dense("bias", state=True), m


@pytest.mark.parametrize("model", ["lr", "ffm"])
@pytest.mark.parametrize("pipelined", [False, True])
def test_staleness_0_is_the_synchronous_path_and_one_worker_gains_nothing_from_more(frappe, model, pipelined):
    fields, batches = frappe
    spec = ModelSpec(model, k=4, fields=tuple(fields.names))
    p_sync, s_sync, b_sync, _ = train(spec, batches, 0, pipelined=False)
    p0, s0, b0, m0 = train(spec, batches, 0, pipelined)
    np.testing.assert_array_equal(p0, p_sync)
    for t in s_sync:
        np.testing.assert_allclose(s0[t], s_sync[t], rtol=1e-12, atol=1e-15)
    assert isinstance(m0, FactorizationModel) and m0.cache.size == 0
    # one worker is the only writer: its cached rows are what the shards hold, so reusing them
    # for 4 steps changes nothing but the rounding of state deltas added on the shard
    p4, s4, b4, m4 = train(spec, batches, 4, pipelined)
    assert isinstance(m4, FactorizationModel) and m4.cache.size > 0
    np.testing.assert_allclose(p4, p_sync, rtol=1e-5, atol=1e-7)
    for t in s_sync:
        np.testing.assert_allclose(s4[t], s_sync[t], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(b4, b_sync, rtol=1e-6)


def test_two_interleaved_workers_read_stale_rows_within_the_bound(frappe):
    """Two workers on one PS, alternating batches: with s > 0 each misses the other's recent
    pushes (the model differs from s = 0) but quality stays close, and each cache holds only
    the keys of its last s + 1 batches."""
    fields, batches = frappe
    spec = ModelSpec("lr", fields=tuple(fields.names))
    losses = {}
    for s in (0, 4):
        client = PSClient.local(2)
        workers = [FactorizationModel(spec, s) for _ in range(2)]
        workers[0].prepare(client)
        loss = []
        for i, b in enumerate(batches):
            w = workers[i % 2]
            p = np.clip(w.train(client, b), 1e-7, 1 - 1e-7)
            loss.append(-(b.labels * np.log(p) + (1 - b.labels) * np.log(1 - p)))
            recent = np.unique(np.concatenate([x.keys for x in batches[max(0, i - 2 * s) : i + 1 : 1]]))
            assert w.cache.size <= recent.shape[0]
        losses[s] = float(np.concatenate(loss).mean())
    assert losses[4] != losses[0]
    assert abs(losses[4] - losses[0]) < 0.01


def test_row_cache_serves_a_row_for_s_steps_then_drops_it():
    cache = RowCache(2, ["w"])
    keys = np.array([3, 9], dtype=np.uint64)
    rows = {"w": np.array([[1.0], [2.0]])}
    bias = np.zeros((1, 1))
    cache.store(keys, rows, np.array([0, 0]), bias, 0, step=0)
    for step, want in ((1, [True, True]), (2, [True, True]), (3, [False, False])):
        assert cache.fresh(keys, step).tolist() == want
    # step 1 re-trains key 9 from the cache (pulled at 0) and pulls key 5
    k1 = np.array([5, 9], dtype=np.uint64)
    cache.store(k1, {"w": np.array([[7.0], [8.0]])}, np.array([1, 0]), bias, 0, step=1)
    assert cache.rows("w", np.array([3, 5, 9], dtype=np.uint64))[:, 0].tolist() == [1.0, 7.0, 8.0]
    cache.store(np.zeros(0, dtype=np.uint64), {"w": np.zeros((0, 1))}, np.zeros(0, dtype=np.int64), bias, 0, step=2)
    assert cache.size == 1 and cache.fresh(np.array([5], dtype=np.uint64), 3).tolist() == [True]
    assert cache.bias_fresh(2) and not cache.bias_fresh(3)
    with pytest.raises(ValueError, match="staleness"):
        RowCache(-1, ["w"])
