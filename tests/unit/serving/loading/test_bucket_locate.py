"""serving.loading.bucket_locate.locate against its plain reference: an overlay (behind its key
filter) searched first, then each image for the positions its shard owns; row_at reads
the located rows exactly as the maps' get returns them."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ctr.format import key_filter
from ctr.format.bucket_map import NO_FILTER, BucketMap
from ctr.format.located import row_at
from serving.loading.bucket_locate import ROWS_AT, SLOT_SHIFT, locate, locate_reference

WIDTH = 5


def _map(keys: np.ndarray, rng: np.random.Generator) -> tuple[BucketMap, np.ndarray]:
    rows = rng.normal(size=(keys.shape[0], WIDTH)).astype(np.float32)
    m = BucketMap.from_rows(keys, rows.view(np.uint32))
    return m, rows


def _slots(m: BucketMap) -> dict[int, int]:
    keys, slots = m.items()
    return {int(k): int(s) for k, s in zip(keys, slots, strict=True)}


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n_overlay=st.integers(0, 60), n_image=st.integers(1, 400))
def test_locate_equals_its_reference_and_row_at_reads_the_rows(seed, n_overlay, n_image):
    rng = np.random.default_rng(seed)
    pool = np.unique(rng.integers(1, 2**63, 3 * n_image + n_overlay + 50, dtype=np.uint64))
    rng.shuffle(pool)
    image_keys = [pool[:n_image], pool[n_image : 2 * n_image]]
    # half the overlay's keys shadow image keys (the overlay wins), half are its own
    overlay_keys = np.concatenate([pool[: n_overlay // 2], pool[2 * n_image : 2 * n_image + n_overlay // 2]])
    images = [_map(k, rng) for k in image_keys]
    overlay = _map(np.unique(overlay_keys), rng)[0] if overlay_keys.shape[0] else BucketMap(WIDTH)
    bits = np.zeros(key_filter.words_for(1024), dtype=np.uint64)
    key_filter.add_keys(bits, np.ascontiguousarray(overlay.items()[0]))
    probe = rng.permutation(pool[: 3 * n_image + 20]).astype(np.uint64)  # hits in every table, and misses
    owner = (probe % np.uint64(2)).astype(np.int64)  # which image a position asks: its "shard"

    src = np.full(probe.shape[0], -1, dtype=np.int64)
    slot = np.empty(probe.shape[0], dtype=np.int64)
    locate(overlay.table, probe, np.empty(0, np.int64), 0, probe.shape[0], bits, 0, src, slot)
    for s, (image, _) in enumerate(images):
        at = np.flatnonzero(owner == s).astype(np.int64)
        locate(image.table, probe, at, 0, at.shape[0], NO_FILTER, s + 1, src, slot)

    want_src, want_slot = [], []
    maps = [_slots(overlay), *(_slots(m) for m, _ in images)]
    for q, key in enumerate(probe.tolist()):
        (a,), (b,) = locate_reference([maps[0], maps[1 + owner[q]]], [key])
        want_src.append(-1 if a < 0 else (0 if a == 0 else 1 + owner[q]))
        want_slot.append(b)
    assert src.tolist() == want_src
    hit = src >= 0
    assert slot[hit].tolist() == np.array(want_slot)[hit].tolist()

    tables = tuple(m.table.view(np.float32) for m in [overlay, *(i for i, _ in images)])
    for h in np.flatnonzero(hit).tolist():
        table = [overlay, *(i for i, _ in images)][src[h]]
        got = row_at((tables, src, slot, SLOT_SHIFT, ROWS_AT), h)
        np.testing.assert_array_equal(got, table.get(probe[h : h + 1])[0])
