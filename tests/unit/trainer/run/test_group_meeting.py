"""How the ranks meet (trainer.run.group.Group): settings compared through rank 0's
rendezvous store before the group forms, and a meeting place that cannot be had named as
such rather than as a lost rank. Real gloo ranks in separate processes."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from ctr.runtime.config import ConfigError
from tests.unit.trainer.spawned_ranks import run_ranks
from trainer.run.group import Group
from trainer.run.rendezvous import GroupLost, Rendezvous


def _rank(rank: int, port: int, out: str) -> None:
    settings = {"--model": "fm" if rank == 1 else "lr", "--world-size": "2"}
    try:
        group = Group(Rendezvous(rank, 2, "127.0.0.1", port), settings, timeout_s=60)
        group.close()
        Path(out).write_text(json.dumps({"formed": True}))
    except ConfigError as e:
        Path(out).write_text(json.dumps({"refused": str(e)}))


def test_ranks_with_other_settings_are_refused_on_both_sides_before_the_group_forms(tmp_path):
    expected = "rank 1 was started with settings other than rank 0's: --model fm (rank 0: lr)"
    for out in run_ranks(_rank, tmp_path, ".json"):
        assert json.loads(out.read_text())["refused"].startswith(expected)


def test_a_taken_meeting_port_is_named_not_taken_for_a_lost_rank():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(GroupLost, match=f"cannot listen at 127.0.0.1:{port}, where the ranks meet"):
            Group(Rendezvous(0, 2, "127.0.0.1", port), {}, timeout_s=5)
