import numpy as np
import pytest

from ctr.format import modelfile


def test_image_and_delta_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(1, 2**64 - 1, 1000, dtype=np.uint64))
    rows = rng.random((keys.shape[0], 2), dtype=np.float32)
    modelfile.write_image(tmp_path / "a.image", keys, rows)
    assert modelfile.verify(tmp_path / "a.image").count == keys.shape[0]
    m = modelfile.load_image(tmp_path / "a.image")
    np.testing.assert_array_equal(m.get(keys), rows)
    modelfile.write_delta(tmp_path / "d.delta", keys[::-1].copy(), rows[::-1].copy(), np.array([7, 3], np.uint64))
    d = modelfile.read_delta(tmp_path / "d.delta")
    assert (d.keys == keys).all() and np.array_equal(d.rows, rows) and d.tombstones.tolist() == [3, 7]


def test_a_1_word_image_maps_as_line_buckets_and_an_older_wide_one_still_loads(tmp_path):
    from ctr.format import bucket_kernels as bk

    rng = np.random.default_rng(1)
    keys = np.unique(rng.integers(1, 2**64 - 1, 3000, dtype=np.uint64))
    rows = rng.random((keys.shape[0], 1), dtype=np.float32)
    modelfile.write_image(tmp_path / "lr.image", keys, rows)
    m = modelfile.load_image(tmp_path / "lr.image")
    assert m.table.shape[1] == bk.LINE_WIDTH and m.table.ctypes.data % 64 == 0
    np.testing.assert_array_equal(m.get(keys), rows)
    wide = np.zeros((500, 24), np.uint32)  # as written before the line layout
    assert bk.put_rows(wide, keys, rows.view(np.uint32), 3, np.empty(1, np.uint32))[2] == 0
    modelfile._write(tmp_path / "old.image", modelfile.Kind.BUCKETS, 1, keys.shape[0], 500, [wide.tobytes()])
    np.testing.assert_array_equal(modelfile.load_image(tmp_path / "old.image").get(keys), rows)
    modelfile._write(tmp_path / "bad.image", modelfile.Kind.BUCKETS, 2, keys.shape[0], 500, [wide.tobytes()])
    with pytest.raises(modelfile.ModelFileError, match="does not match"):
        modelfile.load_image(tmp_path / "bad.image")


def test_flipped_byte_and_truncation_are_detected(tmp_path):
    keys = np.arange(1, 101, dtype=np.uint64)
    path = tmp_path / "a.image"
    modelfile.write_image(path, keys, np.ones((100, 1), np.float32))
    raw = bytearray(path.read_bytes())
    raw[200] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(modelfile.ModelFileError, match="crc32"):
        modelfile.verify(path)
    path.write_bytes(bytes(raw[:-4]))
    with pytest.raises(modelfile.ModelFileError, match="payload is"):
        modelfile.verify(path)


def test_shard_files_order_by_index_not_by_name():
    names = ["shard10-sparse.image", "shard2-sparse.image", "shard0-sparse.image"]
    assert sorted(names, key=modelfile.shard_index) == ["shard0-sparse.image", "shard2-sparse.image", "shard10-sparse.image"]
    for bad in ("shardX-sparse.image", "dense.safetensors", "xshard1-a"):
        with pytest.raises(modelfile.ModelFileError, match="not a shard file name"):
            modelfile.shard_index(bad)
