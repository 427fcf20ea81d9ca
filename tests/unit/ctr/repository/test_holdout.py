"""Holdout files written batch by batch hold what one array of the samples would."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from ctr.data.batch import SampleBatch
from ctr.repository import holdout


def _batch(rng: np.random.Generator, samples: int, base: int) -> SampleBatch:
    """Samples whose features sit at `base` of their arrays, as a batch's slice does."""
    counts = rng.integers(0, 6, samples)
    offsets = base + np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    total = base + int(counts.sum()) + 3  # features past the last sample's are not the batch's
    return SampleBatch(
        rng.integers(0, 2, samples).astype(np.float32),
        offsets,
        rng.integers(1, 2**63, total, dtype=np.uint64),
        rng.integers(0, 40, total).astype(np.int32),
        rng.random(total).astype(np.float32),
    )


@pytest.mark.parametrize("sizes", [[], [0], [7], [5, 0, 9, 1]])
def test_batches_written_one_by_one_read_back_as_their_concatenation(tmp_path: Path, sizes: list[int]):
    rng = np.random.default_rng(len(sizes))
    batches = [_batch(rng, n, base=int(rng.integers(0, 4))) for n in sizes]
    path = tmp_path / holdout.HOLDOUT_FILE
    holdout.write_batches(path, batches)
    back, whole = holdout.read(path), holdout.concat(batches)
    for name in ("labels", "offsets", "keys", "fields", "values"):
        assert np.array_equal(getattr(back, name), getattr(whole, name)), name
    # each column's .npy is byte for byte what np.savez writes of the concatenated samples
    saved = io.BytesIO()
    np.savez(saved, **{name: getattr(whole, name) for name in ("labels", "offsets", "keys", "fields", "values")})
    with zipfile.ZipFile(path) as ours, zipfile.ZipFile(saved) as theirs:
        assert ours.namelist() == theirs.namelist()
        for member in theirs.namelist():
            assert ours.read(member) == theirs.read(member), member
