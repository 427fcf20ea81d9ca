"""Traffic split by routing key: labels take consecutive shares of [0, 1) in name order,
a key always meets one label, and the repository refuses labels it cannot honour."""

from __future__ import annotations

import pytest

from ctr.repository.schemas import LabelEntry
from ctr.repository.versions import Repository, RepositoryError
from serving.loading.watcher import STABLE, route_of, unit_of


def route_reference(key: str, shares: dict[str, float]) -> str:
    u = unit_of(key)
    edge = 0.0
    for label in sorted(shares):
        edge += shares[label]
        if u < edge:
            return label
    return STABLE


def test_keys_split_by_share_and_each_key_keeps_its_label():
    labels = {"canary": LabelEntry(version=2, share=0.2), "b": LabelEntry(version=3, share=0.1)}
    keys = [f"user-{i}" for i in range(20_000)]
    routed = [route_of(k, labels) for k in keys]
    assert routed == [route_of(k, labels) for k in keys]  # stable: the same key, the same label
    assert routed == [route_reference(k, {"canary": 0.2, "b": 0.1}) for k in keys]
    for label, share in (("canary", 0.2), ("b", 0.1), (STABLE, 0.7)):
        assert abs(routed.count(label) / len(keys) - share) < 0.015, label
    assert 0.0 <= unit_of("x") < 1.0 and unit_of("x") != unit_of("x", "salt")


def test_the_repository_refuses_labels_it_cannot_honour(tmp_path):
    from bench.serving_model import publish, requests, spec_for

    repo = Repository(tmp_path / "repo", "ctr")
    publish(repo, 1, spec_for("lr", k=4, hidden=()), requests(1, items=3), keys=100, shards=1)
    assert repo.set_label("canary", 1, share=0.6)["canary"].share == 0.6
    with pytest.raises(RepositoryError, match="add up to more than 1"):
        repo.set_label("other", 1, share=0.5)
    with pytest.raises(RepositoryError, match="no such published version"):
        repo.set_label("other", 9)
    with pytest.raises(RepositoryError, match="'stable' is the policy's version"):
        repo.set_label("stable", 1)
    assert list(repo.remove_label("canary")) == [] and repo.routing() == {}
    with pytest.raises(RepositoryError, match="no label 'canary'"):
        repo.remove_label("canary")
