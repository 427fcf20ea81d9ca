"""A file or a pipe ends at its end, and a file run's last export is judged on the file's
tail, which the trainer never trains on; `boundless eval` scores a published version
offline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from ctr.repository import holdout

CRITEO = "criteo_10k/train_rows1-10000.tsv"


def _train(tmp_path: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "boundless", "train", "--metrics-port", "-1", "--port", "-1", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=240, input=stdin, cwd=tmp_path)


def test_a_file_run_ends_and_holds_its_tail_out_of_training(data_dir: Path, tmp_path: Path):
    src = data_dir / CRITEO
    out = tmp_path / "m.json"
    proc = _train(tmp_path, "--source", str(src), "--export-dir", "exports", "--metrics-out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["samples"] == 8000 and result["held_out_samples"] == 2000
    (export,) = sorted((tmp_path / "exports").iterdir())
    manifest = json.loads((export / "export.json").read_text())
    assert manifest["holdout"]["samples"] == 2000 and manifest["holdout"]["seen"] == 0
    held = holdout.read(export / "holdout.npz")
    tail = [float(line.split("\t", 1)[0]) for line in src.read_text().splitlines()[-2000:]]
    np.testing.assert_array_equal(held.labels, np.asarray(tail, dtype=held.labels.dtype))  # the file's last lines


def test_a_pipe_ends_at_its_end_and_follow_keeps_reading(data_dir: Path, tmp_path: Path):
    lines = (data_dir / CRITEO).read_text().splitlines()[:3000]
    out = tmp_path / "m.json"
    proc = _train(tmp_path, "--source", "-", "--metrics-out", str(out), stdin="\n".join(lines) + "\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(out.read_text())["samples"] == 3000  # no export: nothing held back
    follow = _train(tmp_path, "--source", str(data_dir / CRITEO), "--follow", "--idle-exit-s", "1", "--progress-interval-s", ".2")
    assert follow.returncode == 0 and "following" in follow.stderr


def test_compressed_files_train_as_the_text_they_hold(data_dir: Path, tmp_path: Path):
    """A gzip'd file named as the source failed on "line is not valid UTF-8"; in a folder of
    plain files it trained nothing and a few of its bytes were counted as bad lines."""
    import gzip

    import zstandard

    raw = (data_dir / CRITEO).read_bytes()
    lines = raw.splitlines(keepends=True)
    folder = tmp_path / "days"
    folder.mkdir()
    (folder / "day-0.tsv").write_bytes(b"".join(lines[:3000]))
    (folder / "day-1.tsv.gz").write_bytes(gzip.compress(b"".join(lines[3000:6000])))
    (folder / "day-2.tsv.zst").write_bytes(zstandard.ZstdCompressor().compress(b"".join(lines[6000:])))
    out = tmp_path / "m.json"
    proc = _train(tmp_path, "--source", str(folder), "--no-follow", "--format", "criteo", "--metrics-out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["samples"] == len(lines) and result["bad_lines"] == 0, result
    alone = _train(tmp_path, "--source", str(folder / "day-1.tsv.gz"), "--metrics-out", str(out))
    assert alone.returncode == 0 and json.loads(out.read_text())["samples"] == 3000, alone.stderr[-2000:]
