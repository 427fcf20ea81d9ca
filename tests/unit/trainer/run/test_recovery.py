"""Which cut a trainer goes back to, and what it says when a shard lost its data rather than
holding an older cut."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from ctr.runtime.config import ConfigError
from ps.api import ShardStatus
from trainer.input.source import Position
from trainer.run.recovery import CutPoint, check_ranks, common_cut, planned_point, rank_part, sample_limit
from trainer.step.progressive import ProgressiveMetrics


def _status(index: int, cuts: tuple[int, ...]) -> ShardStatus:
    return ShardStatus(index, 2, 0, 0, b"", [], committed_cut=max(cuts, default=0), cuts=cuts)


def test_a_shard_that_lost_its_data_is_named(caplog: pytest.LogCaptureFixture):
    assert common_cut([_status(0, ()), _status(1, ())]) == 0  # both new: start empty
    with pytest.raises(ConfigError, match=r"PS shard\(s\) 1 hold no checkpoint cut while the others do: their data was lost"):
        common_cut([_status(0, (4, 5)), _status(1, ())])
    with pytest.raises(ConfigError, match="no checkpoint cut in common"):
        common_cut([_status(0, (4, 5)), _status(1, (2,))])
    caplog.set_level(logging.WARNING, logger="trainer")
    assert common_cut([_status(0, (4, 5)), _status(1, (3, 4))]) == 4
    assert "shard(s) 1 hold an older cut" in caplog.text


def test_a_cut_every_shard_prepared_and_none_committed_is_taken_up_by_the_ranks_that_took_it(
    caplog: pytest.LogCaptureFixture,
):
    """The trainer killed between a cut's prepare and its commit: every shard holds cut 3,
    none committed it. Its positions are read at the restore, so a group of two is not
    refused before it (a one-rank cut's positions were assumed: exit 2, no restart)."""
    statuses = [ShardStatus(i, 2, 0, 0, b'{"position": {}}', [], committed_cut=2, cuts=(2, 3)) for i in range(2)]
    caplog.set_level(logging.WARNING, logger="trainer")
    planned = planned_point(statuses, from_start=False)
    assert (planned.cut, planned.offsets_known) == (3, False)
    assert "every PS shard prepared checkpoint cut 3 and none committed it" in caplog.text
    check_ranks(planned, 2)  # not known yet: checked after the restore
    two = CutPoint(3, parts=(CutPoint(3), CutPoint(3)))
    check_ranks(two, 2)
    with pytest.raises(ConfigError, match=r"cut 3 was taken with 2 rank\(s\), whose positions in its stream do not map"):
        check_ranks(two, 1)
    with pytest.raises(ConfigError, match=r"cut 3 was taken with 1 rank\(s\)"):
        check_ranks(CutPoint(3), 2)
    check_ranks(CutPoint(0), 4)  # no cut: any group starts at its share of the stream
    check_ranks(CutPoint(3, parts=(CutPoint(3, Position("a", 9, 2)), CutPoint(3, Position()))), 3)  # a folder's: mapped
    check_ranks(CutPoint(3, parts=(CutPoint(3, Position("s3://b/p/x", 9, 2)), CutPoint(3, Position()))), 3)  # a prefix's
    mixed = CutPoint(3, parts=(CutPoint(3, Position("s3://b/p/x", 9, 2)), CutPoint(3, Position("t", partitions={"1": 4}))))
    with pytest.raises(ConfigError, match="positions in its stream do not map to 3"):
        check_ranks(mixed, 3)


def test_a_cuts_offsets_are_read_from_the_shard_that_keeps_them():
    """Only OFFSETS_SHARD holds a cut's offsets; another shard that committed the cut first
    holds an empty blob, which must not read as a cut at the stream's start."""
    kept = b'{"position": {"file": "a", "offset": 9, "line": 2}, "samples": 5}'
    both = [
        ShardStatus(0, 2, 0, 0, kept, [], committed_cut=3, cuts=(3,)),
        ShardStatus(1, 2, 0, 0, b"", [], committed_cut=3, cuts=(3,)),
    ]
    point = planned_point(both, from_start=False)
    assert point.offsets_known and point.position is not None and point.position.offset == 9 and point.samples == 5
    behind = [ShardStatus(0, 2, 0, 0, b"", [], committed_cut=2, cuts=(2, 3)), both[1]]
    assert not planned_point(behind, from_start=False).offsets_known  # the restore will read it from shard 0


def _progress(labels: list[float]) -> dict:
    metrics = ProgressiveMetrics(100)
    metrics.update(np.asarray(labels, dtype=np.float32), np.full(len(labels), 0.25, dtype=np.float32))
    return metrics.state()


def test_a_topics_cut_maps_to_another_number_of_ranks_by_who_read_each_partition(caplog: pytest.LogCaptureFixture):
    """Partition p was read by rank p % W of the W that took the cut: its offset is that
    rank's, whatever another rank's position says (a rank that had not trained yet holds
    the offsets it was handed at the start, stale for partitions it does not read)."""
    a = Position("t[0]", 0, 40, {"0": 40, "2": 22, "1": 5}, "id1")  # "1": a stale copy, rank 1 reads it
    b = Position("t[1]", 0, 31, {"1": 31, "3": 13}, "id1")
    two = CutPoint(7, parts=(CutPoint(7, a, 60, _progress([1, 0, 0]), model={"x": 1}), CutPoint(7, b, 40, _progress([0, 1]))))
    caplog.set_level(logging.WARNING, logger="trainer")
    three = [rank_part(two, r, 3) for r in range(3)]
    for part in three:
        assert part.position is not None and part.position.partitions == {"0": 40, "2": 22, "1": 31, "3": 13}
        assert part.position.topic_id == "id1" and part.cut == 7 and part.model == {}
    assert [p.samples for p in three] == [100, 0, 0]  # rank 0 carries the samples and metrics of all
    assert three[0].progress["count"] == 5 and three[0].progress["positives"] == 2 and not three[1].progress
    assert "taken up by 3: the model's worker-side state of rank(s) 0" in caplog.text
    assert rank_part(two, 1, 2) is two.parts[1]  # the same number of ranks: each its own part


def test_a_folders_cut_maps_to_another_number_of_ranks_as_a_prior(caplog: pytest.LogCaptureFixture):
    """A folder's cut taken by W ranks, taken up by another number: every rank gets the W
    positions as its position's prior (trainer.input.rescaled), rank 0 the samples and
    metrics of all; an S3 prefix's the same way."""
    a, b = Position("/d/a", 9, 2), Position("/d/c", 3, 1)
    folder = CutPoint(7, parts=(CutPoint(7, a, 30, _progress([1, 0])), CutPoint(7, b, 20, _progress([0]))))
    caplog.set_level(logging.INFO, logger="trainer")
    three = [rank_part(folder, r, 3) for r in range(3)]
    for part in three:
        assert part.position is not None and (part.position.file, part.position.offset) == ("", 0)
        assert part.position.prior == {"ranks": 2, "positions": [vars(a), vars(b)]}
    assert [p.samples for p in three] == [50, 0, 0] and three[0].progress["count"] == 3
    assert "taken up by 3: the stream's files are dealt out anew" in caplog.text
    one = rank_part(folder, 0, 1)
    assert one.position is not None and one.position.prior is not None and one.samples == 50
    x, y = Position("s3://b/p/x", 9, 2), Position("s3://b/p/y", 3, 1)
    s3 = CutPoint(7, parts=(CutPoint(7, x), CutPoint(7, y)))
    assert rank_part(s3, 2, 3).position == Position(prior={"ranks": 2, "positions": [vars(x), vars(y)]})


def test_a_sample_limit_counts_what_a_cut_carried_when_the_ranks_change():
    """--max-samples is the group's: with the cut's own ranks each rank stops at its share
    (it carries its own samples); after a cut of 2 ranks taken up by 3, rank 0 carries all
    the cut's samples and the three share what is left of the limit. A rank dealt no
    sample stops at once (0), where no limit is None."""
    two = CutPoint(7, parts=(CutPoint(7, Position("/d/a", 9, 2), 30), CutPoint(7, Position("/d/c", 3, 1), 20)))
    assert [sample_limit(100, two, r, 2) for r in range(2)] == [50, 50]
    assert [sample_limit(100, two, r, 3) for r in range(3)] == [50 + 17, 17, 16]
    assert [sample_limit(40, two, r, 3) for r in range(3)] == [50, 0, 0]  # the cut is past the limit: nobody trains
    assert [sample_limit(1, CutPoint(0), r, 2) for r in range(2)] == [1, 0]
    assert sample_limit(0, two, 1, 3) is None
