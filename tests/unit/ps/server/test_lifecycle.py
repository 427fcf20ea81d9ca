"""Row lifecycle on a shard (ps/server/lifecycle.py): admission after N sightings through a
counting Bloom filter, eviction by row cap and TTL with a real delete, tombstones in
checkpoint cuts (a restore does not bring evicted rows back) and in delta exports, which
serving applies so evicted keys score as absent."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ctr.format import modelfile
from ctr.model.spec import ModelSpec
from ps.server.lifecycle import HASHES, Lifecycle, _slot, count_sightings
from ps.server.shard import Shard
from ps.server.store import BLOOM_BLOCK, ShardStore
from ps.server.tables import SparseTable
from serving.loading.overlay import Overlay
from serving.loading.servable import apply_delta

SPEC = ModelSpec("lr")


def count_sightings_reference(counters: np.ndarray, keys: np.ndarray) -> list[int]:
    out = []
    for key in keys.tolist():
        slots = [_slot(np.uint64(key), i, counters.shape[0]) for i in range(HASHES)]
        for s in set(slots):  # a counter two hashes share counts the sighting once
            counters[s] = min(255, int(counters[s]) + 1)
        out.append(min(int(counters[s]) for s in slots))
    return out


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 30), max_size=60), st.integers(64, 200))
def test_count_sightings_equals_its_reference(keys, size):
    a, b = np.zeros(size, np.uint8), np.zeros(size, np.uint8)
    arr = np.array(keys, dtype=np.uint64)
    assert count_sightings(a, arr).tolist() == count_sightings_reference(b, arr)
    np.testing.assert_array_equal(a, b)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 300), min_size=1, max_size=120, unique=True), st.data())
def test_deleted_rows_leave_the_rest_findable_with_their_state(keys, data):
    t = SparseTable(SPEC.tables()[0], capacity=8)
    arr = np.array(keys, dtype=np.uint64)
    ids, _ = t.insert(arr)
    t.state[ids, 0] = arr.astype(np.float64)  # each row remembers its key
    gone = data.draw(st.lists(st.sampled_from(keys), max_size=len(keys), unique=True))
    removed = t.delete_rows(t.find(np.array(gone, dtype=np.uint64)))
    assert sorted(removed.tolist()) == sorted(gone) and t.size == len(keys) - len(gone)
    left = np.array(sorted(set(keys) - set(gone)), dtype=np.uint64)
    found = t.find(left)
    assert (found >= 0).all() and (found < t.size).all()
    np.testing.assert_array_equal(t.state[found, 0], left.astype(np.float64))
    assert (t.find(np.array(gone, dtype=np.uint64)) < 0).all()


def _push(shard: Shard, keys: np.ndarray) -> None:
    shard.push("w", keys, np.full((keys.shape[0], 2), 0.01), "delta", samples=keys.shape[0])


def test_a_key_gets_a_row_from_its_nth_sighting():
    shard = Shard(0, 1, lifecycle=Lifecycle(admit_after=3, bloom_counters=1 << 16))
    shard.declare(SPEC.tables())
    keys = np.array([11, 22], dtype=np.uint64)
    initial = shard.pull("w", keys, open_session=False, state=True)[1]
    for _ in range(2):
        _push(shard, keys)
        assert shard.sparse["w"].size == 0  # dropped: seen fewer than 3 times
        np.testing.assert_array_equal(shard.pull("w", keys, open_session=False, state=True)[1], initial)
    _push(shard, keys)
    assert shard.sparse["w"].size == 2
    stats = {t.name: t for t in shard.stats()}["w"]
    assert stats.not_admitted == 4 and stats.rows == 2
    _push(shard, keys)  # a key that has a row is not counted again
    assert {t.name: t for t in shard.stats()}["w"].not_admitted == 4


def test_admission_counts_and_update_clocks_survive_a_restart_and_a_restore(tmp_path):
    """A cut holds the admission filter (its changed blocks only) and the eviction clocks:
    a shard that restarts, or goes back to the cut, admits and evicts as one that never
    stopped."""
    policy = Lifecycle(admit_after=3, bloom_counters=1 << 18, ttl_updates=8)
    shard = Shard(0, 1, ShardStore(tmp_path / "db"), lifecycle=policy)
    shard.declare(SPEC.tables())
    twice, once = np.array([11, 22], dtype=np.uint64), np.array([33], dtype=np.uint64)
    for _ in range(2):
        _push(shard, twice)
    _push(shard, once)
    shard.prepare(1, b"")
    shard.commit(1)
    _push(shard, np.array([44], dtype=np.uint64))  # changes one block of the filter
    shard.prepare(2, b"")
    shard.commit(2)
    store = shard.store
    assert store is not None
    blocks = [k for k, _ in store.db.items(from_key=b"f") if isinstance(k, bytes) and k.startswith(b"f")]
    changed = {_slot(np.uint64(44), i, 1 << 18) // BLOOM_BLOCK for i in range(HASHES)}
    assert len(blocks) == 4 + len(changed)  # cut 1 (full): every block; cut 2: those 44 changed
    twin = Shard(0, 1, lifecycle=policy)  # never stops
    twin.declare(SPEC.tables())
    for keys in (twice, twice, once, np.array([44], dtype=np.uint64)):
        _push(twin, keys)
    shard.close()
    store.close()

    again = Shard(0, 1, ShardStore(tmp_path / "db"), lifecycle=policy)
    assert again.update_seq == twin.update_seq and {s.name: s.not_admitted for s in again.stats()}["w"] == 6
    for s in (again, twin):
        _push(s, twice)  # a third sighting: admitted
        for _ in range(9):
            _push(s, np.array([55, 66, 77], dtype=np.uint64))  # 55..77 admitted from the third; 11, 22 age out
    for s in (again, twin):
        assert {t.name: (t.rows, t.digest, t.not_admitted, t.evicted) for t in s.stats()} == {
            t.name: (t.rows, t.digest, t.not_admitted, t.evicted) for t in twin.stats()
        }
    assert again.sparse["w"].find(twice).max() < 0 and {t.name: t for t in again.stats()}["w"].evicted == 2
    again.restore(1, generation=1)  # 44's sighting is undone with cut 2
    np.testing.assert_array_equal(again.rows.counters()["w"], store_counters_at(tmp_path, 1, policy))


def store_counters_at(tmp_path, cut: int, policy: Lifecycle) -> np.ndarray:
    """The filter a fresh shard that saw the pushes before cut `cut` holds."""
    fresh = Shard(0, 1, lifecycle=policy)
    fresh.declare(SPEC.tables())
    for keys in ([11, 22], [11, 22], [33])[: 3 if cut == 1 else 4]:
        _push(fresh, np.array(keys, dtype=np.uint64))
    return fresh.rows.counters()["w"]


def test_the_row_cap_evicts_the_least_recently_updated(tmp_path):
    shard = Shard(0, 1, ShardStore(tmp_path / "db"), lifecycle=Lifecycle(max_rows=100))
    shard.declare(SPEC.tables())
    for lo in range(1, 301, 10):
        _push(shard, np.arange(lo, lo + 10, dtype=np.uint64))
    t = shard.sparse["w"]
    assert 100 <= t.size <= 105
    present = np.flatnonzero(t.find(np.arange(1, 301, dtype=np.uint64)) >= 0) + 1
    assert present.min() > 300 - t.size - 10  # the newest stayed
    shard.prepare(1, b"")
    shard.commit(1)
    kept = set(present.tolist())
    for lo in range(301, 401, 10):  # more evictions after the cut...
        _push(shard, np.arange(lo, lo + 10, dtype=np.uint64))
    shard.prepare(2, b"")
    shard.commit(2)
    at_2 = set((np.flatnonzero(t.find(np.arange(1, 401, dtype=np.uint64)) >= 0) + 1).tolist())
    shard.close()
    shard.store.close()  # type: ignore[union-attr]
    again = Shard(0, 1, ShardStore(tmp_path / "db"))
    loaded = again.sparse["w"]
    assert set((np.flatnonzero(loaded.find(np.arange(1, 401, dtype=np.uint64)) >= 0) + 1).tolist()) == at_2 != kept
    again.restore(1, generation=1)  # ...and the cut before them still has its own rows
    assert set((np.flatnonzero(again.sparse["w"].find(np.arange(1, 401, dtype=np.uint64)) >= 0) + 1).tolist()) == kept


def test_ttl_in_updates_evicts_rows_left_alone():
    shard = Shard(0, 1, lifecycle=Lifecycle(ttl_updates=5))
    shard.declare(SPEC.tables())
    _push(shard, np.array([7, 8], dtype=np.uint64))
    for _ in range(7):
        _push(shard, np.array([9], dtype=np.uint64))
    t = shard.sparse["w"]
    assert (t.find(np.array([7, 8], dtype=np.uint64)) < 0).all() and t.find(np.array([9], dtype=np.uint64))[0] >= 0
    assert {s.name: s for s in shard.stats()}["w"].evicted == 2


def test_tombstones_reach_serving_and_evicted_keys_score_as_absent(tmp_path):
    shard = Shard(0, 1, lifecycle=Lifecycle(max_rows=20), export_root=tmp_path)
    shard.declare(SPEC.tables())
    _push(shard, np.arange(1, 21, dtype=np.uint64))
    files, _ = shard.export(True, "v1")  # a full image with keys 1..20
    image = modelfile.load_image(tmp_path / "v1" / files[0].name)
    _push(shard, np.arange(21, 31, dtype=np.uint64))  # 30 > 21: back to 20, keys 1..10 go
    files, _ = shard.export(False, "v2")
    delta = modelfile.read_delta(tmp_path / "v2" / files[0].name)
    np.testing.assert_array_equal(np.sort(delta.tombstones), np.arange(1, 11, dtype=np.uint64))
    overlay = Overlay(image.row_words)
    overlay.put(np.array([5, 25], dtype=np.uint64), np.ones((2, image.row_words), np.float32))  # an earlier delta's
    apply_delta(overlay, tmp_path / "v2" / files[0].name, [image])
    evicted = np.arange(1, 11, dtype=np.uint64)
    slots = overlay.find(evicted)
    assert (slots >= 0).all() and not overlay.get(evicted).any()  # masks the image's rows: absent
    assert overlay.find(np.array([25], dtype=np.uint64))[0] >= 0  # written again by the delta
