"""The parsed-batch cache: a replay gives exactly the batches, positions, bad lines and
field growth of parsing, and any change to the file or the settings is a miss."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from ctr.data.fields import FieldIndex
from ctr.data.formats import resolve_fields
from ctr.data.schema import PRESETS, FeatureSchema
from trainer.input.batch_cache import BatchCache
from trainer.input.reader import BatchReader
from trainer.input.source import StreamSource

FILES = [
    ("criteo_10k/train_rows1-10000.tsv", "criteo"),
    ("avazu_10k/train_rows1-9999.csv", "avazu"),
    ("frappe/frappe.test.libfm", "libsvm"),
]


def read(folder: Path, schema: FeatureSchema, fields: FieldIndex, cache: BatchCache | None, batch: int = 1000):
    reader = BatchReader(StreamSource(str(folder), follow=False), schema, fields, batch, 1 << 20, cache)
    out = [r for r in reader.batches() if r is not None]
    return out, reader.bad_lines


def stream_of(data_dir: Path, tmp_path: Path, name: str, bad: bool = True) -> Path:
    folder = tmp_path / "stream"
    folder.mkdir(exist_ok=True)
    lines = (data_dir / name).read_text().splitlines()[:4000]
    if bad:
        lines[7] = "not a sample at all"
    (folder / Path(name).name).write_text("\n".join(lines) + "\n")
    return folder


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.position == y.position and x.lines == y.lines
        for name in ("labels", "offsets", "keys", "fields", "values"):
            np.testing.assert_array_equal(getattr(x.batch, name), getattr(y.batch, name))


@pytest.mark.parametrize(("name", "preset"), FILES)
def test_a_replay_equals_parsing(data_dir, tmp_path, name, preset):
    folder = stream_of(data_dir, tmp_path, name)
    schema = PRESETS[preset]
    head = (folder / Path(name).name).read_text().splitlines()[:100]
    cache = BatchCache(tmp_path / "cache", schema, 1000, 1 << 20, 1 << 30)
    parsed, bad = read(folder, schema, resolve_fields(schema, head, freeze=False), None)
    first, bad1 = read(folder, schema, resolve_fields(schema, head, freeze=False), cache)
    assert cache.misses == 1 and cache.hits == 0 and bad1 == bad == 1
    replayed, bad2 = read(folder, schema, resolve_fields(schema, head, freeze=False), cache)
    assert cache.hits == 1 and bad2 == bad
    same(parsed, first)
    same(parsed, replayed)


def test_fields_a_file_added_come_back_with_the_replay(tmp_path):
    schema = PRESETS["kv"]
    folder = tmp_path / "stream"
    folder.mkdir()
    (folder / "a.txt").write_text("".join(f"{i % 2}\tuser={i}\tad{i % 3}={i}\n" for i in range(50)))
    cache = BatchCache(tmp_path / "cache", schema, 16, 1 << 20, 1 << 30)
    parsed_fields = FieldIndex()
    parsed, _ = read(folder, schema, parsed_fields, cache, 16)
    replay_fields = FieldIndex()
    replayed, _ = read(folder, schema, replay_fields, cache, 16)
    assert cache.hits == 1 and replay_fields.names == parsed_fields.names == ["user", "ad0", "ad1", "ad2"]
    same(parsed, replayed)


def test_a_changed_file_or_setting_is_a_miss_and_a_damaged_entry_is_ignored(data_dir, tmp_path):
    folder = stream_of(data_dir, tmp_path, "frappe/frappe.test.libfm", bad=False)
    schema = PRESETS["libsvm"]
    root = tmp_path / "cache"

    def run(batch: int = 1000):
        cache = BatchCache(root, schema, batch, 1 << 20, 1 << 30)
        got, _ = read(folder, schema, FieldIndex(), cache, batch)
        return cache, got

    run()
    cache, got = run()
    assert cache.hits == 1
    cache, _ = run(batch=500)  # another batch size cuts other batches
    assert cache.hits == 0
    path = folder / "frappe.test.libfm"
    with open(path, "a") as f:
        f.write("1 5:1\n")
    cache, grown = run()
    assert cache.hits == 0 and sum(len(r.batch) for r in grown) == sum(len(r.batch) for r in got) + 1
    entry = root / (cache.key(str(path), FieldIndex()) or "")
    keys = entry / "keys.bin"
    os.truncate(keys, keys.stat().st_size - 8)
    cache, again = run()
    assert cache.hits == 0
    same(grown, again)  # parsed again, and the entry rewritten whole
    cache, _ = run()
    assert cache.hits == 1


def test_a_file_left_unfinished_writes_no_entry_and_the_cap_drops_the_oldest(data_dir, tmp_path):
    folder = stream_of(data_dir, tmp_path, "frappe/frappe.test.libfm", bad=False)
    schema = PRESETS["libsvm"]
    root = tmp_path / "cache"
    cache = BatchCache(root, schema, 1000, 1 << 20, 1 << 30)
    reader = BatchReader(StreamSource(str(folder), follow=False), schema, FieldIndex(), 1000, 1 << 20, cache)
    it = reader.batches()
    next(it)
    it.close()  # the stream stops inside the file
    assert list(root.iterdir()) == []
    for i in range(3):
        shutil.copy(folder / "frappe.test.libfm", folder / f"copy{i}.libfm")
    small = BatchCache(root, schema, 1000, 1 << 20, 1)  # a cap below one entry keeps the newest only
    read(folder, schema, FieldIndex(), small)
    assert len([d for d in root.iterdir() if not d.name.startswith(".")]) == 1
