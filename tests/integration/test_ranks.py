"""Trainer ranks (torch.distributed over gloo) as separate processes that meet only through
the rendezvous address, on two PS shard processes: each rank trains its share of a folder,
rank 0 reports and checkpoints for the group, and a rank killed by kill -9 (rank 0 or
another) ends every rank with the restart code; started again, they take up at the last
common cut, and every table has counted each sample of the stream exactly once."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from boundless.processes import Daemon, start
from ctr.repository import holdout
from tests.support import wait_for_text
from trainer.input.file_split import owner_of
from trainer.run.rendezvous import EXIT_RESTART


def _folder(data_dir: Path, folder: Path, copies: int) -> int:
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    folder.mkdir()
    for i in range(4):
        (folder / f"part{i}.libfm").write_text("\n".join(lines * copies) + "\n")
    return 4 * copies * len(lines)


def _shards(work: Path, exports: Path | None = None) -> list[Daemon]:
    shards = []
    for i in range(2):
        args = ["ps", "--shard-index", str(i), "--shard-count", "2", "--data-dir", str(work / f"ps{i}")]
        args += ["--export-root", str(exports)] if exports is not None else []
        d = start(f"ps{i}", args, work)
        d.wait_ready()
        shards.append(d)
    return shards


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ranks(
    folder: Path, shards: list[Daemon], work: Path, *extra: str, tag: str = "", rank1: tuple[str, ...] = ()
) -> list[subprocess.Popen[str]]:
    """Two ranks, each its own process with no flag but its rank naming the other (rank1:
    flags of rank 1 alone, after the rest, so they override them)."""
    master = f"127.0.0.1:{_port()}"
    procs = []
    for rank in range(2):
        cmd = [sys.executable, "-m", "boundless", "train", "--source", str(folder), "--no-follow", "--metrics-port", "-1"]
        cmd += ["--ps", ",".join(s.address for s in shards), "--rank", str(rank), "--world-size", "2", "--master", master]
        cmd += ["--batch-size", "2048", "--checkpoint-interval-s", "0.3", "--metrics-out", str(work / f"r{rank}.json"), *extra]
        cmd += list(rank1) if rank == 1 else []
        log = open(work / f"rank{rank}{tag}.log", "w")  # noqa: SIM115 - closed with the process
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True))
    return procs


def _log(work: Path, rank: int, tag: str = "") -> str:
    return (work / f"rank{rank}{tag}.log").read_text()


def _samples(shards: list[Daemon]) -> set[int]:
    """The samples each shard counted for each table it holds part of (a push counts its
    samples on every shard it reaches; the 1-long bias lives on one shard)."""
    cmd = [sys.executable, "-m", "boundless", "ps", "stats", ",".join(s.address for s in shards), "--json"]
    tables = json.loads(subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout)["tables"]
    return {int(n) for t in tables.values() for n in t["samples"] if n}


def _wait(procs: list[subprocess.Popen[str]], timeout: float = 300) -> list[int]:
    return [p.wait(timeout) for p in procs]


def test_two_ranks_split_the_stream_and_rank_0_reports_the_group(data_dir, tmp_path):
    total = _folder(data_dir, tmp_path / "stream", 1)
    shards = _shards(tmp_path)
    try:
        procs = _ranks(tmp_path / "stream", shards, tmp_path, "--model", "fm")
        used = [os.wait4(p.pid, 0) for p in procs]  # each rank's exit status and its CPU, as the OS counted it
        for p, (_, status, _) in zip(procs, used, strict=True):
            p.returncode = os.waitstatus_to_exitcode(status)
        assert [p.returncode for p in procs] == [0, 0]
        result = json.loads((tmp_path / "r0.json").read_text())
        assert result["samples"] == total and result["ranks"] == 2
        assert min(result["rank_samples"]) > 0 and sum(result["rank_samples"]) == total  # each rank trained its share
        # the summary's CPU is every rank's run's, within what each process used in all (imports too)
        assert result["cpu_s"] == pytest.approx(sum(result["rank_cpu_s"]))
        for reported, (_, _, usage) in zip(result["rank_cpu_s"], used, strict=True):
            assert 0.05 < reported <= usage.ru_utime + usage.ru_stime + 0.01
        assert not (tmp_path / "r1.json").exists()  # rank 0 reports for the group
        assert "committed" in _log(tmp_path, 0) and "rank 0 reports the run" in _log(tmp_path, 1)
        assert _samples(shards) == {total}
    finally:
        for s in shards:
            s.stop()


@pytest.mark.parametrize("victim", [1, 0])
def test_a_rank_killed_ends_the_group_and_a_restart_trains_each_sample_once(data_dir, tmp_path, victim):
    total = _folder(data_dir, tmp_path / "stream", 4)
    shards = _shards(tmp_path)
    try:
        procs = _ranks(tmp_path / "stream", shards, tmp_path, "--model", "fm")
        wait_for_text(tmp_path / "rank0.log", "committed", procs[0], timeout=120)  # past the start-up and a cut
        procs[victim].kill()
        codes = _wait(procs)
        assert codes[1 - victim] == EXIT_RESTART, _log(tmp_path, 1 - victim)[-2000:]
        assert "a rank was lost" in _log(tmp_path, 1 - victim)
        assert _wait(_ranks(tmp_path / "stream", shards, tmp_path, "--model", "fm", tag="again")) == [0, 0]
        assert "the stream takes up at part 0 at" in _log(tmp_path, 0, "again")
        assert json.loads((tmp_path / "r0.json").read_text())["samples"] == total
        assert _samples(shards) == {total}
    finally:
        for s in shards:
            s.stop()


def test_deepfm_ranks_train_one_mlp(data_dir, tmp_path):
    total = _folder(data_dir, tmp_path / "stream", 1)
    shards = _shards(tmp_path)
    try:
        extra = ("--model", "deepfm", "--k", "4", "--hidden", "32,16", "--batch-size", "512")
        assert _wait(_ranks(tmp_path / "stream", shards, tmp_path, *extra)) == [0, 0]
        result = json.loads((tmp_path / "r0.json").read_text())
        assert result["samples"] == total and result["window_auc"] > 0.85
        assert result["mlp_replicas_differ"] == 0  # every progress report found the ranks' MLPs equal
        assert result["codecs"]["mlp_moments"] == "e8m4", result["codecs"]  # auto on shard processes: every rank rounds at cuts
        assert result["codecs"]["mlp_weights"] == "e8m8", result["codecs"]  # the weights too
        assert result["codecs"]["mlp_allreduce"] == "powersgd:4:100", result["codecs"]  # and the MLP's sums go in low rank
        assert result["wire"]["mlp"]["ranks"]["sent"] > 0 and result["wire"][""]["ranks"]["received"] > 0  # counted
        assert _samples(shards) == {total}  # the mlp table counts no samples: rank 0 writes it
    finally:
        for s in shards:
            s.stop()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--ps", "local", "--world-size", "2", "--master", "127.0.0.1:1"], "--ps local shards live in one process"),
        (
            ["--ps", "127.0.0.1:1", "--world-size", "2", "--workers", "2", "--master", "127.0.0.1:1"],
            "--workers 2 starts several ranks",
        ),
        (["--ps", "127.0.0.1:1", "--world-size", "2"], "the ranks meet at rank 0's --master"),
    ],
)
def test_a_group_that_cannot_work_is_refused(data_dir, tmp_path, flags, message):
    cmd = [
        sys.executable,
        "-m",
        "boundless",
        "train",
        "--source",
        str(data_dir / "frappe"),
        "--no-follow",
        "--metrics-port",
        "-1",
    ]
    proc = subprocess.run([*cmd, *flags], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize(
    ("rank1", "message"),
    [
        (("--model", "ffm"), "--model ffm (rank 0: fm)"),
        (("--world-size", "3"), "--world-size 3 (rank 0: 2)"),  # alone, rank 0 would wait for rank 2 until the timeout
        (
            ("--batch-size", "256", "--push-codec", "onebit"),
            "--batch-size 256 (rank 0: 2048); --push-codec onebit (rank 0: auto)",
        ),
        (("--ps", "OTHER"), "--ps: rank 1 reaches other shard processes"),
        (("--source", "OTHER"), "--source: rank 1's folder holds 1 file and rank 0's 4 files, and no name is in both"),
    ],
)
def test_ranks_started_with_other_settings_are_refused_before_anything_changes(data_dir, tmp_path, rank1, message):
    """Ranks on several hosts are started one by one, each with its own flags: one that
    differs from rank 0 in what they must share ends every rank with a configuration error
    (exit 2, not the restart code: starting them again would not mend it) that names the
    flag, before any shard changes."""
    _folder(data_dir, tmp_path / "stream", 1)
    shards = _shards(tmp_path)
    (tmp_path / "other").mkdir()
    other = _shards(tmp_path / "other") if rank1[0] == "--ps" else []
    rank1 = ("--ps", ",".join(s.address for s in other)) if other else rank1
    if rank1[0] == "--source":  # a folder of the host's own, not the shared one
        (tmp_path / "own").mkdir()
        (tmp_path / "own" / "local.libfm").write_text((tmp_path / "stream" / "part0.libfm").read_text())
        rank1 = ("--source", str(tmp_path / "own"))
    try:
        procs = _ranks(tmp_path / "stream", shards, tmp_path, "--model", "fm", rank1=rank1)
        assert _wait(procs, 120) == [2, 2], _log(tmp_path, 0)[-2000:] + _log(tmp_path, 1)[-2000:]
        for rank in range(2):
            log = _log(tmp_path, rank)
            assert message in log and "Traceback" not in log, log[-2000:]
        assert _samples(shards) == set() and not (tmp_path / "r0.json").exists()
    finally:
        for s in shards + other:
            s.stop()


def test_a_followed_folder_whose_files_are_all_rank_1s_trains_and_rank_0_resolves_the_fields(data_dir, tmp_path):
    """A followed folder's files go to ranks by their names' hash (trainer.input.file_split):
    here every one hashes to rank 1, so rank 0 reads the field list FFM needs from the
    folder as a whole, not from its own share, which holds nothing."""
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:3000]
    folder = tmp_path / "stream"
    folder.mkdir()
    names = ["f00.txt", "f01.txt", "f02.txt"]
    assert [owner_of(n, 2) for n in names] == [1, 1, 1]
    for i, name in enumerate(names):
        (folder / name).write_text("\n".join(lines[i * 1000 : (i + 1) * 1000]) + "\n")
    shards = _shards(tmp_path)
    try:
        procs = _ranks(folder, shards, tmp_path, "--model", "ffm", "--follow", "--idle-exit-s", "2", "--peek-timeout-s", "10")
        assert _wait(procs, 180) == [0, 0], _log(tmp_path, 0)[-2000:]
        result = json.loads((tmp_path / "r0.json").read_text())
        assert result["samples"] == 3000 and result["rank_samples"] == [0, 3000]
        assert "model ffm, 10 fields" in _log(tmp_path, 0)
    finally:
        for s in shards:
            s.stop()


def test_a_groups_exports_record_every_ranks_samples_and_take_their_holdouts_from_any_rank(data_dir, tmp_path):
    """Rank 0 exports for the group, but here its share of the followed folder stays empty
    while rank 1's files land one by one: every export still comes, records the group's
    samples (not rank 0's none), and takes its holdout from rank 1, samples rank 1 read
    after the export, which the exported model has not trained on. Before, rank 0's
    exports waited for its own samples: one export at the end, recording rank 0's share."""
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:12000]
    folder = tmp_path / "stream"
    folder.mkdir()
    names = [n for n in (f"f{i:02d}.txt" for i in range(40)) if owner_of(n, 2) == 1][:4]
    exports = tmp_path / "exports"
    shards = _shards(tmp_path, exports)
    try:
        flags = ["--follow", "--idle-exit-s", "4", "--peek-timeout-s", "20", "--batch-size", "500"]
        flags += ["--export-dir", str(exports), "--export-interval-s", "0", "--holdout-samples", "700"]
        procs = _ranks(folder, shards, tmp_path, *flags)
        for i, name in enumerate(names):  # a file every 2.5 s, renamed in whole; rank 0's share idle
            time.sleep(3.0 if i == 0 else 2.5)
            (folder / f".{name}").write_text("\n".join(lines[i * 3000 : (i + 1) * 3000]) + "\n")
            (folder / f".{name}").rename(folder / name)
        assert _wait(procs, 180) == [0, 0], _log(tmp_path, 0)[-2000:]
        result = json.loads((tmp_path / "r0.json").read_text())
        assert result["samples"] == 12000 and result["rank_samples"] == [0, 12000]
        manifests = [json.loads((d / "export.json").read_text()) for d in sorted(exports.iterdir()) if (d / "READY").exists()]
        assert len(manifests) == result["exports"] >= 4, _log(tmp_path, 0)[-2000:]
        samples = [int(m["metrics"]["samples"]) for m in manifests]
        assert samples == sorted(set(samples)) and samples[-1] == 12000, samples
        labels = np.array([float(line.split()[0]) > 0 for line in lines], dtype=np.float32)
        for m, at in zip(manifests[:-1], samples, strict=False):
            held = holdout.read(exports / m["id"] / holdout.HOLDOUT_FILE)
            n = len(held)
            assert m["holdout"]["samples"] == n == min(700, 12000 - at), (at, m["holdout"])
            # lines rank 1 read after the export: never before `at`, what the model trained on
            found = [j for j in range(12000 - n + 1) if np.array_equal(held.labels, labels[j : j + n])]
            assert found and min(found) >= at, (at, found[:5])
    finally:
        for s in shards:
            s.stop()


def test_a_group_taken_up_behind_its_last_export_exports_only_past_it(data_dir, tmp_path):
    """A group that died between an export and its next cut replays the stream up to where
    that export stood: its exports wait until the group's samples (every rank's) pass it,
    as one process's do (docs/design/taken-up-exports.md)."""
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:18000]
    folder, exports = tmp_path / "stream", tmp_path / "exports"
    folder.mkdir()

    def write(first: int, count: int) -> None:
        for i in range(first, first + count):
            (folder / f"f{i:02d}.txt").write_text("\n".join(lines[i * 3000 : (i + 1) * 3000]) + "\n")

    write(0, 4)
    shards = _shards(tmp_path, exports)
    try:
        flags = ["--export-dir", str(exports), "--holdout-samples", "0", "--batch-size", "500", "--export-interval-s", "0"]
        flags += ["--checkpoint-interval-s", "1000"]  # the last cut only: at the run's end
        assert _wait(_ranks(folder, shards, tmp_path, *flags)) == [0, 0], _log(tmp_path, 0)[-2000:]
        last = max(exports.iterdir())
        manifest = json.loads((last / "export.json").read_text())
        assert manifest["metrics"]["samples"] == 12000  # the group's, not rank 0's share
        ahead = exports / f"{int(last.name) + 1:020d}"  # an export the next cut never followed
        shutil.copytree(last, ahead)
        manifest["id"], manifest["metrics"]["samples"] = ahead.name, 15000
        (ahead / "export.json").write_text(json.dumps(manifest))
        before = {p.name for p in exports.iterdir()}
        write(4, 2)
        assert _wait(_ranks(folder, shards, tmp_path, *flags, tag="again")) == [0, 0], _log(tmp_path, 0, "again")[-2000:]
        assert "taken up at 12000 samples, behind the last export (15000)" in _log(tmp_path, 0, "again")
        new = sorted({p.name for p in exports.iterdir()} - before)
        samples = [json.loads((exports / n / "export.json").read_text())["metrics"]["samples"] for n in new]
        assert samples and min(samples) > 15000 and samples[-1] == 18000, samples
    finally:
        for s in shards:
            s.stop()


def test_sigterm_to_one_rank_stops_every_rank_at_one_boundary_and_a_restart_trains_the_rest(data_dir, tmp_path):
    """A stop asked of rank 1 alone: both ranks leave at the same round, take a last cut
    together and exit 0; started again they train what the cut does not hold."""
    total = _folder(data_dir, tmp_path / "stream", 4)
    shards = _shards(tmp_path)
    try:
        procs = _ranks(tmp_path / "stream", shards, tmp_path, "--model", "fm")
        wait_for_text(tmp_path / "rank0.log", "committed", procs[0], timeout=120)
        procs[1].terminate()
        assert _wait(procs) == [0, 0], _log(tmp_path, 0)[-2000:]
        first = json.loads((tmp_path / "r0.json").read_text())["samples"]
        assert 0 < first < total
        assert _wait(_ranks(tmp_path / "stream", shards, tmp_path, "--model", "fm", tag="again")) == [0, 0]
        assert json.loads((tmp_path / "r0.json").read_text())["samples"] == total
        assert _samples(shards) == {total}
    finally:
        for s in shards:
            s.stop()


def test_a_sample_limit_is_shared_between_the_ranks(data_dir, tmp_path):
    """--max-samples 10001 over two ranks: each trains exactly its part (5001 and 5000),
    as one trainer trains exactly the limit."""
    _folder(data_dir, tmp_path / "stream", 1)
    shards = _shards(tmp_path)
    try:
        assert _wait(_ranks(tmp_path / "stream", shards, tmp_path, "--model", "lr", "--max-samples", "10001")) == [0, 0]
        result = json.loads((tmp_path / "r0.json").read_text())
        assert result["rank_samples"] == [5001, 5000] and result["samples"] == 10001, result
    finally:
        for s in shards:
            s.stop()


def test_workers_inside_a_rank_of_another_group_are_refused(data_dir, tmp_path):
    """--workers starts ranks itself: under torchrun or a pod that made this process a rank
    (WORLD_SIZE > 1), it is refused before anything starts."""
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(data_dir / "frappe"), "--no-follow"]
    cmd += ["--metrics-port", "-1", "--workers", "2"]
    env = {**os.environ, "WORLD_SIZE": "2", "RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2 and "this process is one rank of WORLD_SIZE 2" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def _group(folder: Path, shards: list[Daemon], work: Path, world: int, tag: str, *extra: str) -> list[subprocess.Popen[str]]:
    """`world` ranks over the folder, each its own process, meeting at one address."""
    master = f"127.0.0.1:{_port()}"
    procs = []
    for rank in range(world):
        cmd = [sys.executable, "-m", "boundless", "train", "--source", str(folder), "--no-follow", "--metrics-port", "-1"]
        cmd += ["--ps", ",".join(s.address for s in shards), "--model", "fm", "--batch-size", "2048"]
        cmd += ["--checkpoint-interval-s", "0.3", "--metrics-out", str(work / f"{tag}.json"), *extra]
        if world > 1:
            cmd += ["--rank", str(rank), "--world-size", str(world), "--master", master]
        log = open(work / f"{tag}{rank}.log", "w")  # noqa: SIM115 - closed with the process
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True))
    return procs


def test_a_folder_trained_by_two_ranks_goes_on_with_three_then_one_each_line_once(data_dir, tmp_path):
    """The chart's trainer.replicas changed between runs: a folder's cut taken by two ranks
    (each stopped inside a file) is taken up by three, which deal the files anew and read
    from where the two stood, and files land meanwhile; three stopped inside files are taken
    up by one. Every table counts each line of the folder once. Before, a group of another
    size was refused, and --from-start, the way out it named, trained the folder again."""
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    folder = tmp_path / "stream"
    folder.mkdir()

    def land(first: int, count: int) -> None:
        for i in range(first, first + count):
            (folder / f"part{i}.libfm").write_text("\n".join(lines[i * 9000 : (i + 1) * 9000] * 3) + "\n")

    land(0, 4)
    shards = _shards(tmp_path)
    try:
        assert _wait(_group(folder, shards, tmp_path, 2, "a", "--max-samples", "40001")) == [0, 0]
        assert json.loads((tmp_path / "a.json").read_text())["samples"] == 40001  # each rank stopped inside a file
        land(4, 2)
        three = _group(folder, shards, tmp_path, 3, "b")
        wait_for_text(tmp_path / "b0.log", "committed", three[0], timeout=120)
        three[2].terminate()  # every rank stops at one boundary, inside its files, and takes a last cut
        assert _wait(three) == [0, 0, 0], (tmp_path / "b0.log").read_text()[-3000:]
        assert "taken up by 3: the stream's files are dealt out anew" in (tmp_path / "b0.log").read_text()
        second = json.loads((tmp_path / "b.json").read_text())["samples"]
        total = 6 * 3 * 9000
        assert 40001 < second < total
        assert _wait(_group(folder, shards, tmp_path, 1, "c")) == [0], (tmp_path / "c0.log").read_text()[-3000:]
        assert json.loads((tmp_path / "c.json").read_text())["samples"] == total
        assert _samples(shards) == {total}  # every line once: none lost, none trained twice
    finally:
        for s in shards:
            s.stop()
