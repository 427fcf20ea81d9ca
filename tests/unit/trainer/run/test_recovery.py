"""Which cut a trainer goes back to, and what it says when a shard lost its data rather than
holding an older cut."""

from __future__ import annotations

import logging

import pytest

from ctr.runtime.config import ConfigError
from ps.api import ShardStatus
from trainer.run.recovery import CutPoint, check_ranks, common_cut, planned_point


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
    with pytest.raises(ConfigError, match=r"cut 3 was taken with 2 rank\(s\), whose positions do not map to 1"):
        check_ranks(two, 1)
    with pytest.raises(ConfigError, match=r"cut 3 was taken with 1 rank\(s\)"):
        check_ranks(CutPoint(3), 2)
    check_ranks(CutPoint(0), 4)  # no cut: any group starts at its share of the stream


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
