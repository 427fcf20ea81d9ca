"""A checkpoint cut whose background write fails (a full disk under the shard's RocksDB)
leaves its rows due for the next cut: after space returns, the next committed cut holds
them, and a restart (a new process on the store, as after kill -9) loads exactly the model
the shard held. Before, the shard advanced its persisted sequence at prepare time, the next
cut held only rows changed after the failed one, and a restart silently lost the rest."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ctr.model.spec import ModelSpec
from ps.server.shard import Shard
from ps.server.store import ShardStore

SPEC = ModelSpec("fm", k=4)


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[None]:
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs is not allowed here")  # CI and the dev machines run as root, where it is
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _fill(path: Path) -> list[Path]:
    fillers = []
    for size in (1 << 20, 1 << 12, 1):
        f = path / f"filler-{size}"
        fillers.append(f)
        with contextlib.suppress(OSError), open(f, "wb") as out:
            while True:
                out.write(b"\0" * size)
                out.flush()
    return fillers


def _push(shard: Shard, keys: np.ndarray, scale: float) -> None:
    shard.push("v", keys, np.full((keys.shape[0], 4), scale), "gradient", samples=keys.shape[0])
    shard.push("w", keys, np.full((keys.shape[0], 1), scale), "gradient", samples=keys.shape[0])


def _model(shard: Shard) -> dict[str, tuple[int, int]]:
    return {t.name: (t.rows, t.digest) for t in shard.stats()}


def test_a_cut_written_after_a_failed_one_holds_its_rows(tmp_path: Path):
    disk = tmp_path / "disk"
    with _tmpfs(disk, "48m"):
        shard = Shard(0, 1, ShardStore(disk / "db"))
        shard.declare(SPEC.tables())
        _push(shard, np.arange(1, 2001, dtype=np.uint64), 0.1)
        shard.prepare(1, b"1")
        shard.commit(1)
        _push(shard, np.arange(2001, 60001, dtype=np.uint64), 0.2)  # rows only the failed cut would hold
        fillers = _fill(disk)
        shard.prepare(2, b"2")
        with pytest.raises(Exception, match="No space left"):
            shard.commit(2)  # the write could not land (rocksdict's IO error): the trainer logs it and trains on
        for f in fillers:
            f.unlink()
        _push(shard, np.arange(1, 101, dtype=np.uint64), 0.3)
        rows = shard.prepare(3, b"3")
        assert rows >= 58000  # the failed cut's rows are in this one
        shard.commit(3)
        assert shard.failed_cuts == 1 and shard.cuts() == [1, 3]
        expected = _model(shard)
        shard.close()
        shard.store.close()  # type: ignore[union-attr]

        again = Shard(0, 1, ShardStore(disk / "db"))  # a restart loads the committed cut
        assert again.committed.cut == 3 and _model(again) == expected
