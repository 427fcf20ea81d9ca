"""Where the ranks meet: flags over the environment torchrun and Kubernetes set."""

import pytest

from ctr.runtime.config import ConfigError
from trainer.run.rendezvous import Rendezvous, rendezvous


def test_flags_and_environment():
    assert rendezvous(-1, 0, "", {}) == Rendezvous(0, 1, "127.0.0.1", 0)  # alone
    env = {"RANK": "2", "WORLD_SIZE": "4", "MASTER_ADDR": "trainer-0.trainer", "MASTER_PORT": "29500"}
    assert rendezvous(-1, 0, "", env) == Rendezvous(2, 4, "trainer-0.trainer", 29500)
    assert rendezvous(1, 2, "10.0.0.1:7000", env) == Rendezvous(1, 2, "10.0.0.1", 7000)  # the flags win


@pytest.mark.parametrize(
    ("rank", "world", "master", "env", "message"),
    [
        (2, 2, "h:1", {}, "--rank 2 of --world-size 2: the rank must be 0..1"),
        (0, 2, "", {}, "the ranks meet at rank 0's --master HOST:PORT"),
        (0, 2, "host:port", {}, "got 'host:port'"),
        (-1, 0, "", {"WORLD_SIZE": "two"}, "RANK / WORLD_SIZE"),
    ],
)
def test_a_group_that_cannot_meet_is_refused(rank, world, master, env, message):
    with pytest.raises(ConfigError, match=message):
        rendezvous(rank, world, master, env)


def test_the_mlps_gradients_go_over_nccl_only_where_every_rank_has_a_gpu_of_its_own():
    from trainer.run.group import dense_backend  # imports torch

    assert dense_backend([("a", "cuda:0"), ("a", "cuda:1"), ("b", "cuda:0")], nccl=True) == "nccl"
    assert dense_backend([("a", "cuda:0"), ("a", "cuda:0")], nccl=True) == "gloo"  # NCCL refuses two ranks on one GPU
    assert dense_backend([("a", "cuda:0"), ("b", "cpu")], nccl=True) == "gloo"  # --device auto chose the CPU on one
    assert dense_backend([("a", "cuda:0"), ("b", "cuda:0")], nccl=False) == "gloo"  # a torch built without NCCL
    assert dense_backend([("a", "cpu")], nccl=True) == "gloo"


def test_a_rank_finds_its_gpu_among_its_hosts():
    from trainer.step.device import local_rank

    assert local_rank({"LOCAL_RANK": "3"}) == 3
    assert local_rank({}) == 0  # a pod of one rank, on its own GPUs
    assert local_rank({"LOCAL_RANK": "x"}) == 0
