"""A folder read by W ranks up to a cut, then by another number of ranks from it: every line
read exactly once over the runs, through the positions' prior (trainer.input.rescaled), with
the folder followed (files dealt by their names' hash) or read once (dealt by their place)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainer.input import rescaled
from trainer.input.source import Position, StreamSource
from trainer.run.recovery import CutPoint, rank_part

# a rank's source: (its start, (rank, world)) -> the source it reads
OpenRank = Callable[[Position, tuple[int, int]], StreamSource]


def part_text(i: int, sizes: list[int]) -> str:
    """File i's lines: sizes[i % len(sizes)] of them, each naming its file and line."""
    return "".join(f"f{i}-l{j}\n" for j in range(sizes[i % len(sizes)]))


def _write(folder: Path, first: int, count: int, sizes: list[int]) -> None:
    for i in range(first, first + count):
        (folder / f"part-{i:03d}.txt").write_text(part_text(i, sizes))


def run_ranks(open_rank: OpenRank, starts: list[Position], limits: list[int | None]) -> tuple[CutPoint, list[str]]:
    """Each rank of len(starts) reads up to its limit of lines (None: all there is) from its
    start: the cut its positions make, and the lines read."""
    world = len(starts)
    read: list[str] = []
    parts = []
    for rank, (start, limit) in enumerate(zip(starts, limits, strict=True)):
        src = open_rank(start, (rank, world))
        position = src.position_after(start)
        taken = 0
        for block in src.blocks(1 << 20, block_bytes=64):
            if block is None:  # followed, and nothing more has landed
                break
            if not block.data:
                continue
            lines = block.data.decode().splitlines(keepends=True)
            if limit is not None:
                lines = lines[: max(0, limit - taken)]
            if not lines:
                break
            read += [ln.strip() for ln in lines]
            taken += len(lines)
            position = src.position_after(
                Position(block.file, block.offset + sum(len(ln.encode()) for ln in lines), block.line + len(lines))
            )
            if limit is not None and taken >= limit:
                break
        parts.append(CutPoint(1, position))
    return CutPoint(1, parts=tuple(parts)) if world > 1 else parts[0], read


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.booleans(),
    st.lists(st.integers(1, 4), min_size=2, max_size=4),
    st.lists(st.integers(0, 25), min_size=1, max_size=5),
    st.data(),
)
def test_every_line_is_read_once_across_runs_of_other_numbers_of_ranks(tmp_path_factory, follow, worlds, sizes, data):
    folder = tmp_path_factory.mktemp("rolling")
    _write(folder, 0, 5, sizes)
    written = 5
    point: CutPoint | None = None
    everything: list[str] = []
    for stage, world in enumerate(worlds):
        if stage and data.draw(st.booleans()):  # files land between runs, after the others in name order
            _write(folder, written, 2, sizes)
            written += 2
        taken = point.ranks if point is not None else world
        starts = [Position()] * world
        if point is not None:
            starts = [p.position or Position() for p in (rank_part(point, r, world, say=False) for r in range(world))]
        assert point is None or taken == world or all(s.prior is not None for s in starts)
        last = stage == len(worlds) - 1
        limits = [None if last else data.draw(st.one_of(st.none(), st.integers(0, 40))) for _ in range(world)]
        point, read = run_ranks(
            lambda start, part: StreamSource(str(folder), follow, poll_s=0.0, start=start, part=part), starts, limits
        )
        everything += read
    want = Counter(ln for f in sorted(folder.iterdir()) for ln in f.read_text().split())
    assert Counter(everything) == want


def test_a_prior_says_done_partial_or_new_by_the_rank_that_read_the_file():
    prior = rescaled.prior_of(
        2,
        [
            {"file": "/d/c", "offset": 7, "line": 2, "prior": None},
            {"file": "/d/b", "offset": 4, "line": 1, "prior": rescaled.prior_of(1, [{"file": "/d/e", "offset": 1, "line": 0}])},
        ],
    )
    by_name = {"/d/a": 0, "/d/b": 1, "/d/c": 0, "/d/d": 1, "/d/e": 1, "/d/f": 0}
    owner = lambda name, ranks: by_name[name] % ranks  # noqa: E731
    states = {name: rescaled.state_of(name, prior, owner) for name in by_name}
    assert states["/d/a"] == rescaled.FileState(True, by="/d/c") and states["/d/c"] == rescaled.FileState(False, 7, 2)
    assert states["/d/b"] == rescaled.FileState(False, 4, 1) and states["/d/f"] == rescaled.NEW
    # past rank 1's file, its own prior speaks: a rank of one, in /d/e at byte 1
    assert states["/d/d"] == rescaled.FileState(True, by="/d/e") and states["/d/e"] == rescaled.FileState(False, 1, 0)
    assert rescaled.last_file(prior) == "/d/e"
    last = rescaled.last_file(prior)
    assert not rescaled.passed("/d/d", last) and rescaled.passed("/d/e", last) and not rescaled.passed("", last)
    assert [p["file"] for p in rescaled.positions(prior)] == ["/d/c", "/d/b", "/d/e"]
    moved = rescaled.rebased(prior, lambda name: name.replace("/d/", "/m/"))
    assert moved is not None and rescaled.last_file(moved) == "/m/e"


def test_a_file_a_priors_rank_stood_in_gone_is_said_and_counted_once(tmp_path, caplog):
    """Retention removed, while the trainer was down, the file an old rank stood in: what it
    held past that line was not trained. Rank 0 of the new group says so (the others do not
    repeat it), as a single position's file gone is said."""
    import logging

    _write(tmp_path, 0, 3, [4])
    gone = str(tmp_path / "part-009.txt")
    prior = rescaled.prior_of(
        2, [{"file": str(tmp_path / "part-001.txt"), "offset": 6, "line": 1}, {"file": gone, "offset": 12, "line": 2}]
    )
    caplog.set_level(logging.ERROR, logger="trainer")
    first = StreamSource(str(tmp_path), False, start=Position(prior=prior), part=(0, 3))
    other = StreamSource(str(tmp_path), False, start=Position(prior=prior), part=(1, 3))
    assert first.lost == [gone] and other.lost == []
    assert f"{gone}, where the checkpoint stands (line 2, byte 12), is gone" in caplog.text


def test_a_file_a_prior_counts_as_read_that_changed_after_the_cut_is_said_and_counted(tmp_path, caplog):
    """A file landed late under an earlier name (or rewritten) while the trainer was down and
    rescaled: the prior counts it as read, so what it holds now is not trained. The rank
    whose share it is says so, naming the position that counts it as read, as a single
    position's late files are said; a file unchanged since the cut is not."""
    import logging
    import os
    import time

    _write(tmp_path, 0, 4, [4])  # dealt by place: part-000 and part-002 to rank 0 of 2, the others to rank 1
    prior = rescaled.prior_of(
        2,
        [{"file": str(tmp_path / "part-002.txt"), "offset": 6, "line": 1}, {"file": str(tmp_path / "part-003.txt"), "offset": 0}],
    )
    cut_at = time.time() - 60
    for f in tmp_path.iterdir():
        os.utime(f, (cut_at - 60, cut_at - 60))
    os.utime(tmp_path / "part-001.txt")  # changed now, after the cut: rank 1 had read it whole
    caplog.set_level(logging.ERROR, logger="trainer")
    ranks = [StreamSource(str(tmp_path), False, start=Position(prior=prior), part=(r, 3), start_at=cut_at) for r in range(3)]
    late = str(tmp_path / "part-001.txt")
    assert sorted(r for src in ranks for r in src.lost) == [late]
    assert f"{late} sorts before {tmp_path / 'part-003.txt'}, where the checkpoint stands, and changed after" in caplog.text
