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
