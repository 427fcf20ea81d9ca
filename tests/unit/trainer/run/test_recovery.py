"""Which cut a trainer goes back to, and what it says when a shard lost its data rather than
holding an older cut."""

from __future__ import annotations

import logging

import pytest

from ctr.runtime.config import ConfigError
from ps.api import ShardStatus
from trainer.run.recovery import common_cut


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
