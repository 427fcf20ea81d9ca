"""An s3://bucket/prefix/ source on a real S3 server (SeaweedFS): its objects, CSV and
Parquet, train exactly as a folder of the same files does, the folder's contract included
(pattern, ignored names, key order); a followed prefix trains objects as they land; a trainer
killed with -9 inside an object takes up at the cut's offset and trains every row once; a
prefix that cannot be listed fails at start with what S3 said."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from bench.slow_proxy import SlowProxy
from tests.integration.s3_server import s3_server
from tests.integration.test_exactly_once import _timed_once, _trainer_killed
from tests.integration.test_parquet import AVAZU, _as_parquet
from tests.support import wait_for_text

BUCKET = "stream"


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[Any]:
    """A client of a fresh S3 server; the server's endpoint and keys are in os.environ, so
    the trainers started here find it as a user's would (AWS_ENDPOINT_URL...)."""
    with s3_server(tmp_path / "weed", bucket=BUCKET):
        yield boto3.client("s3")


def _train(source: str, out: Path, *args: str) -> tuple[dict[str, Any], str]:
    cmd = [sys.executable, "-m", "boundless", "train", "--source", source, "--ps", "local", "--metrics-port", "-1"]
    proc = subprocess.run([*cmd, "--metrics-out", str(out), *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stderr


def _avazu_parts(data_dir: Path, folder: Path) -> int:
    """Avazu's rows as a folder: two CSV files and a Parquet file between them, each with
    its header, plus names the folder contract skips; returns the rows it trains on."""
    folder.mkdir(parents=True)
    lines = (data_dir / AVAZU).read_text().splitlines()
    header, rows = lines[0], lines[1:]
    thirds = [rows[: len(rows) // 3], rows[len(rows) // 3 : 2 * len(rows) // 3], rows[2 * len(rows) // 3 :]]
    (folder / "part-0.csv").write_text("\n".join([header, *thirds[0]]) + "\n")
    with tempfile.TemporaryDirectory() as scratch:
        middle = Path(scratch) / "middle.csv"
        middle.write_text("\n".join([header, *thirds[1]]) + "\n")
        _as_parquet(middle, folder / "part-1.parquet", rows_per_group=1000)
    (folder / "part-2.csv").write_text("\n".join([header, *thirds[2]]) + "\n")
    (folder / "part-3.csv.part").write_text("\n".join([header, *thirds[0]]) + "\n")  # a producer still writing
    (folder / ".hidden.csv").write_text("\n".join([header, *thirds[0]]) + "\n")
    (folder / "_SUCCESS").write_text("")  # a Spark job's marker, and its scratch folder
    (folder / "_temporary" / "0").mkdir(parents=True)
    (folder / "_temporary" / "0" / "part-9.csv").write_text("\n".join([header, *thirds[0]]) + "\n")
    return len(rows)


def _upload(s3: Any, folder: Path, prefix: str) -> None:
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            s3.upload_file(str(f), BUCKET, prefix + f.relative_to(folder).as_posix())


def _proxy(delay_s: float) -> SlowProxy:
    """A proxy in front of the S3 server that can go down (an outage), each 64 KiB it sends
    back held `delay_s` (a slow link, so a large object is still streaming when it goes)."""
    return SlowProxy(os.environ["AWS_ENDPOINT_URL"].rsplit("/", 1)[-1], delay_s)


def _train_behind(proxy: SlowProxy, prefix: str, out: Path, log: Path, *args: str) -> subprocess.Popen[str]:
    """`boundless train` on the prefix, reaching S3 through the proxy, botocore's own retries
    off so each failure reaches the source (they only delay it); its log in `log`."""
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://{proxy.address}", "AWS_MAX_ATTEMPTS": "1", "AWS_RETRY_MODE": "standard"}
    cmd = [sys.executable, "-m", "boundless", "train", "--source", f"s3://{BUCKET}/{prefix}", "--ps", "local"]
    cmd += ["--metrics-port", "-1", "--metrics-out", str(out), "--holdout-samples", "0", "--progress-interval-s", "0.5", *args]
    with open(log, "w") as err:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True, env=env)


def test_a_prefix_trains_exactly_as_the_folder_of_its_objects(s3: Any, data_dir: Path, tmp_path: Path) -> None:
    rows = _avazu_parts(data_dir, tmp_path / "table" / "day=1")  # a partitioned table's first partition
    _upload(s3, tmp_path / "table", "in/")
    s3.put_object(Bucket=BUCKET, Key="elsewhere/part-9.csv", Body=b"not,this\n")  # outside the prefix
    args = ("--model", "fm", "--k", "4", "--no-follow", "--holdout-samples", "0")
    from_folder, _ = _train(str(tmp_path / "table"), tmp_path / "folder.json", *args)
    from_s3, err = _train(f"s3://{BUCKET}/in/", tmp_path / "s3.json", *args)
    assert from_folder["samples"] == from_s3["samples"] == rows
    for key in ("progressive_logloss", "window_auc", "window_logloss", "bad_lines"):
        assert from_s3[key] == from_folder[key], key


def test_a_followed_prefix_trains_objects_as_they_land(s3: Any, data_dir: Path, tmp_path: Path) -> None:
    rows = _avazu_parts(data_dir, tmp_path / "folder")
    contract = (f for f in (tmp_path / "folder").iterdir() if f.is_file() and not f.name.startswith((".", "_")))
    objects = sorted(f for f in contract if not f.name.endswith(".part"))
    s3.upload_file(str(objects[0]), BUCKET, "live/" + objects[0].name)
    out = tmp_path / "m.json"
    cmd = [sys.executable, "-m", "boundless", "train", "--source", f"s3://{BUCKET}/live/", "--ps", "local"]
    cmd += ["--metrics-port", "-1", "--metrics-out", str(out), "--idle-exit-s", "4", "--holdout-samples", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2.0)
        for f in objects[1:]:  # later keys land while it follows
            s3.upload_file(str(f), BUCKET, "live/" + f.name)
            time.sleep(1.0)
        _, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert json.loads(out.read_text())["samples"] == rows


def test_a_trainer_killed_inside_an_object_trains_every_row_once(s3: Any, data_dir: Path, tmp_path: Path) -> None:
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    stream = lines * 24
    for i in range(4):  # four objects of Frappe repeated, in key order
        part = stream[i * len(stream) // 4 : (i + 1) * len(stream) // 4]
        s3.put_object(Bucket=BUCKET, Key=f"frappe/{i:02d}.libfm", Body=("\n".join(part) + "\n").encode())
    uri = f"s3://{BUCKET}/frappe/"
    expected, span = _timed_once(uri, tmp_path / "once")
    kills, err, model = _trainer_killed(uri, tmp_path / "killed", random.Random(5), 3, span)
    assert kills >= 2 and "the stream takes up at" in err, err[-3000:]
    assert model == expected
    assert json.loads((tmp_path / "killed" / "m.json").read_text())["samples"] == len(stream)


def test_a_prefix_that_cannot_be_listed_fails_at_start_naming_it(s3: Any, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "boundless", "train", "--source", "s3://no-such-bucket/x/", "--ps", "local"]
    proc = subprocess.run([*cmd, "--metrics-port", "-1"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "s3://no-such-bucket/x/" in proc.stderr and "NoSuchBucket" in proc.stderr, proc.stderr[-2000:]


def test_compressed_objects_train_as_the_text_they_hold(s3: Any, data_dir: Path, tmp_path: Path) -> None:
    """gzip and zstd objects (told by their first bytes) train as their CSV text, the same
    rows as the plain objects; a reader resumed inside one takes the CSV header from its text."""
    import gzip

    import zstandard

    from trainer.input.s3_source import S3PrefixSource

    lines = (data_dir / AVAZU).read_bytes().splitlines(keepends=True)
    header, rows = lines[0], lines[1:]
    half = len(rows) // 2
    s3.put_object(Bucket=BUCKET, Key="packed/part-0.csv.gz", Body=gzip.compress(b"".join([header, *rows[:half]])))
    s3.put_object(
        Bucket=BUCKET, Key="packed/part-1.csv.zst", Body=zstandard.ZstdCompressor().compress(b"".join([header, *rows[half:]]))
    )
    s3.put_object(Bucket=BUCKET, Key="plain/part-0.csv", Body=b"".join([header, *rows[:half]]))
    s3.put_object(Bucket=BUCKET, Key="plain/part-1.csv", Body=b"".join([header, *rows[half:]]))
    args = ("--model", "fm", "--k", "4", "--no-follow", "--holdout-samples", "0")
    plain, _ = _train(f"s3://{BUCKET}/plain/", tmp_path / "plain.json", *args)
    packed, _ = _train(f"s3://{BUCKET}/packed/", tmp_path / "packed.json", *args)
    assert packed["samples"] == plain["samples"] == len(rows) and packed["bad_lines"] == 0
    for key in ("progressive_logloss", "window_auc"):
        assert packed[key] == plain[key], key
    source = S3PrefixSource(f"s3://{BUCKET}/packed/", follow=False)
    assert source.first_line(f"s3://{BUCKET}/packed/part-1.csv.zst") == header.decode().rstrip("\n")

    # halfway through the gzip'd object its backlog is about half its size on disk, plus the
    # zstd object's: a position counts bytes of text (the old backlog said 0 past a fifth)
    from trainer.input.source import Position

    gz, text = f"s3://{BUCKET}/packed/part-0.csv.gz", len(b"".join([header, *rows[:half]]))
    blocks = source.blocks(1 << 16, block_bytes=1 << 14)
    at = next(b for b in blocks if b is not None and b.file == gz and b.offset >= text // 2)
    sizes = {o["Key"]: o["Size"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="packed/")["Contents"]}
    expected = sizes["packed/part-0.csv.gz"] * (1 - at.offset / text) + sizes["packed/part-1.csv.zst"]
    assert at.offset > sizes["packed/part-0.csv.gz"]
    left = source.backlog(Position(gz, at.offset, at.line))
    assert left is not None and abs(left[1] - expected) < 0.1 * sizes["packed/part-0.csv.gz"], (left, sizes, at.offset)


def test_objects_removed_before_they_were_read_are_said_and_counted(s3: Any, tmp_path: Path, caplog: Any) -> None:
    """A lifecycle rule that runs ahead of the trainer removes objects it listed and has not
    read (plain and compressed alike), or the one a checkpoint stands in: each is an error
    naming it and counted, and the stream goes on (before: a removed object's first read
    raised out of the source, and the trainer stopped)."""
    import gzip
    import logging

    from trainer.input.s3_source import S3PrefixSource
    from trainer.input.source import Position

    for name, body in (
        ("a.txt", b"1 1:1\n" * 3),
        ("b.txt", b"1 2:1\n" * 3),
        ("c.txt.gz", gzip.compress(b"1 3:1\n")),
        ("d.txt", b"0 4:1\n"),
    ):
        s3.put_object(Bucket=BUCKET, Key=f"gone/{name}", Body=body)
    src = S3PrefixSource(f"s3://{BUCKET}/gone/", follow=False)
    blocks = src.blocks(1 << 16)
    first = next(b for b in blocks if b is not None and b.data)
    assert first.file.endswith("/a.txt")  # listed: b, c and d pending
    s3.delete_object(Bucket=BUCKET, Key="gone/b.txt")
    s3.delete_object(Bucket=BUCKET, Key="gone/c.txt.gz")
    with caplog.at_level(logging.ERROR, logger="trainer"):
        rest = [b.file for b in blocks if b is not None and b.data]
    assert rest == [f"s3://{BUCKET}/gone/d.txt"] and src.lost_files == 2
    assert f"s3://{BUCKET}/gone/b.txt, removed from the prefix before it was read" in caplog.text
    assert f"s3://{BUCKET}/gone/c.txt.gz, removed" in caplog.text

    caplog.clear()
    at = Position(f"s3://{BUCKET}/gone/b.txt", 6, 1)
    with caplog.at_level(logging.ERROR, logger="trainer"):
        taken_up = S3PrefixSource(f"s3://{BUCKET}/gone/", follow=False, start=at)
        read = [b.file for b in taken_up.blocks(1 << 16) if b is not None and b.data]
    assert read == [f"s3://{BUCKET}/gone/d.txt"] and taken_up.lost_files == 1
    assert "where the checkpoint stands (line 1, byte 6), is gone from the prefix" in caplog.text

    # objects before the checkpoint's count as read: one written after the cut is said, not read
    caplog.clear()
    at_d = Position(f"s3://{BUCKET}/gone/d.txt", 0, 0)
    with caplog.at_level(logging.ERROR, logger="trainer"):
        late = S3PrefixSource(f"s3://{BUCKET}/gone/", follow=False, start=at_d, start_at=time.time() - 60)
        assert [b.file for b in late.blocks(1 << 16) if b is not None and b.data] == [f"s3://{BUCKET}/gone/d.txt"]
    assert late.lost_files == 1 and f"s3://{BUCKET}/gone/a.txt sorts before" in caplog.text and "landed late" in caplog.text
    before = S3PrefixSource(f"s3://{BUCKET}/gone/", follow=False, start=at_d, start_at=time.time() + 60)
    assert [b.file for b in before.blocks(1 << 16) if b is not None and b.data] == [f"s3://{BUCKET}/gone/d.txt"]
    assert before.lost_files == 0

    # a cut of two ranks taken up by three: rank 0 says the object a rank stood in is gone, once for the group
    caplog.clear()
    prior = {"ranks": 2, "positions": [vars(Position(f"s3://{BUCKET}/gone/a.txt", 6, 1)), vars(at)]}
    with caplog.at_level(logging.ERROR, logger="trainer"):
        ranks = [S3PrefixSource(f"s3://{BUCKET}/gone/", False, start=Position(prior=prior), part=(r, 3)) for r in range(3)]
        read = [b.file for src in ranks for b in src.blocks(1 << 16) if b is not None and b.data]
    assert sorted(read) == [f"s3://{BUCKET}/gone/a.txt", f"s3://{BUCKET}/gone/d.txt"]
    assert [src.lost_files for src in ranks] == [1, 0, 0]
    assert caplog.text.count("gone/b.txt, where the checkpoint stands (line 1, byte 6), is gone") == 1

    # objects a prior counts as read, written after the cut: said by the rank whose share they are
    for name in ("w.txt", "x.txt", "y.txt", "z.txt"):
        s3.put_object(Bucket=BUCKET, Key=f"late/{name}", Body=b"1 1:1\n" * 3)
    caplog.clear()
    stands = [vars(Position(f"s3://{BUCKET}/late/y.txt", 6, 1)), vars(Position(f"s3://{BUCKET}/late/z.txt", 0, 0))]
    prior = {"ranks": 2, "positions": stands}  # by place: w and y were rank 0's, x and z rank 1's
    for cut_at, said in ((time.time() - 60, 2), (time.time() + 60, 0)):
        with caplog.at_level(logging.ERROR, logger="trainer"):
            ranks = [
                S3PrefixSource(f"s3://{BUCKET}/late/", False, start=Position(prior=prior), part=(r, 3), start_at=cut_at)
                for r in range(3)
            ]
            read = sorted(b.file for src in ranks for b in src.blocks(1 << 16) if b is not None and b.data)
        assert read == [f"s3://{BUCKET}/late/y.txt", f"s3://{BUCKET}/late/z.txt"]
        assert sum(src.lost_files for src in ranks) == said
    assert f"s3://{BUCKET}/late/x.txt sorts before s3://{BUCKET}/late/z.txt, where the checkpoint stands" in caplog.text


def test_a_prefix_read_by_one_number_of_ranks_goes_on_with_another_each_line_once(s3: Any) -> None:
    """A cut taken by W ranks over a prefix, taken up by another number (the chart's
    trainer.replicas changed): every rank of the new group reads the objects of its share
    that the old ranks had not, from where they stood (trainer.input.rescaled); over random
    sequences of group sizes, each rank stopped at a random line, objects landing between
    runs, followed and not, every line is read once (before: refused at the restart)."""
    from collections import Counter

    from tests.unit.trainer.input.test_rescaled import part_text, run_ranks
    from trainer.input.s3_source import S3PrefixSource
    from trainer.input.source import Position
    from trainer.run.recovery import CutPoint, rank_part

    rng = random.Random(31)
    for case in range(8):
        follow, prefix = case % 2 == 0, f"rescaled-{case}/"
        sizes = [rng.randint(0, 25) for _ in range(rng.randint(1, 5))]
        written, everything = 0, []
        point: CutPoint | None = None
        worlds = [rng.randint(1, 4) for _ in range(rng.randint(2, 4))]
        for stage, world in enumerate(worlds):
            for i in range(written, 5 if not stage else written + (2 if rng.random() < 0.5 else 0)):
                s3.put_object(Bucket=BUCKET, Key=f"{prefix}part-{i:03d}.txt", Body=part_text(i, sizes).encode())
                written = i + 1
            starts = [Position()] * world
            if point is not None:
                starts = [p.position or Position() for p in (rank_part(point, r, world, say=False) for r in range(world))]
            last = stage == len(worlds) - 1
            limits = [None if last else rng.choice([None, rng.randint(0, 40)]) for _ in range(world)]

            def open_rank(start: Position, part: tuple[int, int]) -> S3PrefixSource:
                return S3PrefixSource(f"s3://{BUCKET}/{prefix}", follow, poll_s=0.0, start=start, part=part)  # noqa: B023

            point, read = run_ranks(open_rank, starts, limits)
            everything += read
        want = Counter(ln for i in range(written) for ln in part_text(i, sizes).split())
        assert Counter(everything) == want, (case, follow, worlds, sizes)


def test_a_prefix_trained_by_two_ranks_goes_on_with_three_then_one(s3: Any, data_dir: Path, tmp_path: Path) -> None:
    """The trainer as a user runs it: two ranks stopped inside objects by a sample limit,
    three from the cut they took up to a larger limit (which counts the samples the cut
    carried: the group stops at it exactly), then one to the end: every line trained once."""
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    for i in range(6):
        part = lines[i * len(lines) // 6 : (i + 1) * len(lines) // 6]
        s3.put_object(Bucket=BUCKET, Key=f"frappe/{i:02d}.libfm", Body=("\n".join(part) + "\n").encode())
    uri, data = f"s3://{BUCKET}/frappe/", str(tmp_path / "ps")
    args = ("--no-follow", "--holdout-samples", "0", "--local-data-dir", data)
    first, _ = _train(uri, tmp_path / "two.json", "--workers", "2", "--max-samples", "20001", *args)
    assert 20001 <= first["samples"] < len(lines)
    then, err = _train(uri, tmp_path / "three.json", "--workers", "3", "--max-samples", "40000", *args)
    assert "taken up by 3: the stream's files are dealt out anew" in err, err[-3000:]
    assert then["samples"] == 40000, (first["samples"], then["samples"])
    last, _ = _train(uri, tmp_path / "one.json", *args)
    assert last["samples"] == len(lines), (first["samples"], then["samples"], last["samples"])


def test_a_followed_prefix_waits_out_an_s3_outage_and_trains_every_line_once(s3: Any, data_dir: Path, tmp_path: Path) -> None:
    """S3 (or the network to it) goes down while the trainer follows a prefix, in the middle
    of an object, and an object lands meanwhile: the trainer waits (listings and the read
    tried again, said, counted), reads on from the byte it reached once S3 answers, and with
    --idle-exit-s ends only after the new object: every line once. Before, the first listing
    that failed past botocore's retries ended the run with a traceback; and an outage longer
    than --idle-exit-s would have ended it as idle with objects unread."""
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    first, later = lines * 8, lines[: len(lines) // 2]
    s3.put_object(Bucket=BUCKET, Key="live/00.libfm", Body=("\n".join(first) + "\n").encode())
    proxy = _proxy(0.01)  # 33 MB take 5 s to stream
    out, log = tmp_path / "m.json", tmp_path / "train.log"
    proc = _train_behind(proxy, "live/", out, log, "--model", "ffm", "--k", "4", "--idle-exit-s", "2")
    try:
        wait_for_text(log, "INFO samples ", proc, timeout=180)  # training: the first object is still streaming
        proxy.set_down(True)
        time.sleep(8.0)  # four times --idle-exit-s: waiting for S3 is not idleness
        proxy.set_down(False)
        proxy.delay_s = 0.0
        wait_for_text(log, f"INFO samples {len(first)} ", proc, timeout=180)  # read on to its end, waiting for more
        proxy.set_down(True)  # now the listings fail
        time.sleep(2.0)
        s3.put_object(Bucket=BUCKET, Key="live/01.libfm", Body=("\n".join(later) + "\n").encode())
        time.sleep(6.0)
        assert proc.poll() is None, log.read_text()[-3000:]
        proxy.set_down(False)
        proc.wait(timeout=300)
    finally:
        proc.kill()
        proxy.close()
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    assert "read failed at byte" in text and "cannot be listed" in text and "listed again" in text, text[-3000:]
    assert json.loads(out.read_text())["samples"] == len(first) + len(later), text[-3000:]


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_a_trainer_stopped_while_s3_is_down_stops_at_a_cut_and_takes_up_there(
    s3: Any, data_dir: Path, tmp_path: Path, packed: bool
) -> None:
    """SIGTERM while a read waits for S3 mid-object: the trainer stops at once (not after
    the wait, and not with the S3 error), takes its last cut, and a run after the outage
    takes up there: every line once (the object read on from the cut's byte). A gzip'd
    object too: before, the storage's error inside its decompressor read as damage, and the
    rest of the object was lost."""
    import gzip
    import signal

    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines() * 8
    body = ("\n".join(lines) + "\n").encode()
    s3.put_object(Bucket=BUCKET, Key="once/00.libfm" + (".gz" if packed else ""), Body=gzip.compress(body) if packed else body)
    proxy = _proxy(0.1 if packed else 0.01)
    args = ["--model", "ffm", "--k", "4", "--no-follow", "--holdout-samples", "0", "--local-data-dir", str(tmp_path / "ps")]
    log = tmp_path / "stopped.log"
    proc = _train_behind(proxy, "once/", tmp_path / "stopped.json", log, *args)
    try:
        wait_for_text(log, "INFO samples ", proc, timeout=180)
        proxy.set_down(True)
        wait_for_text(log, "read failed at byte", proc, timeout=60)
        time.sleep(4.0)  # the batches read before the outage are trained: the loop waits on the read
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)  # the wait for S3 ends with the stream
    finally:
        proc.kill()
        proxy.close()
    text = log.read_text()
    assert proc.returncode == 0 and "Traceback" not in text and "damaged" not in text, text[-3000:]
    stopped = json.loads((tmp_path / "stopped.json").read_text())["samples"]
    assert 0 < stopped < len(lines), stopped
    done, _ = _train(f"s3://{BUCKET}/once/", tmp_path / "done.json", *args)
    assert done["samples"] == len(lines), (stopped, done["samples"])


def test_a_parquet_object_read_while_s3_is_down_loses_no_row_group(s3: Any, data_dir: Path, tmp_path: Path) -> None:
    """S3 goes down while a Parquet object's row groups are being read: each row group that
    cannot be read waits for S3 and is read again, so every row trains once. Before, every
    row group read during the outage was skipped as damaged ("cannot be read; skipped"), and
    its rows were lost."""
    rows = _as_parquet(data_dir / AVAZU, tmp_path / "00.parquet", rows_per_group=500, repeat=20)
    s3.upload_file(str(tmp_path / "00.parquet"), BUCKET, "pq/00.parquet")
    proxy = _proxy(0.02)
    out, log = tmp_path / "m.json", tmp_path / "train.log"
    proc = _train_behind(proxy, "pq/", out, log, "--model", "lr", "--idle-exit-s", "2")
    try:
        wait_for_text(log, "INFO samples ", proc, timeout=180)
        proxy.set_down(True)
        time.sleep(8.0)
        proxy.set_down(False)
        proc.wait(timeout=300)
    finally:
        proc.kill()
        proxy.close()
    text = log.read_text()
    assert proc.returncode == 0 and "skipped" not in text, text[-3000:]
    assert "read again once S3 answers" in text, text[-3000:]
    assert json.loads(out.read_text())["samples"] == rows, text[-3000:]


def _through(proxy: SlowProxy, monkeypatch: Any) -> None:
    """This process's S3 clients reach the server through the proxy, botocore's retries off."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{proxy.address}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("AWS_RETRY_MODE", "standard")


def _down_for(proxy: SlowProxy, seconds: float) -> threading.Timer:
    proxy.set_down(True)
    timer = threading.Timer(seconds, proxy.set_down, [False])
    timer.start()
    return timer


def test_the_start_up_peek_and_a_header_read_wait_out_an_s3_outage(
    s3: Any, data_dir: Path, monkeypatch: Any, caplog: Any
) -> None:
    """The trainer's first look at a prefix (its first lines, for the schema) and a csv
    object's header read again by a run resumed inside it wait for S3 as the stream does.
    Before, the peek of a prefix read once took a failed listing for an empty prefix (no
    schema: an FFM run refused to start, "no data came"), and a failed header read ended
    the run with botocore's error."""
    from trainer.input.s3_source import S3PrefixSource

    text = (data_dir / AVAZU).read_text()
    header = text.split("\n", 1)[0]
    s3.put_object(Bucket=BUCKET, Key="peek/00.csv", Body=text.encode())
    proxy = _proxy(0.0)
    _through(proxy, monkeypatch)
    try:
        source = S3PrefixSource(f"s3://{BUCKET}/peek/", follow=False, poll_s=0.0)
        _down_for(proxy, 3.0)
        lines = source.peek()
        assert lines[:3] == text.splitlines()[:3], lines[:3]
        _down_for(proxy, 3.0)
        with caplog.at_level("WARNING", logger="trainer"):
            assert source.first_line(f"s3://{BUCKET}/peek/00.csv") == header
        assert "read again once S3 answers" in caplog.text, caplog.text
    finally:
        proxy.close()


@pytest.mark.parametrize("stopped", [False, True], ids=["waits", "stopped"])
def test_a_reader_resumed_inside_a_csv_object_reads_its_header_through_an_outage(
    s3: Any, data_dir: Path, monkeypatch: Any, stopped: bool
) -> None:
    """A run taken up inside a csv object reads the object's header again (its first line)
    to parse the lines after the cut. S3 down at that moment: the reader waits and parses
    every line after the cut once with that header; stopped while it waits, it ends
    quietly, with nothing more trained (the cut stands). Before, the header read's error
    ended the run."""
    from ctr.data.fields import FieldIndex
    from ctr.data.schema import detect_schema
    from trainer.input.reader import BatchReader
    from trainer.input.s3_source import S3PrefixSource
    from trainer.input.source import BLOCK_BYTES, Block, Position

    text = (data_dir / AVAZU).read_text()
    header, rows = text.split("\n", 1)[0], text.splitlines()[1:]
    uri = f"s3://{BUCKET}/resumed/00.csv"
    s3.put_object(Bucket=BUCKET, Key="resumed/00.csv", Body=text.encode())
    skip = 100
    start = Position(file=uri, offset=len(header) + 1 + sum(len(r) + 1 for r in rows[:skip]), line=skip + 1)
    proxy = _proxy(0.0)
    _through(proxy, monkeypatch)
    halt = threading.Event()

    class OutageAtTheFirstBlock(S3PrefixSource):
        """The prefix's source, S3 going down as its first block of data is handed over (the
        reader then asks for the object's header)."""

        def blocks(self, max_line_bytes: int, block_bytes: int = BLOCK_BYTES) -> Iterator[Block | None]:
            outage: threading.Timer | None = None
            for block in super().blocks(max_line_bytes, block_bytes):
                if block is not None and block.data and outage is None:
                    outage = _down_for(proxy, 3.0)
                    if stopped:
                        threading.Timer(1.0, halt.set).start()
                yield block

    schema = detect_schema(header)
    try:
        source = OutageAtTheFirstBlock(f"s3://{BUCKET}/resumed/", follow=False, poll_s=0.0, start=start, stop=halt.is_set)
        reader = BatchReader(source, schema, FieldIndex(schema.base_fields(header)), 1000, 1 << 20)
        got = [b for b in reader.batches() if b is not None]
    finally:
        proxy.close()
    assert reader.bad_lines == 0
    if stopped:
        assert got == []
        return
    assert sum(b.lines for b in got) == len(rows) - skip
    assert got[-1].position.file == uri
