"""Which files each rank of a group reads (trainer.input.file_split): a followed folder's by
their names' hash, so that files rolling away leave every other file with its rank, and
each line is trained once across the ranks' restarts; a folder read once dealt out in name
order, equal counts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from trainer.input.file_split import owner_of, share
from trainer.input.source import Position, StreamSource


def test_a_names_owner_is_fixed_across_hosts_and_releases():
    # a checkpoint's positions mean these owners: changing the hash would re-read or skip files
    names = [f"part-{i:05d}.libfm" for i in range(8)]
    assert [owner_of(n, 2) for n in names] == [0, 0, 0, 1, 1, 1, 1, 0]
    assert [owner_of(n, 3) for n in names] == [0, 1, 0, 0, 0, 2, 2, 1]
    assert all(owner_of(n, 1) == 0 for n in names)


def test_every_file_has_one_rank_and_a_fixed_folder_gets_equal_counts():
    names = [f"f{i:02d}" for i in range(10)]
    for follow in (True, False):
        shares = [share(names, names, (r, 3), follow) for r in range(3)]
        assert sorted(n for s in shares for n in s) == names
        assert all(s == sorted(s) for s in shares)  # each rank reads its files in name order
    assert [len(share(names, names, (r, 3), False)) for r in range(3)] == [4, 3, 3]


def _write(folder: Path, i: int) -> None:
    (folder / f"f{i:02d}.txt").write_text("".join(f"f{i:02d}-{j}\n" for j in range(3)))


def _read_on(folder: Path, rank: int, start: Position) -> tuple[list[str], Position]:
    """Rank `rank` of 2 following `folder` from `start` until it waits for data: its lines
    and where it stands then (what a checkpoint cut records)."""
    src = StreamSource(str(folder), follow=True, poll_s=0.01, start=start, part=(rank, 2))
    lines: list[str] = []
    at = start
    for block in src.blocks(1 << 20):
        if block is None:
            break
        if block.eof:  # a file's end, no data: the position stays after its last line
            continue
        lines += block.data.decode().splitlines()
        at = Position(block.file, block.offset + len(block.data), block.line + block.data.count(b"\n"))
    return lines, at


def test_files_rolling_away_move_no_file_to_another_rank(tmp_path):
    """A producer's folder: three files land between a rank's reads and the oldest is then
    deleted (retention). Each rank takes up at its position every time (as at a restart
    from a cut), and every line of every file is read once, by one rank."""
    at = [Position(), Position()]
    read: Counter[str] = Counter()
    for round_ in range(5):
        for i in range(3 * round_, 3 * round_ + 3):
            _write(tmp_path, i)
        for rank in range(2):
            lines, at[rank] = _read_on(tmp_path, rank, at[rank])
            read.update(lines)
        (tmp_path / f"f{round_:02d}.txt").unlink()  # rolled away, read or not
    assert read == Counter(f"f{i:02d}-{j}" for i in range(15) for j in range(3))
