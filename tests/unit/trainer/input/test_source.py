"""The trainer's lag: what a folder source holds past the trained position, in bytes."""

from __future__ import annotations

from trainer.input.source import Position, StreamSource


def test_a_folders_backlog_counts_the_bytes_past_the_position(tmp_path):
    for name, size in (("a.txt", 100), ("b.txt", 50), ("c.txt", 30), (".hidden", 999)):
        (tmp_path / name).write_bytes(b"x" * size)
    src = StreamSource(str(tmp_path), follow=True)
    assert src.backlog(Position()) == ("bytes", 180)  # nothing trained; hidden files are not the stream's
    assert src.backlog(Position(str(tmp_path / "b.txt"), 20)) == ("bytes", 30 + 30)  # a.txt is behind
    assert src.backlog(Position(str(tmp_path / "c.txt"), 30)) == ("bytes", 0)
    two = StreamSource(str(tmp_path), follow=False, part=(1, 2))  # rank 1 of 2 of a fixed folder reads b.txt only
    assert two.backlog(Position()) == ("bytes", 50)
    followed = StreamSource(str(tmp_path), follow=True, part=(1, 2))  # by name hash: a.txt is rank 1's, b and c rank 0's
    assert followed.backlog(Position()) == ("bytes", 100)
    assert StreamSource("-", follow=False).backlog(Position()) is None  # stdin: unknown


def test_a_checkpoints_position_is_taken_in_this_sources_spelling_or_dropped_with_a_warning(tmp_path, monkeypatch, caplog):
    """Files before the position's count as read, compared by path: a position spelled
    otherwise (a relative --source now absolute) made a restart train nothing or all again,
    and one in another folder made a new folder train nothing, silently."""
    import logging

    day = tmp_path / "day"
    day.mkdir()
    for name in ("part-1", "part-2"):
        (day / name).write_text("1 1:1\n0 2:1\n")
    monkeypatch.chdir(tmp_path)
    at = Position("day/part-1", 6, 1)
    absolute = StreamSource(str(day), follow=False, start=at)
    assert absolute.start == Position(str(day / "part-1"), 6, 1)
    data = [b for b in absolute.blocks(1 << 16) if b is not None and b.data]
    assert [(b.file, b.offset) for b in data] == [(str(day / "part-1"), 6), (str(day / "part-2"), 0)]
    assert StreamSource("day/part-1", follow=False, start=Position(str(day / "part-1"), 6, 1)).start.file == "day/part-1"

    other = tmp_path / "another"  # sorts before "day": every file counted as read before
    other.mkdir()
    (other / "a").write_text("1 3:1\n")
    with caplog.at_level(logging.WARNING, logger="trainer"):
        fresh = StreamSource(str(other), follow=False, start=at)
    assert fresh.start == Position() and "not in --source" in caplog.text and "read from its start" in caplog.text
    assert [b.file for b in fresh.blocks(1 << 16) if b is not None and b.data] == [str(other / "a")]

    moved = tmp_path / "moved"
    day.rename(moved)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trainer"):
        taken_up = StreamSource(str(moved), follow=False, start=at)
    assert taken_up.start == Position(str(moved / "part-1"), 6, 1) and "taken as the same stream, moved" in caplog.text


def _spark_layout(root):
    """A Hive/Spark partitioned output: partitions in subfolders, markers and a job's
    scratch folder beside them."""
    for day, parts in (("date=2026-12-01", ("part-00000.csv", "part-00001.csv")), ("date=2026-12-02", ("part-00000.csv",))):
        (root / day).mkdir(parents=True)
        for n, part in enumerate(parts):
            (root / day / part).write_text(f"{day}/{n}\n")
        (root / day / "_SUCCESS").write_text("")
        (root / day / ".part-00000.csv.crc").write_text("crc")
    (root / "_temporary" / "0").mkdir(parents=True)
    (root / "_temporary" / "0" / "part-00009.csv").write_text("half written\n")
    (root / "_SUCCESS").write_text("")


def test_a_partitioned_folder_is_read_through_its_subfolders_in_path_order(tmp_path, monkeypatch):
    _spark_layout(tmp_path)
    monkeypatch.chdir(tmp_path.parent)
    spelled = StreamSource(f"./{tmp_path.name}//", follow=False)  # keys spelled as str(Path) spells them
    assert spelled.names()[0] == "date=2026-12-01/part-00000.csv" and set(spelled._inodes) == {
        str(f) for f in spelled._all_files()
    }
    src = StreamSource(str(tmp_path), follow=False)
    lines = [b.data for b in src.blocks(1 << 16) if b is not None and b.data]
    assert lines == [b"date=2026-12-01/0\n", b"date=2026-12-01/1\n", b"date=2026-12-02/0\n"]
    assert src.names() == ["date=2026-12-01/part-00000.csv", "date=2026-12-01/part-00001.csv", "date=2026-12-02/part-00000.csv"]
    assert src.peek() == ["date=2026-12-01/0"]  # the first file with bytes: markers are empty and ignored

    # a restart inside a partition takes up there, however the folder is spelled
    at = Position(str(tmp_path / "date=2026-12-01" / "part-00001.csv"), 0, 0)
    resumed = StreamSource(str(tmp_path) + "/", follow=False, start=at)
    assert [b.data for b in resumed.blocks(1 << 16) if b is not None and b.data] == [
        b"date=2026-12-01/1\n",
        b"date=2026-12-02/0\n",
    ]

    # two followed ranks share the files by their paths under the folder: each file once
    got = []
    for rank in (0, 1):
        ranked = StreamSource(str(tmp_path), follow=True, part=(rank, 2), stop=lambda: False)
        got += [str(f) for f in ranked._files()]
    assert sorted(got) == sorted(str(tmp_path / n) for n in src.names())


def test_an_empty_marker_first_does_not_hold_up_the_peek(tmp_path):
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / "a-empty.csv").write_text("")
    (tmp_path / "b.csv").write_text("clicked,a\n1,x\n")
    assert StreamSource(str(tmp_path), follow=True).peek(timeout_s=30) == ["clicked,a", "1,x"]
    empty = tmp_path / "none"
    empty.mkdir()

    def waits() -> bool:
        raise AssertionError("a folder that is not followed has no data to wait for")

    assert StreamSource(str(empty), follow=False, stop=waits).peek(timeout_s=3600) == []


def _half_read(src: StreamSource, name: str, text_bytes: int) -> Position:
    """Reads the source until a block of `name` starts past half its text; that block's
    position (the reading goes on from there, as a trained position lags it)."""
    for block in src.blocks(1 << 16, block_bytes=1 << 15):
        if block is not None and block.file == name and block.offset >= text_bytes // 2:
            return Position(block.file, block.offset, block.line)
    raise AssertionError("the file was not read past half")


def test_a_compressed_or_parquet_files_backlog_is_in_its_bytes_on_disk(tmp_path):
    """A compressed or Parquet file's position counts bytes of its text, which its file holds
    about a quarter of (or fewer): half read, its backlog is about half its size on disk.
    Before, backlog took the text offset from the file's size: 0 once a fifth was read, so a
    trainer halfway through a gzip'd day reported itself caught up."""
    import gzip
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    rnd = random.Random(7)
    lines = [f"{rnd.randint(0, 1)} a:{rnd.randint(0, 999)} b:{rnd.randint(0, 99)} c:{rnd.randint(0, 9)}" for _ in range(60000)]
    text = ("\n".join(lines) + "\n").encode()
    zipped = tmp_path / "day.gz"
    zipped.write_bytes(gzip.compress(text))
    src = StreamSource(str(zipped), follow=False)
    at = _half_read(src, str(zipped), len(text))
    size = zipped.stat().st_size
    assert size < len(text) / 2  # a text offset past the size: the old backlog said 0
    kind, left = src.backlog(at)  # type: ignore[misc]
    assert kind == "bytes" and abs(left - size * (1 - at.offset / len(text))) < 0.1 * size, (left, size)

    table = pa.table({"label": [int(x.split()[0]) for x in lines], "a": [x.split()[1] for x in lines]})
    folder = tmp_path / "parquet"
    folder.mkdir()
    path = folder / "day.parquet"
    pq.write_table(table, path, row_group_size=5000)
    src = StreamSource(str(folder), follow=False)
    text_bytes = sum(len(x) for x in (f"{r['label']},{r['a']}\n" for r in table.to_pylist())) + len("label,a\n")
    at = _half_read(src, str(path), text_bytes)
    size = path.stat().st_size
    kind, left = src.backlog(at)  # type: ignore[misc]
    assert kind == "bytes" and abs(left - size * (1 - at.offset / text_bytes)) < 0.1 * size, (left, size, at)
    assert src.on_disk(Position(str(tmp_path / "plain.txt"), 100)) == 100  # a plain file: its offset


def test_a_file_removed_before_it_was_read_is_said_and_counted_and_a_renamed_one_is_read(tmp_path, caplog):
    """A retention that runs ahead of the trainer removes files it has listed and not read:
    their samples are lost, which was silent. A file renamed within the folder is not
    lost: it is read under its new name."""
    import logging

    for name in ("a", "b", "c", "d"):
        (tmp_path / name).write_text(f"1 {name}:1\n" * 3)
    src = StreamSource(str(tmp_path), follow=False)
    blocks = src.blocks(1 << 16)
    first = next(b for b in blocks if b is not None and b.data)
    assert first.file == str(tmp_path / "a")  # the folder is listed: b, c and d are pending
    (tmp_path / "b").unlink()
    (tmp_path / "c").rename(tmp_path / "e")
    with caplog.at_level(logging.ERROR, logger="trainer"):
        rest = [b.file for b in blocks if b is not None and b.data]
    assert rest == [str(tmp_path / "d"), str(tmp_path / "e")]
    assert src.lost_files == 1
    assert f"{tmp_path / 'b'} was removed from the folder before it was read" in caplog.text
    assert "/c was removed" not in caplog.text


def test_a_checkpoints_file_gone_while_the_trainer_was_down_is_said(tmp_path, caplog):
    import logging

    for name in ("a", "c"):
        (tmp_path / name).write_text("1 1:1\n" * 3)
    with caplog.at_level(logging.ERROR, logger="trainer"):
        src = StreamSource(str(tmp_path), follow=False, start=Position(str(tmp_path / "b"), 12, 2))
    assert src.lost_files == 1 and "where the checkpoint stands (line 2, byte 12), is gone from the folder" in caplog.text
    assert [b.file for b in src.blocks(1 << 16) if b is not None and b.data] == [str(tmp_path / "c")]
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="trainer"):
        kept = StreamSource(str(tmp_path), follow=False, start=Position(str(tmp_path / "a"), 6, 1))
    assert kept.lost_files == 0 and not caplog.text


def test_a_file_that_changed_after_the_cut_under_an_earlier_name_is_said(tmp_path, caplog):
    """Files sorting before the checkpoint's count as read. One that landed (or changed)
    after the cut holds samples the model does not have: said and counted, not read."""
    import logging
    import os
    import time

    for name in ("a", "b", "c", "late"):
        (tmp_path / name).write_text("1 1:1\n" * 3)
    cut_at = time.time() - 60
    os.utime(tmp_path / "a", (cut_at - 30, cut_at - 30))  # written before the cut: read then
    with caplog.at_level(logging.ERROR, logger="trainer"):
        src = StreamSource(str(tmp_path), follow=False, start=Position(str(tmp_path / "c"), 6, 2), start_at=cut_at)
    assert src.lost_files == 1 and f"{tmp_path / 'b'} sorts before {tmp_path / 'c'}, where the checkpoint stands" in caplog.text
    assert f"{tmp_path / 'a'} sorts" not in caplog.text
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="trainer"):  # a cut from before its time was recorded: nothing to tell
        assert StreamSource(str(tmp_path), follow=False, start=Position(str(tmp_path / "c"), 6, 2)).lost_files == 0
    assert not caplog.text


def test_many_files_changed_after_the_cut_are_said_in_one_line(tmp_path, caplog):
    """A folder copied since the cut (cp without -p) gives every file a new time: one line,
    naming the likely cause, not one per file."""
    import logging
    import time

    for i in range(6):
        (tmp_path / f"part-{i}").write_text("1 1:1\n")
    with caplog.at_level(logging.ERROR, logger="trainer"):
        src = StreamSource(str(tmp_path), follow=False, start=Position(str(tmp_path / "part-5"), 0, 0), start_at=time.time() - 60)
    assert src.lost_files == 5 and len(caplog.records) == 1 and "5 files that sort before" in caplog.text
    assert "cp without -p" in caplog.text
