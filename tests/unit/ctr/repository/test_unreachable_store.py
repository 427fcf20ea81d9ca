"""An S3 repository whose endpoint does not answer: commands say so in a line naming the
object (a botocore traceback came out before), serving starts and answers that it has no
version, and the model manager names the lease it cannot take."""

from __future__ import annotations

import socket

import pytest

from ctr.repository.s3_lease import S3Lease
from ctr.repository.versions import Repository


@pytest.fixture
def dead_endpoint(monkeypatch) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    return url


def test_a_repository_that_cannot_be_reached_is_an_os_error_naming_the_object(dead_endpoint, tmp_path):
    repo = Repository("s3://bucket/prefix", "ctr", cache=tmp_path)
    with pytest.raises(OSError, match=r"^s3://bucket/prefix/ctr/POLICY.json: Could not connect to the endpoint URL"):
        repo.policy()
    with pytest.raises(OSError, match="s3://bucket/prefix"):
        repo.versions()
    with pytest.raises(OSError, match="s3://bucket/prefix/ctr/x"):
        repo.storage.exists("ctr/x")  # not "not there": a reader would take it for a missing version


def test_serving_starts_without_its_repository_and_says_it_has_no_version(dead_endpoint, tmp_path, caplog):
    from serving.loading.watcher import ModelWatcher

    watcher = ModelWatcher(Repository("s3://bucket/prefix", "ctr", cache=tmp_path), poll_s=60)
    watcher.start()  # raised before, and the daemon died
    try:
        assert watcher.current is None and "serving nothing until it can be read" in caplog.text
    finally:
        watcher.stop()


def test_the_managers_lease_names_the_store_it_cannot_reach(dead_endpoint, tmp_path):
    repo = Repository("s3://bucket/prefix", "ctr", cache=tmp_path)
    s3 = repo.storage.s3  # type: ignore[attr-defined]
    lease = S3Lease(s3, "bucket", "prefix/ctr/.writer.lease", "model 'ctr'")
    with pytest.raises(OSError, match=r"s3://bucket/prefix/ctr/.writer.lease: the writer's lease cannot be taken"):
        lease.take({"role": "model manager"})
