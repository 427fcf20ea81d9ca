"""Filling an image's table with keys in their first bucket where it can
(ctr.format.bucket_placement): the kernel against its plain-Python reference, every key
found, and the share of keys in their first bucket against the random walk's."""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt
import pytest

from ctr.format import bucket_kernels as bk
from ctr.format.bucket_map import BucketMap, aligned_zeros, buckets_for, image_load, slots_for
from ctr.format.bucket_placement import place_first_preferring, place_reference


@nb.njit(cache=True)
def _in_first_bucket(table: npt.NDArray[np.uint32]) -> tuple[int, int]:
    """(keys in their first bucket, keys)."""
    slots = bk.slots_of(table)
    first = total = 0
    for b in range(table.shape[0]):
        for j in range(slots):
            key = bk._key_at(table, b, j)
            if key != np.uint64(0):
                total += 1
                first += bk.first_bucket(bk.mix(key), table.shape[0]) == b
    return first, total


def _keys_rows(n: int, row_words: int, seed: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint32]]:
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(1, 2**64 - 1, n, dtype=np.uint64))
    rng.shuffle(keys)
    return keys, rng.integers(0, 2**32, (keys.shape[0], row_words), dtype=np.uint64).astype(np.uint32)


def _empty(n: int, row_words: int) -> npt.NDArray[np.uint32]:
    return aligned_zeros(buckets_for(n, image_load(row_words), slots_for(row_words)), bk.width_for(row_words))


@pytest.mark.parametrize(("row_words", "seed"), [(1, 0), (1, 1), (3, 2), (9, 3)])
def test_the_kernel_fills_the_table_its_reference_does(row_words: int, seed: int) -> None:
    keys, rows = _keys_rows(3000, row_words, seed)
    table, ref = _empty(keys.shape[0], row_words), _empty(keys.shape[0], row_words)
    assert int(place_first_preferring(table, keys, rows, 7)) == 0
    assert place_reference(ref, keys, rows)
    np.testing.assert_array_equal(table, ref)


@pytest.mark.parametrize("row_words", [1, 9])
def test_every_key_finds_its_row_and_more_sit_in_their_first_bucket_than_after_a_random_walk(row_words: int) -> None:
    keys, rows = _keys_rows(100_000, row_words, 5)
    m = BucketMap.from_rows(keys, rows)
    np.testing.assert_array_equal(m.get(keys).view(np.uint32), rows)
    assert m.size == keys.shape[0]
    walked = _empty(keys.shape[0], row_words)
    done, _, lost = bk.put_rows(walked, keys, rows, 7, np.empty(row_words, np.uint32), bk.FILL_KICKS)
    assert (done, int(lost)) == (keys.shape[0], 0)
    first, total = _in_first_bucket(m.table)
    first_walked, _ = _in_first_bucket(walked)
    assert total == keys.shape[0]
    # line tables at 0.98: 0.52 of keys in their first bucket after the walk, 0.76 here
    assert first / total > first_walked / total + 0.1


def test_a_table_too_small_returns_a_homeless_key() -> None:
    keys, rows = _keys_rows(200, 1, 9)
    table = aligned_zeros(20, bk.width_for(1))  # 100 slots
    lost = place_first_preferring(table, keys, rows, 7)
    assert int(lost) != 0
    assert int(lost) in set(keys.tolist())
