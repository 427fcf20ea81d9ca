"""Shards that stop answering (SIGSTOP) at random moments, many runs over: the soak behind
test_hung_shard.py, which stops one shard once and so meets a race about once in fifty
runs (a push that timed out and was dropped unread lost a batch on one shard; a
declaration retried after its deadline stopped the trainer). Not part of `make test`:
`make soak` runs it, BOUNDLESS_SOAK_RUNS runs per case (default 10), BOUNDLESS_SOAK_SEED
to replay a failure (a failure names its seed).

Each run: two shard processes, a trainer with a 1.5 s call deadline and cuts every 0.3 s,
and two stops of a random shard, 1-3.5 s each, at random moments. Every table must count
the stream's samples once on every shard that holds part of it; a lossless run must also
end with the digests of an uninterrupted one."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_exactly_once import _model, _once, _shard, _trainer, _training

pytestmark = pytest.mark.soak

RUNS = int(os.environ.get("BOUNDLESS_SOAK_RUNS", "10"))
SEED = int(os.environ.get("BOUNDLESS_SOAK_SEED", "0")) or random.SystemRandom().randrange(1, 1 << 30)
ROWS = 60_000


def _stream(data_dir: Path, tmp_path: Path, workers: int) -> Path:
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    lines = (lines * (ROWS // len(lines) + 1))[:ROWS]
    if workers == 1:
        path = tmp_path / "stream.libfm"
        path.write_text("\n".join(lines) + "\n")
        return path
    folder = tmp_path / "stream"  # a folder: its files are split across the ranks
    folder.mkdir()
    per = ROWS // 4
    for i in range(4):
        (folder / f"part{i}.libfm").write_text("\n".join(lines[i * per : (i + 1) * per]) + "\n")
    return folder


def _counted_once(model: dict[str, Any]) -> bool:
    """Every table counts the stream's samples on each shard holding part of it (the MLP's
    cut writes carry none)."""
    return all(all(n in (0, ROWS) for n in t[2]) and (max(t[2]) == ROWS or name == "mlp") for name, t in model.items())


@pytest.mark.parametrize(
    ("model", "codec", "workers"),
    [("lr", "none", 1), ("ffm", "auto", 1), ("deepfm", "auto", 1), ("lr", "auto", 2)],
)
def test_shards_stopped_at_random_lose_and_repeat_nothing(data_dir: Path, tmp_path: Path, model: str, codec: str, workers: int):
    rng = random.Random(SEED)
    stream = _stream(data_dir, tmp_path, workers)
    # the trainer of the exactly-once tests (batch 1024, cuts every 0.3 s), with a 1.5 s call deadline
    flags: tuple[str, ...] = ("--model", model, "--ps-call-timeout-s", "1.5", "--push-codec", codec)
    flags += ("--workers", str(workers)) if workers > 1 else ()
    once = None
    if codec == "none" and workers == 1:  # lossless and alone: the bits depend on the stream only
        (tmp_path / "once").mkdir()
        once = _once(stream, tmp_path / "once", model=flags)
    for run in range(RUNS):
        work = tmp_path / f"run{run}"
        work.mkdir()
        shards = [_shard(i, work) for i in range(2)]
        try:
            log = work / "trainer.log"
            proc = _trainer(stream, shards, work / "m.json", log, model=flags)
            _training(proc, log)
            for _ in range(2):
                time.sleep(rng.uniform(0, 1.5))
                if proc.poll() is not None:
                    break
                victim = shards[rng.randrange(2)].proc.pid
                os.kill(victim, signal.SIGSTOP)
                time.sleep(rng.uniform(1.0, 3.5))
                os.kill(victim, signal.SIGCONT)
            proc.wait(400)
            text = log.read_text()
            where = f"seed {SEED}, run {run} (BOUNDLESS_SOAK_SEED={SEED} replays it):\n{text[-3000:]}"
            assert proc.returncode == 0 and "Traceback" not in text, where
            got = _model(shards)
            assert _counted_once(got), f"{got}; {where}"
            if once is not None:
                assert got == once, where
        finally:
            for s in shards:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(s.proc.pid, signal.SIGCONT)
                s.stop()
