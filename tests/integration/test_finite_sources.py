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


def test_a_batch_cache_that_cannot_be_written_leaves_training_as_it_would_be(data_dir, tmp_path):
    """--batch-cache only saves parsing: a full disk under it (a file-size limit here, as
    tests/reliability/test_full_disk.py sets one where mounting is refused) stopped the
    trainer with '[Errno 27] File too large'. Now the recording is dropped, said once, and
    the stream trains as it does without a cache; the cache works again once it can write."""
    import resource
    import signal

    stream = tmp_path / "stream"
    stream.mkdir()
    (stream / "avazu.csv").write_text((data_dir / "avazu_10k/train_rows1-9999.csv").read_text())
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--ps", "local", "--no-follow"]
    cmd += ["--metrics-port", "-1", "--batch-cache", str(tmp_path / "cache")]

    def small_files() -> None:  # in the trainer only: its writes past 200 KB fail with EFBIG
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    runs = []
    for name, limit in (("full", small_files), ("plain", None), ("again", None)):
        out = tmp_path / f"{name}.json"
        proc = subprocess.run([*cmd, "--metrics-out", str(out)], capture_output=True, text=True, timeout=300, preexec_fn=limit)  # noqa: PLW1509
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs.append((json.loads(out.read_text()), proc.stderr))
    (full, said), (plain, _), (again, _) = runs
    assert "batch cache: cannot write under" in said and "File too large" in said
    assert full["samples"] == plain["samples"] == 9999 and full["progressive_logloss"] == plain["progressive_logloss"]
    assert [r["batch_cache_hits"] for r in (full, plain, again)] == [0, 0, 1]  # nothing half-written was kept
    assert again["progressive_logloss"] == plain["progressive_logloss"]
