"""The version counter is rebuilt from what the repository holds: a version in place counts
its export as handled even when the counter file could not be written after it."""

from __future__ import annotations

from bench.serving_model import publish, requests, spec_for
from ctr.repository.versions import Repository


def test_a_version_in_place_counts_its_export_even_with_a_stale_counter_file(tmp_path):
    repo = Repository(tmp_path / "repo", "ctr")
    repo.mark_handled(f"{1:020d}")  # the counter file as it stood before version 3 went in
    publish(repo, 3, spec_for("lr", k=4, hidden=()), requests(1, items=2), keys=100, shards=1)
    counter = repo.counter()
    assert counter.handled_through == f"{3:020d}" and counter.next_version == 4
    (repo.path(5)).mkdir()  # a folder a crash left without DONE: no export of its own
    assert repo.counter().handled_through == f"{3:020d}"
