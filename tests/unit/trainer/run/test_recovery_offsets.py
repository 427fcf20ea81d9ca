"""A cut's offsets (trainer.run.recovery) come back as they went: position, samples and the
metrics window, whose 0/1 labels travel as bits and predictions in float16, the whole zstd'd;
soft labels and cuts written before bits, float16 or zstd still read."""

from __future__ import annotations

import json

import numpy as np
import zstandard

from trainer.input.source import Position
from trainer.json_arrays import array_text
from trainer.run.recovery import decode_offsets, encode_offsets, encode_workers, worker_state
from trainer.step.progressive import ProgressiveMetrics


def _progress(labels: np.ndarray) -> dict[str, object]:
    probs = np.random.default_rng(0).random(size=int(labels.shape[0]), dtype=np.float32)
    return {"count": 1234, "positives": 300, "loss_sum": 512.25, "labels": labels, "probs": probs}


def test_binary_labels_travel_as_bits_and_come_back_exactly():
    labels = (np.random.default_rng(1).random(10_001) < 0.3).astype(np.float32)
    state = worker_state(Position(file="a", offset=7, line=3), 1234, _progress(labels))
    assert "labels" not in state["progress"] and len(state["progress"]["label_bits"]) < 2000
    point = decode_offsets(5, json.dumps(state).encode())
    assert point.cut == 5 and point.samples == 1234 and point.position == Position(file="a", offset=7, line=3)
    np.testing.assert_array_equal(point.progress["labels"], labels)
    probs = np.asarray(_progress(labels)["probs"])
    np.testing.assert_array_equal(point.progress["probs"], probs.astype(np.float16).astype(np.float32))
    assert point.progress["probs"].dtype == np.float32 and len(state["progress"]["probs16"]) < 4 * 10_001 * 2 / 3 + 4
    assert point.progress["loss_sum"] == 512.25


def test_soft_labels_and_cuts_written_before_bits_still_read():
    soft = np.array([0.0, 0.25, 1.0], dtype=np.float32)
    point = decode_offsets(1, json.dumps(worker_state(Position(), 3, _progress(soft))).encode())
    np.testing.assert_array_equal(point.progress["labels"], soft)
    old = worker_state(Position(), 3, _progress(soft))
    old["progress"]["labels"] = array_text(np.array([1.0, 0.0, 1.0]), "<f4")  # as cuts were written before
    old["progress"]["probs"] = array_text(np.array([0.125, 0.5, 0.3]), "<f4")
    del old["progress"]["probs16"]
    parts = decode_offsets(2, encode_workers([old, old])).parts
    assert len(parts) == 2 and list(parts[1].progress["labels"]) == [1.0, 0.0, 1.0]
    np.testing.assert_array_equal(parts[1].progress["probs"], np.array([0.125, 0.5, 0.3], dtype=np.float32))


def test_offsets_travel_zstd_and_plain_json_of_older_cuts_still_reads():
    progress = ProgressiveMetrics(10_000)
    rng = np.random.default_rng(2)
    probs = (1 / (1 + np.exp(-rng.normal(size=10_000)))).astype(np.float32)
    progress.update((rng.random(10_000) < probs).astype(np.float32), probs)
    blob = encode_offsets(Position(file="a", offset=9, line=4), 10_000, progress)
    plain = json.dumps(worker_state(Position(file="a", offset=9, line=4), 10_000, progress.state())).encode()
    assert blob.startswith(zstandard.FRAME_HEADER) and len(blob) < 0.8 * len(plain)
    new, old = decode_offsets(3, blob), decode_offsets(3, plain)
    assert new.position == old.position == Position(file="a", offset=9, line=4) and new.samples == 10_000
    np.testing.assert_array_equal(new.progress["probs"], old.progress["probs"])
    np.testing.assert_array_equal(new.progress["labels"], old.progress["labels"])
