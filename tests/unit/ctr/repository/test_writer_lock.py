"""One writer of a model's versions: a second taker is refused with the holder named, the
lock goes with release (and with its process), and a dry look never needs it."""

from __future__ import annotations

import os

import pytest

from ctr.repository.writer_lock import WriterBusy, WriterLock, describe


def test_a_second_taker_is_refused_naming_the_holder_and_its_admin_address(tmp_path):
    first = WriterLock(tmp_path / "ctr", "model 'ctr' in repo")
    first.take("model manager")
    first.announce("model manager", "127.0.0.1:7000")
    second = WriterLock(tmp_path / "ctr", "model 'ctr' in repo")
    holder = rf"model 'ctr' in repo is written by another process: model manager pid {os.getpid()} on "
    with pytest.raises(WriterBusy, match=holder):
        second.take("boundless model gc")
    with pytest.raises(WriterBusy, match="send commands to it with --manager 127.0.0.1:7000"):
        second.take("boundless model gc")
    first.release()
    with second.held("boundless model gc"), pytest.raises(WriterBusy, match="boundless model gc pid"):
        first.take("model manager")
    first.take("model manager")  # held() released it
    first.release()


def test_a_holder_that_has_not_said_who_it_is_is_described_as_starting():
    assert "starting" in describe("")
    assert describe('{"role": "model manager", "pid": 5, "host": "h", "since": 0}').startswith("model manager pid 5 on h")
