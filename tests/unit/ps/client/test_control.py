"""The control plane's checkpoint cut: the trainer's offsets (position and metrics window)
reach one shard, OFFSETS_SHARD, and every reader takes them from there."""

from __future__ import annotations

import json

from ctr.model.spec import ModelSpec
from ps.api import OFFSETS_SHARD
from ps.client import PSClient
from trainer.run.recovery import planned_point


def test_a_cuts_offsets_go_to_one_shard_and_are_read_back_from_it(tmp_path):
    client = PSClient.local(3, data_dir=tmp_path)
    client.control.declare(ModelSpec("lr").tables())
    offsets = json.dumps({"position": {"file": "a", "offset": 123, "line": 4}, "samples": 7}).encode()
    client.control.prepare(1, offsets)
    client.control.commit(1)
    statuses = client.control.status()
    assert [s.checkpoint_offsets for s in statuses] == [offsets if s.index == OFFSETS_SHARD else b"" for s in statuses]
    point = planned_point(statuses, from_start=False)
    assert (
        point.cut == 1
        and point.offsets_known
        and point.position is not None
        and point.position.offset == 123
        and point.samples == 7
    )
    client.control.restore(1, generation=1)
    assert client.control.status()[OFFSETS_SHARD].checkpoint_offsets == offsets
    client.close()
