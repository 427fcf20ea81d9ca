"""A damaged shard store is refused, never loaded as a smaller model: a flipped SST block,
a MANIFEST cut short, a cut missing rows. Before, rocksdict's items() ended quietly at a
checksum failure, and the shard reported "loaded committed cut N" with a table of 0 rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ctr.model.spec import ModelSpec
from ps.server.shard import Shard
from ps.server.store import ShardStore, StoreCorrupted

SPEC = ModelSpec("fm", k=8)


def _stored(path: Path) -> dict[str, tuple[int, int]]:
    """A shard with two committed cuts, its tables flushed to SST files; their digests."""
    shard = Shard(0, 1, ShardStore(path))
    shard.declare(SPEC.tables())
    for cut, (lo, hi) in enumerate([(1, 40001), (20001, 60001)], start=1):
        keys = np.arange(lo, hi, dtype=np.uint64) * np.uint64(7919)
        shard.push("v", keys, np.full((keys.shape[0], 8), 0.1 * cut), "gradient", samples=keys.shape[0])
        shard.push("w", keys, np.full((keys.shape[0], 1), 0.1 * cut), "gradient", samples=keys.shape[0])
        shard.prepare(cut, str(cut).encode())
        shard.commit(cut)
    digests = {t.name: (t.rows, t.digest) for t in shard.stats()}
    shard.close()
    assert shard.store is not None
    shard.store.db.flush()
    shard.store.close()
    return digests


def _flip(path: Path, at: float) -> None:
    data = bytearray(path.read_bytes())
    i = int(len(data) * at)
    data[i : i + 64] = bytes(b ^ 0xFF for b in data[i : i + 64])
    path.write_bytes(bytes(data))


def test_a_flipped_table_block_is_refused(tmp_path: Path):
    db = tmp_path / "db"
    _stored(db)
    largest = max(db.glob("*.sst"), key=lambda f: f.stat().st_size)
    _flip(largest, 0.4)
    with pytest.raises(Exception) as refused:  # StoreCorrupted, or RocksDB's own corruption error
        Shard(0, 1, ShardStore(db))
    assert "orrupt" in str(refused.value) or "checksum" in str(refused.value).lower() or isinstance(refused.value, StoreCorrupted)


def test_a_manifest_cut_short_is_refused_not_opened_empty(tmp_path: Path):
    db = tmp_path / "db"
    _stored(db)
    manifest = next(db.glob("MANIFEST-*"))
    manifest.write_bytes(manifest.read_bytes()[: manifest.stat().st_size // 2])
    with pytest.raises(Exception) as refused:
        Shard(0, 1, ShardStore(db))
    assert "Traceback" not in str(refused.value)
    assert "MANIFEST" in str(refused.value) or "orrupt" in str(refused.value)


def test_a_cut_missing_rows_is_refused_and_the_shard_keeps_what_it_holds(tmp_path: Path):
    db = tmp_path / "db"
    digests = _stored(db)
    shard = Shard(0, 1, ShardStore(db))
    assert {t.name: (t.rows, t.digest) for t in shard.stats()} == digests
    store = shard.store
    assert store is not None
    # a block of cut 1 gone, as if its SST block had been skipped
    victim = next(k for k, _ in store._scan(b"bv\0") if k.startswith(b"bv\0"))
    store.db.delete(victim)
    with pytest.raises(StoreCorrupted, match="could be read"):
        shard.restore(1, generation=1)
    assert {t.name: (t.rows, t.digest) for t in shard.stats()} == digests  # untouched
    assert shard.committed.cut == 2 and store.committed() == 2 and store.meta(2) is not None
