"""The folder source's contract: each line trained once when a producer writes `x.part` and
renames it, when a file read is renamed inside the folder, and when a followed file is
truncated and rewritten in place (copytruncate, reported); a NUL byte makes its line bad."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from boundless.processes import start

LINES_PER_FILE = 500


def _lines(data_dir: Path, n: int, skip: int = 0) -> list[str]:
    return (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[skip : skip + n]


def _trainer(folder: Path, work: Path, idle_s: float = 2.5) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(folder), "--format", "libsvm", "--follow"]
    cmd += ["--idle-exit-s", str(idle_s), "--metrics-port", "-1", "--port", "-1", "--metrics-out", str(work / "m.json")]
    cmd += ["--curve-out", str(work / "curve.jsonl"), "--progress-interval-s", "0.1", "--batch-size", "100"]
    return subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)


def _trained(work: Path) -> int:
    path = work / "curve.jsonl"
    if not path.exists():
        return 0
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return int(rows[-1]["samples"]) if rows else 0


def _wait_trained(work: Path, n: int, proc: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while _trained(work) < n:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, f"{_trained(work)} of {n} trained"
        time.sleep(0.05)


def _finish(proc: subprocess.Popen[str], work: Path) -> tuple[dict[str, float], str]:
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    return json.loads((work / "m.json").read_text()), err


def test_part_files_renamed_into_place_are_read_once(data_dir: Path, tmp_path: Path):
    folder = tmp_path / "in"
    folder.mkdir()
    lines = _lines(data_dir, 20 * LINES_PER_FILE)
    (folder / "f00.libsvm").write_text("\n".join(lines[:LINES_PER_FILE]) + "\n")
    proc = _trainer(folder, tmp_path)
    _wait_trained(tmp_path, LINES_PER_FILE, proc)
    for i in range(1, 20):  # the producer's usual handling: write aside, then rename into place
        part = folder / f"f{i:02d}.libsvm.part"
        with open(part, "w") as out:
            chunk = lines[i * LINES_PER_FILE : (i + 1) * LINES_PER_FILE]
            out.write("\n".join(chunk[: len(chunk) // 2]) + "\n")
            out.flush()
            time.sleep(0.02)  # the reader may see it half written
            out.write("\n".join(chunk[len(chunk) // 2 :]) + "\n")
        os.rename(part, folder / f"f{i:02d}.libsvm")
    _wait_trained(tmp_path, 20 * LINES_PER_FILE, proc)
    os.rename(folder / "f03.libsvm", folder / "zz-archived.libsvm")  # read already: not read again
    result, err = _finish(proc, tmp_path)
    assert result["samples"] == 20 * LINES_PER_FILE and result["bad_lines"] == 0
    assert "renamed" in err and result["source_files_lost"] == 0  # renamed files are not lost ones


def test_a_file_truncated_and_rewritten_in_place_is_reported_and_read_anew(data_dir: Path, tmp_path: Path):
    folder = tmp_path / "in"
    folder.mkdir()
    log = folder / "events.libsvm"
    first, then = _lines(data_dir, 3000), _lines(data_dir, 1200, skip=3000)
    log.write_text("\n".join(first) + "\n")
    proc = _trainer(folder, tmp_path)
    _wait_trained(tmp_path, 3000, proc)
    with open(log, "r+") as f:  # copytruncate: the producer goes on writing the same file
        f.truncate(0)
    with open(log, "a") as f:
        f.write("\n".join(then[:600]) + "\n" + "1 3:1 5\x001:1\n" + "\n".join(then[600:]) + "\n")
    result, err = _finish(proc, tmp_path)
    assert result["samples"] == 3000 + 1200 and result["bad_lines"] == 1
    assert "truncated" in err and "a NUL byte in the line" in err


def test_a_followed_folder_holding_the_trainers_own_outputs_reads_only_its_samples(data_dir: Path, tmp_path: Path) -> None:
    """Exports, the metrics file and the curve written inside the folder followed (a layout
    users pick) are never read back as samples: subfolders are read, so an export folder
    there would have been, and the curve is appended to while the folder is followed."""
    folder = tmp_path / "stream"
    (folder / "day=1").mkdir(parents=True)
    (folder / "day=1" / "part-0.libfm").write_text("\n".join(_lines(data_dir, 3000)) + "\n")
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(folder), "--format", "libsvm", "--follow"]
    cmd += ["--idle-exit-s", "2.5", "--metrics-port", "-1", "--port", "-1", "--metrics-out", str(folder / "m.json")]
    cmd += ["--curve-out", str(folder / "curve.jsonl"), "--progress-interval-s", "0.1", "--batch-size", "500"]
    cmd += ["--export-dir", str(folder / "exports"), "--export-interval-s", "0.2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads((folder / "m.json").read_text())
    assert got["samples"] + got["held_out_samples"] == 3000 and got["bad_lines"] == 0 and got["exports"] >= 1, got


def test_a_csv_arriving_after_the_peek_is_read_by_label_and_format_csv(data_dir: Path, tmp_path: Path) -> None:
    """A trainer started on an empty folder tells the format from the first file that comes
    after its peek gave up, with --label's column and --format csv's delimiters (before:
    the late detection knew neither, and every line of a csv whose label is 'conv' was bad)."""
    text = (data_dir / "avazu_10k/train_rows1-9999.csv").read_text().splitlines()[:2001]
    header = text[0].replace(",click,", ",conv,").replace(",", ";")
    for fmt in ("auto", "csv"):
        folder, work = tmp_path / fmt / "stream", tmp_path / fmt
        folder.mkdir(parents=True)
        cmd = [sys.executable, "-m", "boundless", "train", "--source", str(folder), "--label", "conv", "--format", fmt]
        cmd += ["--peek-timeout-s", "0.2", "--idle-exit-s", "3", "--metrics-port", "-1", "--port", "-1"]
        proc = subprocess.Popen([*cmd, "--metrics-out", str(work / "m.json")], stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)  # past the peek
        rows = [x.replace(",", ";") for x in text[1:]]
        (folder / ".day.tmp").write_text("\n".join([header, *rows]) + "\n")
        (folder / ".day.tmp").rename(folder / "day.csv")
        result, err = _finish(proc, work)
        assert result["samples"] == 2000 and result["bad_lines"] == 0, err[-2000:]
        assert "detected format csv in" in err


def test_files_removed_while_the_trainer_was_down_are_said_and_counted(data_dir: Path, tmp_path: Path) -> None:
    """A retention that ran ahead of a stopped trainer removed the file its checkpoint stands
    in, and a file landed late under an earlier name: the restart says both, counts them
    (summary and Prometheus), and goes on with the next file."""
    folder = tmp_path / "in"
    folder.mkdir()
    lines = _lines(data_dir, 4 * LINES_PER_FILE)
    for i in range(4):
        (folder / f"f{i}.libsvm").write_text("\n".join(lines[i * LINES_PER_FILE : (i + 1) * LINES_PER_FILE]) + "\n")
    shard = start("ps0", ["ps", "--shard-count", "1", "--data-dir", str(tmp_path / "ps0")], tmp_path)
    try:
        shard.wait_ready()
        cmd = [sys.executable, "-m", "boundless", "train", "--source", str(folder), "--format", "libsvm", "--no-follow"]
        cmd += ["--ps", shard.address, "--metrics-port", "-1", "--metrics-out", str(tmp_path / "m.json")]
        first = subprocess.run([*cmd, "--max-samples", str(LINES_PER_FILE + 200)], capture_output=True, text=True, timeout=120)
        assert first.returncode == 0, first.stderr[-3000:]
        (folder / "f1.libsvm").unlink()  # the checkpoint stands in it, 200 lines in
        (folder / "f2.libsvm").unlink()
        time.sleep(2.5)  # past the slack a file's time is given against the cut's
        (folder / "f0-late.libsvm").write_text("\n".join(lines[:10]) + "\n")  # landed late, under an earlier name
        again = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr[-3000:]
    finally:
        shard.stop()
    result = json.loads((tmp_path / "m.json").read_text())
    assert "f1.libsvm, where the checkpoint stands (line 200," in again.stderr and "is gone from the folder" in again.stderr
    assert "f0-late.libsvm sorts before" in again.stderr and "changed after the cut" in again.stderr
    assert result["source_files_lost"] == 2 and result["trained_samples"] == LINES_PER_FILE  # f3 alone
