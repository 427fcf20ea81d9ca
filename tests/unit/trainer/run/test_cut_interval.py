"""How often cuts are taken: the default takes them where every shard keeps a data directory
(before, it took none, and shards given one wrote nothing to it), never asks a cut of a
shard that cannot keep it, and says when a restart would lose what the shards hold."""

from __future__ import annotations

import pytest

from ps.api import ShardStatus
from trainer.run.cut_interval import AUTO, AUTO_INTERVAL_S, cut_interval

ADDRESSES = ["h:1", "h:2"]


def _shards(*durable: bool) -> list[ShardStatus]:
    return [ShardStatus(i, len(durable), 0, 0, b"", [], durable=d) for i, d in enumerate(durable)]


def test_auto_takes_cuts_where_every_shard_keeps_them():
    assert cut_interval(AUTO, _shards(True, True), ADDRESSES)[:2] == (
        AUTO_INTERVAL_S,
        "checkpoint cuts every 60 s (auto: every shard keeps a data directory)",
    )
    every, said, warn = cut_interval(AUTO, _shards(False, False), ADDRESSES)
    assert every == 0 and "the shards keep no data directory" in said and not warn
    every, said, warn = cut_interval(AUTO, _shards(True, False), ADDRESSES)
    assert every == 0 and warn and "shard 1 (h:2) keeps no data directory, so no cut can be whole" in said


def test_cuts_asked_of_a_shard_without_a_data_directory_are_refused_naming_it():
    assert cut_interval(30, _shards(True, True), ADDRESSES) == (30, "checkpoint cuts every 30 s", False)
    with pytest.raises(ValueError, match=r"--checkpoint-interval-s 30: shard 0 \(h:1\) keeps no data directory"):
        cut_interval(30, _shards(False, True), ADDRESSES)


def test_cuts_turned_off_beside_data_directories_are_a_warning():
    every, said, warn = cut_interval(0, _shards(True, True), ADDRESSES)
    assert every == 0 and warn and "the shards' data directories stay empty" in said
    assert cut_interval(0, _shards(False, False), ADDRESSES) == (0, "no checkpoint cuts (--checkpoint-interval-s 0)", False)
