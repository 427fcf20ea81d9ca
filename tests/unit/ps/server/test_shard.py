"""Shard tables: declared layouts, gradient and state-delta pushes, and refused pushes."""

import numpy as np
import pytest

from ctr.model.optim import OptimizerSpec
from ctr.model.spec import ModelSpec
from ctr.routing import shard_of
from ps.api import ModelMismatch
from ps.server.errors import RowsMoved, ShardError
from ps.server.shard import Shard


def _shard(model="fm"):
    s = Shard(0, 1)
    assert all(s.declare(ModelSpec(model, k=4, fields=("a", "b")).tables()).created)
    return s


KEYS = np.array([3, 9, 12, 40], dtype=np.uint64)


def test_pull_reads_initial_rows_without_inserting():
    s = _shard()
    _, v = s.pull("v", KEYS, open_session=False)
    _, again = s.pull("v", KEYS, open_session=False)
    assert np.array_equal(v, again) and np.abs(v).max() > 0  # embeddings start random, per key
    assert s.sparse["v"].size == 0


def test_gradient_push_steps_the_optimizer_and_delta_push_adds_state():
    s = _shard()
    _, before = s.pull("w", KEYS, open_session=False, state=True)
    s.push("w", KEYS, np.ones(4), "gradient")
    _, after = s.pull("w", KEYS, open_session=False, state=True)
    assert (after[:, 1] == before[:, 1] + 1).all()  # FTRL n += g^2
    delta = np.zeros_like(after)
    delta[:, 0] = 0.25
    s.push("w", KEYS, delta, "delta")
    _, merged = s.pull("w", KEYS, open_session=False, state=True)
    np.testing.assert_allclose(merged, after + delta)


@pytest.mark.parametrize("bad", [np.nan, np.inf, 3e38, -2e6])
def test_a_bad_push_is_refused_and_changes_nothing(bad):
    s = _shard()
    s.push("w", KEYS, np.ones(4), "gradient")
    _, before = s.pull("w", KEYS, open_session=False, state=True)
    grads = np.ones(4)
    grads[2] = bad
    with pytest.raises(ShardError, match="not finite or exceeds max_abs"):
        s.push("w", KEYS, grads, "gradient")
    with pytest.raises(ShardError, match="not finite or exceeds max_abs"):
        s.push_dense("bias", np.array([bad]), "gradient")
    _, after = s.pull("w", KEYS, open_session=False, state=True)
    assert np.array_equal(before, after) and s.sparse["w"].size == 4


def test_a_state_push_replaces_a_dense_range_and_is_refused_on_sparse_tables_and_bad_values():
    s = Shard(0, 1)
    assert all(s.declare(ModelSpec("deepfm", k=2, fields=("a", "b"), hidden=(4,)).tables()).created)
    n, width = s.dense_push_shape("mlp", "state")
    state = np.arange(n * width, dtype=np.float64).reshape(n, width) / 7
    s.push_dense("mlp", state, "state")
    np.testing.assert_array_equal(s.dense["mlp"].state, state)
    s.push_dense("mlp", state, "state")  # resent: the same
    np.testing.assert_array_equal(s.dense["mlp"].state, state)
    bad = state.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ShardError, match="not finite"):
        s.push_dense("mlp", bad, "state")
    with pytest.raises(ShardError, match="values for"):
        s.push_dense("mlp", state[:-1], "state")
    np.testing.assert_array_equal(s.dense["mlp"].state, state)
    with pytest.raises(ShardError, match="for dense tables"):
        s.push("w", KEYS, np.ones((4, 2)), "state")


def test_the_limit_is_per_table():
    s = Shard(0, 1)
    spec = ModelSpec("lr").with_optimizer("w", OptimizerSpec("ftrl", lr=0.5, max_abs=10.0))
    s.declare(spec.tables())
    s.push("w", KEYS, np.full(4, 9.0), "gradient")
    with pytest.raises(ShardError, match="max_abs 10"):
        s.push("w", KEYS, np.full(4, 11.0), "gradient")


def test_a_table_declared_with_another_layout_is_refused():
    s = _shard("fm")
    with pytest.raises(ModelMismatch, match=r"table v: sparse dim 4 \(adagrad\) held, sparse dim 8 \(adagrad\) declared"):
        s.declare(ModelSpec("fm", k=8).tables())


def test_one_worker_stepping_its_copy_ends_with_the_shard_holding_its_state():
    """The per-example protocol: pull state, step locally, push state - pulled."""
    from ctr.model.optim import step_rows

    s = _shard()
    opt = s.sparse["v"].spec.optimizer
    rng = np.random.default_rng(0)
    local = np.zeros(0)
    for _ in range(5):
        _, pulled = s.pull("v", KEYS, open_session=False, state=True)
        local = pulled.copy()
        step_rows(local, rng.normal(size=(4, 4)), 4, opt.params())
        s.push("v", KEYS, local - pulled, "delta")
    _, final = s.pull("v", KEYS, open_session=False, state=True)
    np.testing.assert_allclose(final, local, rtol=1e-12, atol=1e-15)


def test_export_writes_one_row_per_key_with_every_sparse_table(tmp_path):
    s = Shard(0, 1, export_root=tmp_path)
    s.declare(ModelSpec("fm", k=4).tables())
    s.push("w", KEYS[:2], np.ones(2), "gradient")
    s.push("v", KEYS[1:], np.ones((3, 4)), "gradient")
    files, _ = s.export(True, "e1")
    (f,) = files
    assert f.columns == "w:1,v:4" and f.rows == 4
    assert (shard_of(KEYS, 1) == 0).all()


def test_rows_grow_past_their_first_capacity_and_keep_their_state():
    s = Shard(0, 1)
    s.declare(ModelSpec("fm", k=4).tables())
    rng = np.random.default_rng(5)
    keys = np.unique(rng.integers(1, 2**63, 20000).astype(np.uint64))
    s.push("v", keys[:100], np.ones((100, 4)), "gradient")
    _, first = s.pull("v", keys[:100], open_session=False, state=True)
    s.push("v", keys[100:], np.zeros((keys.shape[0] - 100, 4)), "gradient")  # grows the row arrays 8x
    _, again = s.pull("v", keys[:100], open_session=False, state=True)
    np.testing.assert_array_equal(first[:, :4], again[:, :4])
    changed, _ = s.sparse["v"].updated_after(1)  # the first push was update 1
    assert sorted(changed.tolist()) == sorted(keys[100:].tolist())


def test_large_but_finite_state_deltas_are_accepted_and_overflowing_ones_refused():
    """A hot key's FTRL n grows by the sum of g^2 over a batch: far above a gradient's
    max_abs with large feature values; what must not happen is a state past STATE_LIMIT."""
    s = _shard("lr")
    _, state = s.pull("w", KEYS, open_session=False, state=True)
    delta = np.zeros_like(state)
    delta[:, 1] = 5e7  # n += 5e7: 256 examples of |g| ~ 440
    s.push("w", KEYS, delta, "delta")
    _, after = s.pull("w", KEYS, open_session=False, state=True)
    np.testing.assert_allclose(after[:, 1], state[:, 1] + 5e7)
    big = np.zeros_like(state)
    big[1, 0] = 6e29
    s.push("w", KEYS, big, "delta")
    _, after = s.pull("w", KEYS, open_session=False, state=True)
    with pytest.raises(ShardError, match="past 1e\\+30"):  # 6e29 + 6e29 passes the state limit
        s.push("w", KEYS, big, "delta")
    with pytest.raises(ShardError, match="exceeds the state limit"):
        s.push("w", KEYS, big * 4, "delta")
    fresh = np.array([999], np.uint64)
    with pytest.raises(ShardError, match="exceeds the state limit"):
        s.push("w", fresh, np.array([[np.inf, 0.0]]), "delta")
    assert s.sparse["w"].find(fresh)[0] == -1  # a refused push inserts nothing
    _, final = s.pull("w", KEYS, open_session=False, state=True)
    np.testing.assert_array_equal(final, after)


def test_dense_calls_reach_only_the_shards_that_hold_part_of_the_vector():
    from ctr.model.spec import ModelSpec
    from ps.client import PSClient

    client = PSClient.local(3)
    client.control.declare(ModelSpec("lr").tables())
    called: list[int] = []
    pull_dense = client.transport.pull_dense

    def counted(shard: int, table: str, state: bool):  # type: ignore[no-untyped-def]
        called.append(shard)
        return pull_dense(shard, table, state)

    client.transport.pull_dense = counted  # type: ignore[method-assign]
    bias = client.pull_dense("bias", state=True)
    assert called == [2] and bias.shape == (1, 2)  # a 1-long vector lives on the last shard
    client.push_dense("bias", np.ones((1, 2)), kind="delta")
    np.testing.assert_array_equal(client.pull_dense("bias", state=True), bias + 1)


def test_export_takes_a_folder_name_never_a_path(tmp_path):
    """A caller names the export's folder; the shard writes only under its export root."""
    s = Shard(0, 1, export_root=tmp_path / "exports")
    s.declare(ModelSpec("lr").tables())
    for bad in ("/etc", "../out", "a/b", "", ".hidden", "x" * 200):
        with pytest.raises(ShardError, match="not an export name"):
            s.export(True, bad)
    with pytest.raises(ShardError, match="no export root"):
        Shard(0, 1).export(True, "e1")
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []


def test_a_state_difference_applies_only_to_its_base():
    """A STATE_DIFF write lands bit for bit on the base it was taken from; on anything else
    (another write came between) it is refused and the range keeps what it held."""
    from ps.compression.state_diff import as_fp32_bits, base_digest, encode_state_diff
    from ps.server.errors import BaseMismatch

    s = Shard(0, 1)
    assert all(s.declare(ModelSpec("deepfm", k=2, fields=("a", "b"), hidden=(4,)).tables()).created)
    n, width = s.dense_push_shape("mlp", "state")
    g = np.random.default_rng(3)
    base = g.normal(size=(n, width)).astype(np.float32).astype(np.float64)
    new = (base + g.normal(scale=1e-3, size=(n, width))).astype(np.float32).astype(np.float64)
    s.push_dense("mlp", base, "state")
    b, nb = as_fp32_bits(base), as_fp32_bits(new)
    assert b is not None and nb is not None
    s.push_dense_diff("mlp", encode_state_diff(nb, b), base_digest(b), samples=5)
    np.testing.assert_array_equal(s.dense["mlp"].state.view(np.uint64), new.view(np.uint64))
    assert s.samples["mlp"] == 5
    with pytest.raises(BaseMismatch, match="not the base"):  # resent: the range is no longer its base
        s.push_dense_diff("mlp", encode_state_diff(nb, b), base_digest(b))
    np.testing.assert_array_equal(s.dense["mlp"].state, new)


def test_row_ids_name_their_keys_only_in_their_layout():
    s = _shard()
    s.push("w", KEYS, np.ones(4), "gradient")
    t = s.sparse["w"]
    ids = np.sort(t.find(KEYS[[1, 3]]))
    np.testing.assert_array_equal(s.keys_of("w", t.layout, ids), KEYS[[1, 3]])  # sorted keys, as if they travelled
    bad_ids = [(ids[::-1], "not sorted"), (np.array([0, 4]), "outside table w's 4 rows"), (np.array([-1, 2]), "outside")]
    for bad, message in bad_ids:
        with pytest.raises(ShardError, match=message):
            s.keys_of("w", t.layout, bad)
    layout = t.layout
    t.delete_rows(t.find(KEYS[:1]))  # rows move: the ids no longer name them
    with pytest.raises(RowsMoved):
        s.keys_of("w", layout, ids)


@pytest.mark.parametrize(
    ("keys", "reason"),
    [
        ([9, 3], "not sorted and unique"),
        ([3, 3], "not sorted and unique"),
        ([0, 3], "key 0 is reserved"),
    ],
)
def test_calls_with_bad_keys_are_refused_with_the_reason(keys, reason):
    s = _shard()
    with pytest.raises(ShardError, match=reason):
        s.pull("w", np.array(keys, dtype=np.uint64), open_session=False)
    with pytest.raises(ShardError, match=reason):
        s.push("w", np.array(keys, dtype=np.uint64), np.ones(2), "gradient")
    assert s.sparse["w"].size == 0


def test_keys_of_another_shard_are_refused():
    s = Shard(1, 2)
    s.declare(ModelSpec("lr").tables())
    keys = np.arange(1, 50, dtype=np.uint64)
    with pytest.raises(ShardError, match="belong to another shard"):
        s.pull("w", keys, open_session=False)
    s.pull("w", keys[shard_of(keys, 2) == 1], open_session=False)
