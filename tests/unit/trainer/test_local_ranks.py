"""trainer.local_ranks: how many torch threads each of a host's ranks takes."""

from __future__ import annotations

import pytest

from trainer.local_ranks import torch_threads


@pytest.mark.parametrize(
    ("ranks", "cores", "named", "want"),
    [
        (2, 2, None, 1),  # two ranks on two cores: one thread each, not two spinning on one core
        (4, 16, None, 4),
        (3, 16, None, 5),
        (1, 16, None, 16),  # one rank keeps the host
        (8, 2, None, 1),  # never none
        (2, 16, "3", 3),  # the user's OMP_NUM_THREADS wins
        (2, 16, "0", 8),  # ...when it names a count
        (2, 16, "x", 8),
    ],
)
def test_ranks_share_the_cores(ranks: int, cores: int, named: str | None, want: int) -> None:
    assert torch_threads(ranks, cores, named) == want
