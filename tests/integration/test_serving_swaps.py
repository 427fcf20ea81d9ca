"""Swaps under load: four clients score while the policy flips between two full versions;
no request fails, and every answer holds the scores of the version it reports."""

from __future__ import annotations

import threading
import time

import numpy as np

from bench.serving_model import publish, requests, spec_for
from boundless.processes import start
from ctr.repository.versions import Policy, Repository
from serving.client import PredictClient
from serving.request.encoding import decode, field_hash_ids
from tests.support import two_fm_versions


def test_concurrent_predict_during_swaps_never_fails_and_matches_the_reported_version(tmp_path):
    reqs = requests(3, seed=5, items=30)
    repo, expected = two_fm_versions(tmp_path / "repo", reqs, keys=30_000)
    repo.set_policy(Policy("pinned", 1))
    serving = start("serving", ["serve", "--repo", str(repo.root), "--poll-s", "0.02"], tmp_path)
    stop = threading.Event()
    failures: list[str] = []
    seen: dict[int, int] = {1: 0, 2: 0}
    try:
        serving.wait_ready()
        PredictClient(serving.address).wait_for_model()

        def client(i: int) -> None:
            c = PredictClient(serving.address)
            j = i
            while not stop.is_set():
                r = j % len(reqs)
                try:
                    got = c.predict_encoded(reqs[r])
                except Exception as e:  # noqa: BLE001 - counted: the test wants none
                    failures.append(repr(e))
                    continue
                seen[got.version] += 1
                if not np.allclose(got.scores, expected[got.version][r], atol=1e-5):
                    failures.append(f"request {r} answered as version {got.version} with other scores")
                j += 1
            c.close()

        threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for flip in range(20):
            repo.set_policy(Policy("pinned", 2 if flip % 2 == 0 else 1))
            time.sleep(0.15)
        stop.set()
        for t in threads:
            t.join(30)
        assert failures == [] and seen[1] > 10 and seen[2] > 10, (failures[:3], seen)
        assert "replaced" in serving.log.read_text()
    finally:
        stop.set()
        serving.stop()


def test_a_new_version_is_warmed_with_the_requests_served_last(tmp_path):
    from serving.loading.loader import VersionLoader
    from serving.loading.watcher import WARM_REQUESTS, ModelWatcher

    spec = spec_for("lr", k=4, hidden=())
    reqs = requests(2, seed=9, items=10)
    repo = Repository(tmp_path / "repo", "ctr")
    publish(repo, 1, spec, reqs, keys=5_000, shards=2)
    watcher = ModelWatcher(repo, 1.0)
    model = VersionLoader(repo, 1, watcher.copies).load()
    assert watcher.warm(model) == 2  # nothing served yet: the two warm-up requests (serving.loading.swap_warmup)
    hashes = field_hash_ids(tuple(spec.fields))
    for _ in range(WARM_REQUESTS + 3):
        for r in reqs:
            watcher.remember(decode(r, spec.field_count, hashes))
    assert watcher.warm(model) == WARM_REQUESTS  # the most recent ones only
    watcher.stop()


def test_a_version_with_another_field_list_refuses_requests_encoded_for_the_last_and_the_client_asks_again(tmp_path):
    """A new spec published (its fields in another order), or a rollback across one: the
    client's cached transform would put features in other fields' slots and score them
    silently. Serving refuses a request encoded for another field list or transform with
    FAILED_PRECONDITION; PredictClient asks ModelStatus again and scores as a new client."""
    import dataclasses

    import grpc
    import pytest

    reqs = requests(2, seed=5, items=10)
    spec = spec_for("ffm", k=2, hidden=())
    reordered = dataclasses.replace(spec, fields=tuple(reversed(spec.fields)))
    repo = Repository(tmp_path / "repo", "ctr")
    publish(repo, 1, spec, reqs, keys=5_000, shards=2, seed=1)
    publish(repo, 2, reordered, reqs, keys=5_000, shards=2, seed=2)
    repo.set_policy(Policy("pinned", 1))
    serving = start("serving", ["serve", "--repo", str(repo.root), "--poll-s", "0.02"], tmp_path)
    try:
        serving.wait_ready()
        client = PredictClient(serving.address)
        client.wait_for_model()
        items = [{spec.fields[0]: "a", spec.fields[3]: "b"}, {spec.fields[1]: "c", spec.fields[5]: "d"}]
        assert client.predict(items).version == 1
        stale = client.encoder.encode(items)  # encoded for version 1's field list
        repo.set_policy(Policy("pinned", 2))
        time.sleep(0.5)
        with pytest.raises(grpc.RpcError) as e:
            client.predict_encoded(stale)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION  # type: ignore[attr-defined]
        assert "field list or feature transform changed: version 2" in e.value.details()  # type: ignore[attr-defined]
        got = client.predict(items)  # asks again, encodes for version 2
        fresh = PredictClient(serving.address).predict(items)
        assert got.version == fresh.version == 2
        np.testing.assert_array_equal(got.scores, fresh.scores)
        unchecked = PredictClient(serving.address, schema=client.encoder.schema, fields=list(spec.fields))
        assert unchecked.predict(items).version == 2  # a field list given on purpose is not second-guessed
    finally:
        serving.stop()
