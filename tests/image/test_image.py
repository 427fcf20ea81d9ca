"""The image, built and run: a PS shard, a trainer, the model manager and serving, each in a
container of the image `make image` builds (podman, host networking, the test's folder mounted
at the same path), trained on Frappe rows; a request scored through the container's serving
equals the scores computed offline from the published files, and every daemon stops on
SIGTERM. Marked `image`: `make test-image` runs it after `make image` (.ci/run does both);
plain `make test` leaves it out, since it needs the image."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from boundless.processes import Daemon
from ctr.data.batch import build_batch
from ctr.data.fields import FieldIndex
from ctr.data.formats import make_parser
from ctr.data.schema import PRESETS
from ctr.repository.versions import Repository
from serving.client import PredictClient, encode_batch
from tests.integration.offline import offline_scores
from tests.support import wait_until

IMAGE = os.environ.get("BOUNDLESS_IMAGE", "localhost/boundless:0.1.0")
CONTAINERS_CONF = Path(__file__).resolve().parents[2] / "scripts" / "image" / "containers.conf"
ENV = {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}
ROWS = 20000
STARTUP_S = 300.0  # each container compiles its numba kernels into the shared cache first


def _podman(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], env=ENV, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def image() -> str:
    if shutil.which("podman") is None:
        pytest.fail("the image test needs podman: `make image` installs it and builds the image")
    if _podman("image", "exists", IMAGE).returncode != 0:
        pytest.fail(f"no image {IMAGE}: run `make image` first")
    return IMAGE


class Containers:
    """Containers of the image on the host's network, the work folder mounted at its own path."""

    def __init__(self, image: str, work: Path) -> None:
        self.image = image
        self.work = work
        self.names: list[str] = []
        cache = work / "numba"
        cache.mkdir()
        for d in (work, cache):
            d.chmod(0o777)  # the image runs as uid 10001

    def _run_args(self, name: str) -> list[str]:
        container = f"boundless-test-{name}-{os.getpid()}"
        self.names.append(container)
        mounts = ["-v", f"{self.work}:{self.work}", "-v", f"{self.work / 'numba'}:/cache/numba"]
        return ["podman", "run", "--rm", "--name", container, "--network", "host", *mounts, self.image]

    def daemon(self, name: str, args: list[str]) -> Daemon:
        ready = self.work / f"{name}.ready.json"
        log = self.work / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [*self._run_args(name), *args, "--ready-file", str(ready)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=ENV,
                start_new_session=True,
            )
        return Daemon(name, proc, log, ready)  # SIGTERM to `podman run` reaches the daemon (sig-proxy)

    def run(self, name: str, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self._run_args(name), *args], env=ENV, capture_output=True, text=True, timeout=timeout)

    def remove_all(self) -> None:
        for container in self.names:
            _podman("rm", "--force", "--time", "5", "--ignore", container)


@pytest.fixture
def containers(image: str, tmp_path: Path) -> Iterator[Containers]:
    c = Containers(image, tmp_path)
    try:
        yield c
    finally:
        c.remove_all()


def test_the_image_trains_publishes_and_serves(containers: Containers, data_dir: Path) -> None:
    work = containers.work
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:ROWS]
    stream = work / "frappe.libfm"
    stream.write_text("\n".join(lines) + "\n")
    exports, repo_dir = work / "exports", work / "repo"

    shard = containers.daemon("ps", ["ps", "--export-root", str(exports), "--data-dir", str(work / "ps")])
    watch = ["model", "watch", "--exports", str(exports), "--repo", str(repo_dir), "--poll-s", "0.2"]
    manager = containers.daemon("modelmgr", watch)
    serving = containers.daemon("serving", ["serve", "--repo", str(repo_dir), "--poll-s", "0.2"])
    daemons = [shard, manager, serving]
    try:
        for d in daemons:
            d.wait_ready(timeout=STARTUP_S)
        out = work / "trainer.json"
        trained = containers.run(
            "trainer",
            ["train", "--source", str(stream), "--ps", shard.address, "--no-follow", "--export-dir", str(exports),
             "--model", "fm", "--k", "8", "--metrics-port", "-1", "--metrics-out", str(out), "--export-interval-s", "0.1"],
            timeout=STARTUP_S,
        )  # fmt: skip
        assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
        result = json.loads(out.read_text())
        assert result["samples"] + result["held_out_samples"] == ROWS and result["window_auc"] >= 0.85, result

        repo = Repository(repo_dir, "ctr")
        published = lambda: len(repo.processed_exports()) >= result["exports"]  # noqa: E731
        wait_until("the containers' manager publishing every export", published, 60)
        versions = repo.versions()
        assert len(versions) >= 2 and not repo.rejected()
        client = PredictClient(serving.address)
        wait_until("the container serving the latest version", lambda: client.status().version == versions[-1], 60,
                   retry_on=(grpc.RpcError,))  # fmt: skip
        fields = FieldIndex(list(client.status().fields), frozen=True)
        parse = make_parser(PRESETS["libsvm"], fields)
        batch = build_batch([parse(line) for line in lines[-200:]], fields.ids())
        pred = client.predict_encoded(encode_batch(batch))
        assert pred.version == versions[-1] and pred.scores.shape == (200,)
        np.testing.assert_allclose(pred.scores, offline_scores(repo, versions[-1], batch), atol=1e-5)
        client.close()
        for d in daemons:
            d.check()  # none died while the test ran
    finally:
        codes = [d.stop(timeout=30) for d in daemons]
    assert codes == [0, 0, 0], [(d.name, c, d.log.read_text()[-2000:]) for d, c in zip(daemons, codes, strict=True)]
