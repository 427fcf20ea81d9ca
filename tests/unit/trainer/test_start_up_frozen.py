"""The trainer keeps start-up's objects out of the cyclic collector while it trains, and
hands them back afterwards, also when the run fails (an in-process caller's objects must
become collectable again)."""

from __future__ import annotations

import gc

import pytest

from trainer.daemon import start_up_frozen


def test_start_up_objects_are_frozen_while_training_and_handed_back_after() -> None:
    gc.unfreeze()
    with start_up_frozen():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError), start_up_frozen():
        raise RuntimeError("a failed run")
    assert gc.get_freeze_count() == 0
