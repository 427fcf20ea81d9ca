"""Exactly-once training across crashes, with real processes on loopback: two PS shard
processes with RocksDB and one checkpointing trainer on Frappe repeated. Whatever dies
(a shard by kill -9 or SIGTERM, or the trainer by kill -9) at random moments, restarted
each time, the model the shards end with is bit for bit the one an uninterrupted run of
the same stream leaves: every table's digest and samples agree (`boundless ps stats`)."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from boundless.processes import Daemon, start
from trainer.run.recovery import decode_offsets

KILLS = 5


def _stream(data_dir: Path, path: Path, repeat: int = 30) -> int:
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    path.write_text("\n".join(lines * repeat) + "\n")
    return len(lines) * repeat


def _shard(i: int, work: Path, port: int = 0, lifecycle: tuple[str, ...] = ()) -> Daemon:
    args = ["ps", "--shard-index", str(i), "--shard-count", "2", "--data-dir", str(work / f"ps{i}"), "--port", str(port)]
    args += ["--full-checkpoint-every", "4", *lifecycle]
    d = start(f"ps{i}", args, work)
    d.wait_ready()
    return d


def _trainer(
    stream: Path | str, shards: list[Daemon], out: Path, log: Path | None = None, model: tuple[str, ...] = ()
) -> subprocess.Popen[str]:
    """The trainer, its log piped (read by _finish) or, with `log`, written there. Its pushes
    are lossless unless `model` says otherwise: then the model's bits depend on the stream
    alone, whenever the cuts fall (a lossy codec drains its residuals at each cut, so its
    bits depend on the cuts' timing, which a restart moves)."""
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--no-follow", "--metrics-port", "-1"]
    cmd += ["--ps", ",".join(s.address for s in shards), "--batch-size", "1024", "--checkpoint-interval-s", "0.3"]
    cmd += ["--ps-retry-s", "60", "--metrics-out", str(out), "--push-codec", "none", *model]
    if log is None:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    with open(log, "w") as err:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)


def _training(proc: subprocess.Popen[str], log: Path, timeout: float = 120) -> None:
    """Returns once the trainer has committed a checkpoint cut (it trains, past its start-up,
    which compiling kernels on a busy machine can stretch to many seconds) or has ended."""
    until = time.monotonic() + timeout
    while "committed" not in log.read_text() and proc.poll() is None:
        assert time.monotonic() < until, f"no checkpoint cut within {timeout} s: {log.read_text()[-2000:]}"
        time.sleep(0.05)


def _finish_logged(proc: subprocess.Popen[str], log: Path, timeout: float = 240) -> str:
    proc.wait(timeout)
    err = log.read_text()
    assert proc.returncode == 0, err[-3000:]
    return err


def _model(shards: list[Daemon]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "boundless", "ps", "stats", ",".join(s.address for s in shards), "--json"]
    tables = json.loads(subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout)["tables"]
    return {name: (t["digest"], t["rows"], t["samples"]) for name, t in tables.items()}


def _finish(proc: subprocess.Popen[str], timeout: float = 240) -> str:
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return err


def _once(stream: Path | str, work: Path, lifecycle: tuple[str, ...] = (), model: tuple[str, ...] = ()) -> dict[str, Any]:
    """The model an uninterrupted run of the stream leaves on fresh shards."""
    return _timed_once(stream, work, lifecycle, model)[0]


def _timed_once(
    stream: Path | str, work: Path, lifecycle: tuple[str, ...] = (), model: tuple[str, ...] = ()
) -> tuple[dict[str, Any], float]:
    """The model an uninterrupted run leaves, and how many seconds it trained after its first
    cut: the span random kills are drawn from, so they fall inside the run on a fast machine
    as on a slow one."""
    shards = [_shard(i, work, lifecycle=lifecycle) for i in range(2)]
    log = work / "once.log"
    try:
        trainer = _trainer(stream, shards, work / "m.json", log, model)
        _training(trainer, log)
        began = time.monotonic()
        _finish_logged(trainer, log)
        return _model(shards), time.monotonic() - began
    finally:
        for s in shards:
            s.stop()


def _shards_dying(
    stream: Path,
    work: Path,
    rng: random.Random,
    how: str,
    times: int,
    span: float,
    gap: tuple[float, float],
    lifecycle: tuple[str, ...] = (),
    start: float = 0.0,
) -> tuple[int, str, dict[str, Any], int]:
    """Trains the stream while a shard dies (`how`) `times` times at random moments, each
    restarted on its port; returns (kills, the trainer's log, the model, samples trained).
    `start` and the `gap` between kills are fractions of `span`, the seconds an uninterrupted
    run trained, so the kills fall inside the stream however fast the machine is."""
    shards = [_shard(i, work, lifecycle=lifecycle) for i in range(2)]
    ports = [s.ready["grpc_port"] for s in shards]
    log = work / "trainer.log"
    trainer = _trainer(stream, shards, work / "m.json", log)
    try:
        kills = 0
        _training(trainer, log)  # kills during its start-up would test nothing
        time.sleep(span * start)
        for _ in range(times):
            time.sleep(span * rng.uniform(*gap))
            if trainer.poll() is not None:
                break
            i = rng.randrange(2)
            shards[i].kill() if how == "kill -9" else shards[i].stop()
            shards[i] = _shard(i, work, ports[i], lifecycle)
            kills += 1
        err = _finish_logged(trainer, log)
        return kills, err, _model(shards), json.loads((work / "m.json").read_text())["samples"]
    finally:
        if trainer.poll() is None:
            trainer.kill()
        for s in shards:
            s.stop()


@pytest.fixture(scope="module")
def uninterrupted(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], int, float]:
    work = tmp_path_factory.mktemp("uninterrupted")
    total = _stream(data_dir, work / "stream.libfm")
    model, span = _timed_once(work / "stream.libfm", work)
    return work / "stream.libfm", model, total, span


@pytest.mark.parametrize("how", ["kill -9", "SIGTERM"])
def test_shards_dying_at_random_moments_change_nothing(uninterrupted, tmp_path, how):
    stream, expected, total, span = uninterrupted
    rng = random.Random(len(how))
    kills, err, model, samples = _shards_dying(stream, tmp_path, rng, how, KILLS, span, (0.025, 0.07))
    assert kills >= 3 and "going back to the last checkpoint cut" in err, err[-3000:]  # kills in a recovery coalesce
    assert model == expected
    assert samples == total


# admission after 2 sightings, eviction by updates and by a row cap: the filters and clocks
# are in the cuts, so what a shard admits and evicts does not depend on when it died
LIFECYCLE = ("--admit-after", "2", "--bloom-mb", "1", "--ttl-updates", "400", "--max-rows", "1500")


def test_shards_with_admission_and_eviction_dying_change_nothing(data_dir, tmp_path):
    stream = tmp_path / "stream.libfm"
    total = _stream(data_dir, stream, repeat=20)
    expected, span = _timed_once(stream, tmp_path / "once", LIFECYCLE)
    assert all(rows < 1500 * 1.05 * 2 for _, rows, _ in expected.values())
    rng = random.Random(3)
    kills, err, model, samples = _shards_dying(stream, tmp_path, rng, "kill -9", 3, span, (0.035, 0.09), LIFECYCLE, 0.09)
    assert kills >= 2 and "going back to the last checkpoint cut" in err, err[-3000:]
    assert model == expected
    assert samples == total


def _trainer_killed(
    stream: Path | str, work: Path, rng: random.Random, kills_wanted: int, span: float, model: tuple[str, ...] = ()
) -> tuple[int, str, dict[str, Any]]:
    """Trains the stream, killing the trainer (kill -9) at random moments and starting it
    again; returns (kills, the last run's log, the model the shards end with). Each run lives
    2-20% of `span`, the seconds an uninterrupted run trained, so the kills fall before the
    stream ends however fast the machine is."""
    shards = [_shard(i, work) for i in range(2)]
    try:
        kills = 0
        for run in range(kills_wanted):
            log = work / f"trainer{run}.log"
            trainer = _trainer(stream, shards, work / "m.json", log, model)
            _training(trainer, log)  # past its start-up: a kill there would test nothing
            time.sleep(span * rng.uniform(0.02, 0.2))
            if trainer.poll() is not None:
                break
            trainer.kill()
            trainer.wait()
            kills += 1
        err = _finish(_trainer(stream, shards, work / "m.json", model=model))
        return kills, err, _model(shards)
    finally:
        for s in shards:
            s.stop()


def test_a_trainer_killed_at_random_moments_changes_nothing(uninterrupted, tmp_path):
    stream, expected, total, span = uninterrupted
    kills, err, model = _trainer_killed(stream, tmp_path, random.Random(7), KILLS, span)
    assert kills >= 2 and "the stream takes up at" in err, err[-3000:]
    assert model == expected
    assert json.loads((tmp_path / "m.json").read_text())["samples"] == total


LOSSY = [("onebit", "fp64z"), ("onebit", "bf16z"), ("auto", "auto")]


@pytest.mark.parametrize(("codec", "cut_drain"), LOSSY, ids=["onebit-fp64z", "onebit-bf16z", "auto"])
def test_a_trainer_killed_with_lossy_pushes_trains_every_sample_once(uninterrupted, tmp_path, codec, cut_drain):
    """1-bit state deltas with error feedback and the pull cache, their residuals drained at
    cuts exactly or in bf16 (the rounding forgotten), and the default `auto` on shard
    processes (rounded bf16 pushes, 1-bit where it pays: rounded-pushes.md): killed with -9
    at random moments, every sample reaches every table on every shard once, and the shards
    hold the same rows (the bits, which depend on when the cuts fell, are not compared)."""
    stream, expected, total, span = uninterrupted
    flags = ("--push-codec", codec, "--cut-drain-codec", cut_drain)
    kills, err, model = _trainer_killed(stream, tmp_path, random.Random(3), KILLS, span, flags)
    assert kills >= 2 and "the stream takes up at" in err, err[-3000:]
    summary = json.loads((tmp_path / "m.json").read_text())
    chosen = summary["codecs"]["push:w"]
    assert summary["samples"] == total and chosen in (("onebit",) if codec == "onebit" else ("bf16z:rounded", "onebit"))
    assert summary["codecs"]["cut_drain"] == (cut_drain if codec == "onebit" else "bf16z"), summary["codecs"]
    assert model["w"][2] == expected["w"][2] and model["w"][1] == expected["w"][1]  # samples per shard, rows


DEEPFM = ("--model", "deepfm", "--k", "4", "--hidden", "32,16")


def test_a_deepfm_trainer_killed_at_random_moments_changes_nothing(data_dir, tmp_path):
    """Hybrid training: the MLP and its Adam state live on the trainer and reach the shards
    at each cut, so a trainer killed between cuts takes up the cut's MLP; the shards end
    with the same rows and the same MLP, bit for bit, as an uninterrupted run. Under the
    default `auto` every rank rounds the MLP's moments and weights at each cut
    (docs/design/moment-bits.md): the bits then depend on where the cuts fell, but every
    sample still reaches every table once."""
    stream = tmp_path / "stream.libfm"
    total = _stream(data_dir, stream, repeat=3)
    once = tmp_path / "once"
    once.mkdir()
    expected, span = _timed_once(stream, once, model=DEEPFM)
    assert "mlp" in expected
    kills, err, model = _trainer_killed(stream, tmp_path, random.Random(5), 3, span, DEEPFM)
    assert kills >= 2 and "the stream takes up at" in err, err[-3000:]
    assert model == expected
    assert json.loads((tmp_path / "m.json").read_text())["samples"] == total
    rounded = tmp_path / "auto"
    rounded.mkdir()
    kills, err, model = _trainer_killed(stream, rounded, random.Random(6), 3, span, (*DEEPFM, "--push-codec", "auto"))
    assert kills >= 2 and "the stream takes up at" in err, err[-3000:]
    summary = json.loads((rounded / "m.json").read_text())
    assert summary["samples"] == total
    assert (summary["codecs"]["mlp_moments"], summary["codecs"]["mlp_weights"]) == ("e8m4", "e8m8"), summary["codecs"]
    assert {t: (rows, samples) for t, (_, rows, samples) in model.items()} == {
        t: (rows, samples) for t, (_, rows, samples) in expected.items()
    }


def test_a_deepfm_trainer_on_rare_positives_killed_at_random_moments_changes_nothing(data_dir, tmp_path):
    """On a stream with rare positives the MLP's gradients wait across batches for enough
    positives (--mlp-step-positives) and most cuts fall while they wait: a lossless cut
    carries them, so the trainer killed with -9 still ends bit for bit where an
    uninterrupted run does, the MLP included."""
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    rare, positives = [], 0
    for line in lines * 3:
        label, rest = line.split(" ", 1)
        if label == "1":
            positives += 1
            label = "1" if positives % 40 == 0 else "-1"  # about 0.8% positive: 8 a 1,024-line batch
        rare.append(f"{label} {rest}")
    stream = tmp_path / "stream.libfm"
    stream.write_text("\n".join(rare) + "\n")
    once = tmp_path / "once"
    once.mkdir()
    expected, span = _timed_once(stream, once, model=DEEPFM)
    summary = json.loads((once / "m.json").read_text())
    assert summary["mlp_steps"] < summary["samples"] / 1024 / 1.5  # the MLP waited: most batches took no step
    kills, err, model = _trainer_killed(stream, tmp_path, random.Random(7), 3, span, DEEPFM)
    assert kills >= 2 and "the stream takes up at" in err, err[-3000:]
    assert model == expected
    assert json.loads((tmp_path / "m.json").read_text())["samples"] == len(rare)


def test_in_process_shards_checkpoint_and_take_up_like_shard_processes(data_dir, tmp_path):
    """`--ps local --local-data-dir`: the trainer's own shards keep cuts in RocksDB; a rerun
    takes up after what the last cut holds, and --from-start starts over."""
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    folder = tmp_path / "stream"
    folder.mkdir()
    (folder / "a.libfm").write_text("\n".join(lines[:20000]) + "\n")

    def train(*extra: str) -> tuple[dict[str, Any], str]:
        out = tmp_path / "m.json"
        cmd = [sys.executable, "-m", "boundless", "train", "--source", str(folder), "--no-follow", "--metrics-port", "-1"]
        cmd += [
            "--ps",
            "local",
            "--local-shards",
            "2",
            "--local-data-dir",
            str(tmp_path / "ps"),
            "--checkpoint-interval-s",
            "1000",
        ]
        proc = subprocess.run([*cmd, "--metrics-out", str(out), *extra], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(out.read_text()), proc.stderr

    first, _ = train()
    assert first["samples"] == 20000
    (folder / "b.libfm").write_text("\n".join(lines[20000:26000]) + "\n")
    second, err = train()
    assert "the stream takes up at" in err and "a.libfm" in err
    assert second["samples"] == 26000  # only b was trained; the cut's metrics carry on
    again, err = train("--from-start")
    assert again["samples"] == 26000 and "start empty (--from-start)" in err


def test_a_run_taken_up_at_a_cut_reports_its_own_samples_and_exports_no_older_version(data_dir, tmp_path):
    """A rerun on shards that keep cuts: its speed and bytes per sample are over the samples
    it trained, not over the stream's count the cut carries on, and the model it took up is
    not exported again (as a new version it would serve an older state than the last one)."""
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    folder, exports = tmp_path / "stream", tmp_path / "exports"
    folder.mkdir()
    (folder / "a.libfm").write_text("\n".join(lines[:20000]) + "\n")

    def train() -> dict[str, Any]:
        out = tmp_path / "m.json"
        cmd = [sys.executable, "-m", "boundless", "train", "--source", str(folder), "--no-follow", "--metrics-port", "-1"]
        cmd += ["--ps", "local", "--local-data-dir", str(tmp_path / "ps"), "--checkpoint-interval-s", "1000"]
        cmd += ["--export-dir", str(exports), "--holdout-samples", "0", "--metrics-out", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return dict(json.loads(out.read_text()))

    first = train()
    assert first["samples"] == first["trained_samples"] == 20000 and first["taken_up_samples"] == 0
    written = sorted(p.name for p in exports.iterdir())
    assert len(written) == 1

    again = train()  # nothing new in the stream: nothing trained, no export
    assert again["samples"] == 20000 and again["trained_samples"] == 0 and again["taken_up_samples"] == 20000
    assert sorted(p.name for p in exports.iterdir()) == written

    (folder / "b.libfm").write_text("\n".join(lines[20000:26000]) + "\n")
    third = train()
    assert third["samples"] == 26000 and third["trained_samples"] == 6000 and third["taken_up_samples"] == 20000
    assert third["examples_per_s"] == pytest.approx(6000 / third["elapsed_s"])
    assert third["wire_bytes_per_sample"] == pytest.approx(third["wire_bytes"] / 6000)
    new = sorted(set(p.name for p in exports.iterdir()) - set(written))
    assert len(new) == 1  # the last model only, and whole: this run's first export
    manifest = json.loads((exports / new[0] / "export.json").read_text())
    assert manifest["kind"] == "full" and manifest["metrics"]["samples"] == 26000

    # a run that died between its last export and its next cut: the newest export stands
    # ahead of the cut the next run takes up, so that run replays the stream up to there
    # and exports only past it (its replay would be older than the version served)
    ahead = exports / f"{int(new[0]) + 1:020d}"
    shutil.copytree(exports / new[0], ahead)
    manifest["id"], manifest["metrics"]["samples"] = ahead.name, 29000
    (ahead / "export.json").write_text(json.dumps(manifest))
    (folder / "c.libfm").write_text("\n".join(lines[26000:36000]) + "\n")
    before = set(p.name for p in exports.iterdir())
    out = tmp_path / "m.json"
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(folder), "--no-follow", "--metrics-port", "-1"]
    cmd += ["--ps", "local", "--local-data-dir", str(tmp_path / "ps"), "--checkpoint-interval-s", "1000"]
    cmd += ["--export-dir", str(exports), "--holdout-samples", "0", "--batch-size", "500", "--export-interval-s", "0"]
    proc = subprocess.run([*cmd, "--metrics-out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "taken up at 26000 samples, behind the last export (29000)" in proc.stderr
    written = [
        json.loads((exports / n / "export.json").read_text()) for n in sorted(set(p.name for p in exports.iterdir()) - before)
    ]
    assert written and min(m["metrics"]["samples"] for m in written) > 29000, [m["metrics"]["samples"] for m in written]
    assert written[0]["kind"] == "full" and written[-1]["metrics"]["samples"] == 36000


def test_shards_holding_different_cuts_go_back_to_the_newest_they_all_hold(data_dir, tmp_path):
    """Shard 1 never got the last cut (it died between the trainer's prepares, say): a trainer
    that starts takes both shards back to the newest cut both hold, and says so."""
    from ps.client import PSClient

    stream = tmp_path / "stream.libfm"
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:4000]
    stream.write_text("\n".join(lines) + "\n")
    shards = [_shard(i, tmp_path) for i in range(2)]
    try:
        _finish(_trainer(stream, shards, tmp_path / "m.json"))  # cuts 1.. on both shards
        client = PSClient.connect([s.address for s in shards])
        held = client.control.status()[0].cuts
        last = max(held)
        offsets = client.control.status()[0].checkpoint_offsets
        client.transport.generation = client.control.status()[0].generation  # the trainer's, which the shards follow
        client.transport.prepare(0, last + 1, offsets)  # only shard 0 gets the next cut
        client.transport.commit(0, last + 1)
        client.close()
        proc = _trainer(stream, shards, tmp_path / "m2.json")
        err = _finish(proc)
        assert f"going back to cut {last}, the newest all of them hold" in err, err[-3000:]
        assert f"PS shards at checkpoint cut {last}" in err
        assert json.loads((tmp_path / "m2.json").read_text())["samples"] == 4000  # the cut held them all
    finally:
        for s in shards:
            s.stop()


def test_two_ranks_take_up_at_a_cut_every_shard_prepared_and_none_committed(data_dir, tmp_path):
    """The trainer killed between a cut's prepares and its commit (found by the kill test
    above): every shard holds the cut, none committed it, so its positions (two ranks'
    here) are read only at the restore. Two ranks start again from it and train nothing
    twice; it was refused as a one-rank cut (exit 2, which no supervisor restarts)."""
    from ps.client import PSClient

    folder, _ = _folder(data_dir, tmp_path)
    for extra in sorted(folder.iterdir())[2:]:  # a shorter stream: 2 files, one a rank
        extra.unlink()
    total = sum(len(f.read_text().splitlines()) for f in folder.iterdir())
    shards = [_shard(i, tmp_path) for i in range(2)]
    try:
        _finish(_two_workers(folder, shards, tmp_path / "m.json"))
        client = PSClient.connect([s.address for s in shards])
        status = client.control.status()[0]
        last, offsets = status.committed_cut, status.checkpoint_offsets
        assert decode_offsets(last, offsets).ranks == 2
        client.transport.generation = status.generation  # the trainer's, which the shards follow
        client.control.prepare(last + 1, offsets)  # every shard prepares the next cut; no commit
        client.close()
        err = _finish(_two_workers(folder, shards, tmp_path / "m2.json"))
        assert f"every PS shard prepared checkpoint cut {last + 1} and none committed it" in err, err[-3000:]
        assert f"PS shards at checkpoint cut {last + 1}" in err, err[-3000:]
        assert json.loads((tmp_path / "m2.json").read_text())["samples"] == total
        assert _model(shards)["w"][2] == [total, total]  # nothing trained twice
    finally:
        for s in shards:
            s.stop()


def _folder(data_dir: Path, tmp_path: Path) -> tuple[Path, int]:
    """8 files of Frappe repeated 6 times, for two workers; (folder, lines)."""
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    folder = tmp_path / "stream"
    folder.mkdir()
    for i in range(8):
        (folder / f"part{i}.libfm").write_text("\n".join(lines * 6) + "\n")
    return folder, 8 * 6 * len(lines)


def _two_workers(folder: Path, shards: list[Daemon], out: Path, *extra: str, err: Any = subprocess.PIPE) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(folder), "--no-follow", "--metrics-port", "-1"]
    cmd += ["--ps", ",".join(s.address for s in shards), "--workers", "2", "--batch-size", "2048"]
    cmd += ["--checkpoint-interval-s", "0.5", "--metrics-out", str(out), *extra]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)


def test_a_local_rank_killed_is_started_again_with_the_others(data_dir, tmp_path):
    """--workers 2 is two local ranks under the command: rank 1 killed with -9 mid-stream
    fails rank 0's next collective, the command starts both again at the last common cut,
    and every sample is applied once."""
    folder, total = _folder(data_dir, tmp_path)
    shards = [_shard(i, tmp_path) for i in range(2)]
    log = tmp_path / "trainer.log"
    try:
        with open(log, "w") as err:
            proc = _two_workers(folder, shards, tmp_path / "m.json", err=err)
        _training(proc, log)
        found = re.search(r"trainer-r1\[(\d+)\]", log.read_text())
        assert found and proc.poll() is None, log.read_text()[-3000:]
        os.kill(int(found.group(1)), signal.SIGKILL)
        text = _finish_logged(proc, log)
        assert "every rank starts again at the last common checkpoint cut" in text, text[-3000:]
        assert "started again 2 local ranks" in text, text[-3000:]
        assert json.loads((tmp_path / "m.json").read_text())["samples"] == total
        assert _model(shards)["w"][2] == [total, total]
    finally:
        for s in shards:
            s.stop()


@pytest.mark.parametrize("extra", [[], ["--local-aggregate", "--push-codec", "onebit"]], ids=["plain", "summed-onebit"])
def test_two_workers_killed_with_their_trainer_train_every_sample_once(data_dir, tmp_path, extra):
    """Two workers (files dealt out) take consistent cuts together; the trainer killed with
    -9 three times at random moments and restarted, every sample is applied exactly once:
    each table's samples on every shard count the stream once (the model's bits depend on
    how the workers interleave, so they are not compared)."""
    folder, total = _folder(data_dir, tmp_path)
    shards = [_shard(i, tmp_path) for i in range(2)]

    rng = random.Random(11)
    try:
        kills = 0
        for run in range(3):
            log = tmp_path / f"trainer{run}.log"
            with open(log, "w") as err_file:
                proc = _two_workers(folder, shards, tmp_path / "m.json", *extra, err=err_file)
            _training(proc, log)  # past start-up and the ranks' fork, which take seconds
            # a short stretch after the first cut: the stream outlasts two kills on a fast machine
            time.sleep(rng.uniform(0.05, 0.5))
            if proc.poll() is not None:
                break
            proc.kill()
            proc.wait()
            kills += 1
        err = _finish(_two_workers(folder, shards, tmp_path / "m.json", *extra))
        assert kills >= 2 and "checkpoint cut" in err, err[-3000:]
        assert json.loads((tmp_path / "m.json").read_text())["samples"] == total
        model = _model(shards)
        assert model["w"][2] == [total, total], model  # every sample once, on each shard
    finally:
        for s in shards:
            s.stop()


def test_two_workers_go_back_to_a_cut_when_a_shard_restarts(data_dir, tmp_path):
    """A shard killed with -9 under two local ranks: they exit for a restart, the command
    starts them again, rank 0 takes every shard back to the last cut and each rank takes
    up there; every sample is applied once."""
    folder, total = _folder(data_dir, tmp_path)
    shards = [_shard(i, tmp_path) for i in range(2)]
    ports = [s.ready["grpc_port"] for s in shards]
    log = tmp_path / "trainer.log"
    with open(log, "w") as err_file:
        proc = _two_workers(folder, shards, tmp_path / "m.json", "--ps-retry-s", "60", err=err_file)
    rng = random.Random(5)
    try:
        kills = 0
        _training(proc, log)  # past the ranks' start-up: a shard killed before they restore changes nothing
        for _ in range(2):
            time.sleep(rng.uniform(0.5, 1.5))
            if proc.poll() is not None:
                break
            i = rng.randrange(2)
            shards[i].kill()
            shards[i] = _shard(i, tmp_path, ports[i])
            kills += 1
        err = _finish_logged(proc, log)
        assert kills >= 1 and "every rank starts again at the last common checkpoint cut" in err, err[-3000:]
        assert json.loads((tmp_path / "m.json").read_text())["samples"] == total
        assert _model(shards)["w"][2] == [total, total]
    finally:
        if proc.poll() is None:
            proc.kill()
        for s in shards:
            s.stop()


def test_a_worker_done_before_the_other_still_takes_part_in_cuts(data_dir, tmp_path):
    """With --local-aggregate a worker that has read its share waits for the others in the
    aggregation rounds. Cuts pause every worker, so it must answer them there: worker 0 (the
    leader) gets a small file and worker 1 a large one, and the run ends with every sample
    trained once (it used to hang at the first cut after worker 0 was done)."""
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    folder = tmp_path / "stream"
    folder.mkdir()
    (folder / "part0.libfm").write_text("\n".join(lines[:2000]) + "\n")
    (folder / "part1.libfm").write_text("\n".join(lines * 8) + "\n")
    total = 2000 + 8 * len(lines)
    shards = [_shard(i, tmp_path) for i in range(2)]
    try:
        proc = _two_workers(folder, shards, tmp_path / "m.json", "--local-aggregate", "--push-codec", "onebit")
        err = _finish(proc, timeout=120)
        assert "checkpoint cut" in err, err[-3000:]
        assert json.loads((tmp_path / "m.json").read_text())["samples"] == total
        assert _model(shards)["w"][2] == [total, total]
    finally:
        for s in shards:
            s.stop()
