"""The model path against damaged inputs, with a real manager and serving on loopback: every
corrupt export is rejected with its reason and counted as handled, damage inside the
repository never stops a reader, the manager and serving stay up, and serving stays on
its version. Also: a poisoned (NaN) export never reaches serving, version numbers are never
reused, and a live version that falls behind its predecessor is rolled back."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from boundless.processes import Daemon, start
from ctr.format import modelfile
from ctr.repository import holdout as holdouts
from ctr.repository.versions import DONE, Policy, Repository
from modelmgr.publish.gate import QualityGate
from modelmgr.publish.publisher import Publisher
from serving.client import PredictClient
from tests.support import wait_until


@pytest.fixture(scope="module")
def pristine(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Exports of a real run (2 in-process shards): a full one, then deltas."""
    work = tmp_path_factory.mktemp("pristine")
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:30000]
    (work / "s.libfm").write_text("\n".join(lines) + "\n")
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(work / "s.libfm"), "--no-follow", "--metrics-port", "-1"]
    cmd += ["--ps", "local", "--local-shards", "2", "--export-dir", str(work / "exports"), "--export-interval-s", "0"]
    cmd += ["--batch-size", "512"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    exports = sorted((work / "exports").iterdir())
    kinds = [json.loads((e / "export.json").read_text())["kind"] for e in exports]
    assert kinds[0] == "full" and kinds.count("delta") >= 3, kinds
    return exports


class Exports:
    """Copies of pristine exports under new ids (in time order), damaged on request."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.base = ""  # the id of the last good full export

    def add(
        self,
        src: Path,
        damage: Callable[[Path, dict[str, Any]], Any] | None = None,
        previous: str | None = None,
        export_id: str | None = None,
    ) -> str:
        new = export_id or f"{time.time_ns():020d}"
        dst = self.root / new
        # READY is left out of the copy (the manager, polling, may see the folder mid-copy) and
        # written last, as an exporter does
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("READY"))
        m = json.loads((dst / "export.json").read_text())
        m["id"] = new
        if m["kind"] == "delta":
            m["previous"] = previous
            m["base"] = self.base
        elif damage is None:
            self.base = new
        doc: Any = m
        if damage is not None:
            doc = damage(dst, m)
            doc = m if doc is None else doc
        (dst / "export.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
        (dst / "READY").write_text(new)
        return new


def refresh(folder: Path, m: dict[str, Any], name: str) -> None:
    """export.json tells the truth about a file changed on purpose."""
    for f in m["files"]:
        if f["name"] == name:
            f["size"] = (folder / name).stat().st_size
            f["sha256"] = modelfile.sha256_file(folder / name)


def sparse_file(m: dict[str, Any], shard: int = 0) -> str:
    return next(f["name"] for f in m["files"] if f["role"] != "dense" and f["shard"] == shard)


def _rewrite_image(folder: Path, m: dict[str, Any], change: Callable[[np.ndarray], np.ndarray]) -> None:
    name = sparse_file(m)
    image = modelfile.load_image(folder / name, mmap=False)
    keys, slots = image.items()
    rows = change(image.gather(slots).copy())
    modelfile.write_image(folder / name, keys, rows)
    refresh(folder, m, name)


def _nan(folder: Path, m: dict[str, Any]) -> None:
    def poison(rows: np.ndarray) -> np.ndarray:
        rows[3, 0] = np.nan  # a pushed gradient of 3e38 left a weight NaN
        return rows

    _rewrite_image(folder, m, poison)


def _truncate(folder: Path, m: dict[str, Any]) -> None:
    p = folder / sparse_file(m)
    p.write_bytes(p.read_bytes()[:-100])


def _flip(folder: Path, m: dict[str, Any]) -> None:
    p = folder / sparse_file(m)
    raw = bytearray(p.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    p.write_bytes(bytes(raw))


def _missing_shard(folder: Path, m: dict[str, Any]) -> None:
    name = sparse_file(m, 1)
    (folder / name).unlink()
    m["files"] = [f for f in m["files"] if f["name"] != name]


def _renamed_shard(folder: Path, m: dict[str, Any]) -> None:
    name = sparse_file(m)
    (folder / name).rename(folder / "shardX-sparse.image")
    for f in m["files"]:
        if f["name"] == name:
            f["name"], f["shard"] = "shardX-sparse.image", None


def _garbage_holdout(folder: Path, m: dict[str, Any]) -> None:
    (folder / "holdout.npz").write_bytes(b"not a zip at all")
    m["holdout"].update(size=16, sha256=modelfile.sha256_file(folder / "holdout.npz"))


def _no_holdout(folder: Path, m: dict[str, Any]) -> None:
    m.pop("holdout")


BAD_EXPORTS: list[tuple[str, Callable[[Path, dict[str, Any]], Any], str]] = [
    ("export.json is a list", lambda f, m: [m], "a JSON object is needed"),
    ("files lists a bare name", lambda f, m: {**m, "files": ["x"]}, "files.0"),
    ("metrics is a string", lambda f, m: {**m, "metrics": "abc"}, "metrics"),
    ("garbage export.json", lambda f, m: "{nope", "not JSON"),
    ("a shard file named shardX", _renamed_shard, "not a shard file name"),
    ("a truncated file", _truncate, "bytes, export.json says"),
    ("a flipped byte", _flip, "sha256 does not match"),
    ("a missing shard", _missing_shard, "shards [0] of 2"),
    ("a size that disagrees", lambda f, m: m["files"][0].update(size=m["files"][0]["size"] + 1), "export.json says"),
    ("a NaN weight", _nan, "NaN or infinite"),
    ("a garbage holdout", _garbage_holdout, "not a holdout file"),
    ("no holdout", _no_holdout, "no holdout"),
    ("a folder with a slash in a file name", lambda f, m: m["files"][0].update(name="../x"), "files.0.name"),
]


def _wait(what: str, predicate: Callable[[], bool], daemons: list[Daemon], timeout: float = 30) -> None:
    wait_until(what, predicate, timeout, alive=daemons)  # neither the manager nor serving may die


def _cli(repo: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "boundless", "model", *args, "--repo", str(repo)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_corrupt_exports_and_a_damaged_repository_never_stop_the_manager_or_serving(pristine, tmp_path):
    exports, repo_dir = Exports(tmp_path / "exports"), tmp_path / "repo"
    repo = Repository(repo_dir, "ctr")
    manager = start(
        "modelmgr", ["model", "watch", "--exports", str(exports.root), "--repo", str(repo_dir), "--poll-s", "0.1"], tmp_path
    )
    serving = start("serving", ["serve", "--repo", str(repo_dir), "--poll-s", "0.1"], tmp_path)
    daemons = [manager, serving]
    try:
        manager.wait_ready()
        serving.wait_ready()
        client = PredictClient(serving.address)
        full = exports.add(pristine[0])
        _wait("the full export published", lambda: repo.versions() == [1], daemons)
        _wait("serving version 1", lambda: _served(client) == 1, daemons)

        outcomes = {}
        for what, damage, reason in BAD_EXPORTS:
            bad = exports.add(pristine[0], damage)
            _wait(f"{what}: handled", functools.partial(_handled, repo, bad), daemons)
            got = next(r["reason"] for r in repo.rejected() if r["export_id"] == bad)
            assert reason in got, (what, got)
            outcomes[what] = got
        delta = exports.add(pristine[1], previous=full)
        _wait("a good delta published", lambda: len(repo.versions()) == 2, daemons)
        dup = exports.add(pristine[2], previous=full)  # follows the full export again
        stray = exports.add(pristine[2], previous="01000000000000000000")
        _wait("lineage checked", lambda: {dup, stray} <= {r["export_id"] for r in repo.rejected()}, daemons)
        reasons = {r["export_id"]: r["reason"] for r in repo.rejected()}
        assert "already follows" in reasons[dup] and "was not published" in reasons[stray]
        assert repo.versions() == [1, 2] and not {full, delta} & set(reasons)

        # damage inside the repository
        (repo_dir / "ctr" / "00000099").mkdir()  # a version folder a crash left without DONE
        (repo_dir / "ctr" / "POLICY.json").write_text("[garbage")
        (repo_dir / "ctr" / "COUNTER.json").write_text('{"next_version": "many"}')
        listing = _cli(repo_dir, "list", "--json")
        assert listing.returncode == 0 and "ignored" in json.loads(listing.stdout)["policy_reason"], listing.stderr
        third = exports.add(pristine[2], previous=delta)
        _wait("publishing goes on", lambda: third in repo.processed_exports() and len(repo.versions()) == 3, daemons)
        assert repo.versions()[-1] == 100  # never a number a folder on disk ever had
        _wait("serving the newest", lambda: _served(client) == 100, daemons)
        # a rollback reports what serving loaded, not what the policy says
        back = _cli(repo_dir, "rollback", "--serving", serving.address)
        assert back.returncode == 0 and "every replica serves version 2" in back.stdout, back.stdout + back.stderr
        status = _cli(repo_dir, "status", "--serving", serving.address, "--json")
        assert json.loads(status.stdout)["replicas"][0]["version"] == 2
        assert _cli(repo_dir, "unpin", "--serving", serving.address).returncode == 0 and _served(client) == 100
        shown = json.loads(_cli(repo_dir, "show", "100", "--json").stdout)
        assert shown["served"] and shown["evaluation"]["candidate"]["samples"] >= 1000
        drift = json.loads(_cli(repo_dir, "diff", "2", "100", "--json").stdout)
        assert drift["rows_changed"] > 0 and drift["weight_drift_l2"] > 0

        # a damaged manifest makes its version unservable, never a reader's crash
        (repo_dir / "ctr" / "00000001" / "manifest.json").write_text('{"version": 1}')
        listing = _cli(repo_dir, "list")
        assert listing.returncode == 0 and "broken" in listing.stdout, listing.stdout + listing.stderr
        assert _cli(repo_dir, "pin", "1").returncode == 2  # refused: version 1 is broken
        # the image serving maps is its own copy: truncating the repository's does nothing
        image = repo_dir / "ctr" / "00000100" / "shard0-sparse.delta"
        image.write_bytes(image.read_bytes()[:80])
        assert _served(client) == 100
        # deleted versions are not published again, and their numbers are not reused
        shutil.rmtree(repo_dir / "ctr" / "00000002")
        fourth = exports.add(pristine[0])
        _wait("a new full export published", lambda: fourth in repo.processed_exports(), daemons)
        assert repo.versions()[-1] == 101 and 2 not in repo.versions()
        _wait("serving the new full version", lambda: _served(client) == 101, daemons)
        for d in daemons:
            d.check()
        (tmp_path / "outcomes.json").write_text(json.dumps(outcomes, indent=1))
        client.close()
    finally:
        for d in daemons:
            d.stop()


def _handled(repo: Repository, export_id: str) -> bool:
    return export_id in {r["export_id"] for r in repo.rejected()}


def _served(client: PredictClient) -> int | None:
    try:
        return int(client.status().version)
    except Exception:  # noqa: BLE001 - nothing loaded yet
        return None


def _noise(folder: Path, m: dict[str, Any]) -> None:
    """A degraded model: the delta's rows replaced by noise (a diverged trainer, say)."""
    for shard in (0, 1):
        name = sparse_file(m, shard)
        d = modelfile.read_delta(folder / name)
        rows = np.random.default_rng(shard).normal(0, 3, size=d.rows.shape).astype(np.float32)
        modelfile.write_delta(folder / name, d.keys, rows, d.tombstones)
        refresh(folder, m, name)


def test_the_gate_refuses_a_degraded_model_and_a_live_one_that_falls_behind_is_rolled_back(pristine, tmp_path):
    exports, repo = Exports(tmp_path / "exports"), Repository(tmp_path / "repo", "ctr")
    strict = Publisher(repo, exports.root, QualityGate())
    full = exports.add(pristine[0])
    good = exports.add(pristine[1], previous=full)
    assert strict.poll() == [1, 2]
    noisy = exports.add(pristine[2], _noise, previous=good)
    assert strict.poll() == []
    reason = next(r for r in repo.rejected() if r["export_id"] == noisy)
    evidence = reason["evidence"]
    assert reason["reason"].startswith("gate: ") and evidence["live"]["version"] == 2
    assert evidence["candidate"]["auc"] < evidence["live"]["auc"] - 0.02 and evidence["candidate"]["logloss"] > 1

    # a lenient gate lets the noise through; the next holdout shows it behind version 2
    lenient = Publisher(
        repo, exports.root, QualityGate(max_auc_drop=1.0, calibration_low=0, calibration_high=1e9, max_logloss=1e9)
    )
    noisy = exports.add(pristine[2], _noise, previous=good)
    assert lenient.poll() == [3] and repo.target() == 3
    exports.add(pristine[3], previous=noisy)
    lenient.poll()
    policy = repo.policy()
    assert policy.describe() == "pinned 2" and "auto-rollback: version 3" in policy.reason
    evidence = [json.loads(p.read_text()) for p in (repo.dir / "rollbacks").iterdir()]
    assert evidence and evidence[0]["live"]["auc"] < evidence[0]["predecessor"]["auc"] - 0.01
    # well past the holdout's noise: the paired DeLong error of the difference, 3 of them by default
    drop = evidence[0]["predecessor"]["auc"] - evidence[0]["live"]["auc"]
    assert evidence[0]["difference_se"] > 0 and drop >= 3 * evidence[0]["difference_se"]
    assert "standard errors on the holdout" in policy.reason
    listing = _cli(repo.root, "list")
    assert "auto-rollback" in listing.stdout


def _empty_holdout(folder: Path, m: dict[str, Any]) -> None:
    """The export's own holdout holds no samples (the stream stopped before it came)."""
    empty = holdouts.head(holdouts.read(folder / m["holdout"]["name"]), 0)
    holdouts.write_batches(folder / m["holdout"]["name"], [empty])
    h = m["holdout"]
    h["samples"] = h["seen"] = 0
    h["size"] = (folder / h["name"]).stat().st_size
    h["sha256"] = modelfile.sha256_file(folder / h["name"])


def _mostly_seen(folder: Path, m: dict[str, Any]) -> None:
    """An older trainer's holdout: its last samples a top-up of samples the model trained on."""
    m["holdout"]["seen"] = m["holdout"]["samples"] - 500


def test_an_export_is_judged_only_on_samples_it_has_not_trained_on(pristine, tmp_path):
    exports, repo = Exports(tmp_path / "exports"), Repository(tmp_path / "repo", "ctr")
    publisher = Publisher(repo, exports.root, QualityGate())
    full = exports.add(pristine[0])
    assert publisher.poll() == [1]
    exports.add(pristine[1], _empty_holdout, previous=full)
    assert publisher.poll() == []  # nothing to judge on: earlier holdouts were trained on since
    assert "0 holdout samples the candidate has not trained on" in repo.rejected()[0]["reason"]

    exports, repo = Exports(tmp_path / "exports2"), Repository(tmp_path / "repo2", "ctr")
    publisher = Publisher(repo, exports.root, QualityGate(min_samples=400))
    full = exports.add(pristine[0])
    exports.add(pristine[1], _mostly_seen, previous=full)
    assert publisher.poll() == [1, 2]
    evidence = repo.manifest(2)["evaluation"]["holdout"]
    assert evidence["samples"] == 500 and evidence["excluded_seen"] > 0
    assert repo.manifest(2)["evaluation"]["candidate"]["samples"] == 500


def test_compaction_is_bit_exact_and_retention_keeps_what_serving_needs(pristine, tmp_path):
    from modelmgr.publish.evaluate import load_published, scores

    exports, repo = Exports(tmp_path / "exports"), Repository(tmp_path / "repo", "ctr")
    publisher = Publisher(repo, exports.root, QualityGate(max_auc_drop=1.0), compact_after=3, keep_full=0)
    previous = exports.add(pristine[0])
    for src in pristine[1:4]:
        previous = exports.add(src, previous=previous)
    assert publisher.poll() == [1, 2, 3, 4, 5]  # 5: versions 1..4 compacted
    compacted = repo.manifest(5)
    assert compacted["kind"] == "full" and compacted["compacts"] == [1, 2, 3, 4]

    replayed, folded = load_published(repo, 4), load_published(repo, 5)
    from ctr.repository.holdout import read

    batch = read(pristine[4] / "holdout.npz")
    np.testing.assert_array_equal(scores(folded, batch), scores(replayed, batch))
    keys = np.unique(batch.keys)
    np.testing.assert_array_equal(folded.rows(keys), replayed.rows(keys))
    assert folded.keys == replayed.overlay.size + sum(i.size for i in replayed.images) - _shared(replayed)

    # the next delta follows the compacted version; retention (one full version) then
    # removes the folded chain, never the version served
    exports.add(pristine[4], previous=previous)
    assert publisher.poll() == [6] and repo.manifest(6)["base_version"] == 5
    repo.set_policy(Policy("pinned", 2))
    gc = _cli(repo.root, "gc", "--keep-full", "1")
    assert gc.returncode == 0 and repo.versions() == [1, 2, 5, 6], gc.stdout + gc.stderr  # 2 is pinned: its chain stays
    repo.set_policy(Policy("latest"))
    assert _cli(repo.root, "gc", "--keep-full", "1").returncode == 0 and repo.versions() == [5, 6]
    assert repo.target() == 6


def _shared(model) -> int:  # type: ignore[no-untyped-def]
    """Keys both the overlay and an image hold (counted twice by a sum of sizes)."""
    keys, _ = model.overlay.items()
    return int(sum((image.find(keys) >= 0).sum() for image in model.images))


def test_twelve_shards_serve_the_scores_computed_offline(data_dir, tmp_path):
    """Shard files ordered by the manifest's index, not by name (shard10 sorts before shard2)."""
    from ctr.repository.holdout import read
    from modelmgr.publish.evaluate import load_published, scores
    from tests.integration.offline import offline_scores

    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:8000]
    (tmp_path / "s.libfm").write_text("\n".join(lines) + "\n")
    cmd = [
        sys.executable,
        "-m",
        "boundless",
        "train",
        "--source",
        str(tmp_path / "s.libfm"),
        "--no-follow",
        "--metrics-port",
        "-1",
    ]
    cmd += ["--ps", "local", "--local-shards", "12", "--export-dir", str(tmp_path / "exports"), "--export-interval-s", "0"]
    cmd += ["--model", "fm", "--k", "4"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    repo = Repository(tmp_path / "repo", "ctr")
    published = Publisher(repo, tmp_path / "exports", QualityGate(max_auc_drop=1.0)).poll()
    v = published[-1]
    assert repo.manifest(v)["shard_count"] == 12
    model = load_published(repo, v)
    batch = read(sorted((tmp_path / "exports").iterdir())[-1] / "holdout.npz")
    np.testing.assert_allclose(scores(model, batch), offline_scores(repo, v, batch), atol=1e-5)


def test_an_s3_repository_publishes_serves_rolls_back_and_collects(pristine, tmp_path):
    """The manager, serving and the CLI on `s3://models/prod` (a real SeaweedFS server)."""
    from tests.integration.s3_server import s3_server

    with s3_server(tmp_path / "weed") as env:
        url = "s3://models/prod"
        exports = Exports(tmp_path / "exports")
        repo = Repository(url, "ctr", cache=tmp_path / "reader-cache")
        watch = [
            "model",
            "watch",
            "--exports",
            str(exports.root),
            "--repo",
            url,
            "--poll-s",
            "0.1",
            "--keep-full",
            "1",
            "--max-auc-drop",
            "1",
        ]
        manager = start("modelmgr", watch, tmp_path, env)
        serving = start("serving", ["serve", "--repo", url, "--poll-s", "0.1"], tmp_path, env)
        daemons = [manager, serving]
        try:
            manager.wait_ready()
            serving.wait_ready()
            client = PredictClient(serving.address)
            full = exports.add(pristine[0])
            exports.add(pristine[1], previous=full)
            _wait("two versions published on S3", lambda: repo.versions() == [1, 2], daemons)
            _wait("serving version 2 from S3", lambda: _served(client) == 2, daemons)
            # a version without DONE (an upload cut short) is invisible to every reader
            repo.storage.write_bytes("ctr/00000050/manifest.json", b"{}")
            assert repo.versions() == [1, 2] and repo.target() == 2

            def cli(*args: str) -> subprocess.CompletedProcess[str]:
                cmd = [sys.executable, "-m", "boundless", "model", *args, "--repo", url]
                return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={**os.environ, **env})

            back = cli("rollback", "--serving", serving.address)
            assert back.returncode == 0 and "every replica serves version 1" in back.stdout, back.stdout + back.stderr
            assert cli("unpin", "--serving", serving.address).returncode == 0
            listing = json.loads(cli("list", "--json").stdout)
            assert [r["version"] for r in listing["versions"]] == [1, 2]
            exports.add(pristine[0])  # a new full export: retention (one full version) drops 1 and 2
            _wait("the new full version, and retention", lambda: repo.versions() == [51], daemons)
            _wait("serving version 51", lambda: _served(client) == 51, daemons)
            assert not repo.storage.exists("ctr/00000001/DONE")
            client.close()
        finally:
            for d in daemons:
                d.stop()


def test_serving_answers_while_its_s3_repository_hangs_and_the_manager_publishes_after(pristine, tmp_path):
    """An S3 endpoint that stops answering (SIGSTOP: connections accepted, nothing read):
    serving goes on scoring with what it loaded and answers ModelStatus from the policy its
    watcher last read. Before, ModelStatus read the policy from S3 on the call's thread, so a
    few status calls (a client refreshing its transform, a probe) held all four of the
    server's threads for boto's minute-long timeouts, and Predict stopped being answered.
    The manager publishes the export that came during the outage once S3 answers again."""
    import concurrent.futures
    import signal

    from tests.integration.s3_server import s3_server

    with s3_server(tmp_path / "weed") as env:
        url = "s3://models/prod"
        exports = Exports(tmp_path / "exports")
        repo = Repository(url, "ctr", cache=tmp_path / "reader-cache")
        watch = ["model", "watch", "--exports", str(exports.root), "--repo", url, "--poll-s", "0.1", "--max-auc-drop", "1"]
        manager = start("modelmgr", watch, tmp_path, env)
        serving = start("serving", ["serve", "--repo", url, "--poll-s", "0.1"], tmp_path, env)
        daemons = [manager, serving]
        weed: list[int] = []
        try:
            manager.wait_ready()
            serving.wait_ready()
            client = PredictClient(serving.address, timeout=3.0)
            full = exports.add(pristine[0])
            _wait("version 1 served", lambda: _served(client) == 1, daemons)
            items = [{"1": "x"}, {"2": "y"}]
            want = client.predict(items=items).scores
            found = subprocess.run(["pgrep", "-f", str(tmp_path / "weed")], capture_output=True, text=True).stdout
            weed = [int(pid) for pid in found.split()]
            assert weed
            for pid in weed:
                os.kill(pid, signal.SIGSTOP)
            exports.add(pristine[1], previous=full)
            time.sleep(1.0)  # the watcher's next look at S3 hangs now
            with concurrent.futures.ThreadPoolExecutor(8) as pool:  # twice the server's threads
                statuses = list(pool.map(lambda _: _served(client), range(8)))
            assert statuses == [1] * 8  # each within its 3 s deadline
            for _ in range(5):
                assert np.array_equal(client.predict(items=items).scores, want)
                time.sleep(0.5)
            for pid in weed:
                os.kill(pid, signal.SIGCONT)
            weed = []
            _wait("version 2 published after the outage", lambda: repo.versions() == [1, 2], daemons, timeout=120)
            _wait("version 2 served", lambda: _served(client) == 2, daemons, timeout=120)
            client.close()
        finally:
            for pid in weed:
                os.kill(pid, signal.SIGCONT)  # the server's teardown needs it running
            for d in daemons:
                d.stop()


def _manager_behind_proxy(env: dict[str, str], tmp_path: Path, *args: str) -> tuple[Any, Exports, Repository, Daemon]:
    """A model manager on s3://models/prod whose S3 calls go through a proxy that can go down
    (bench.slow_proxy), botocore's retries off; its exports folder, and the repository as a
    reader sees it straight from the server."""
    from bench.slow_proxy import SlowProxy

    proxy = SlowProxy(env["AWS_ENDPOINT_URL"].rsplit("/", 1)[-1], 0.0)
    through = {**env, "AWS_ENDPOINT_URL": f"http://{proxy.address}", "AWS_MAX_ATTEMPTS": "1"}
    url = "s3://models/prod"
    exports = Exports(tmp_path / "exports")
    repo = Repository(url, "ctr", cache=tmp_path / "reader-cache")
    watch = ["model", "watch", "--exports", str(exports.root), "--repo", url, "--poll-s", "0.1", "--max-auc-drop", "1"]
    return proxy, exports, repo, start("modelmgr", [*watch, *args], tmp_path, through)


def test_an_export_published_while_s3_goes_down_is_published_once_it_answers(pristine, tmp_path):
    """S3 (or the link to it) goes down while the manager publishes a delta: connections
    refused, not hung. The export waits and is published once S3 answers, said once and
    again when it goes through, not at every poll. Before, the manager rejected it
    ("internal: OSError") and recorded the rejection, so the version was lost and every
    delta after it refused until the next full export; a version it could not read to
    compare with was taken for a damaged one, and the gate judged without it."""
    import boto3

    from tests.integration.s3_server import s3_server

    with s3_server(tmp_path / "weed") as env:
        proxy, exports, repo, manager = _manager_behind_proxy(env, tmp_path)
        try:
            manager.wait_ready()
            full = exports.add(pristine[0])
            _wait("version 1 published", lambda: repo.versions() == [1], [manager])
            proxy.delay_s = 0.3  # each S3 call of the next publish takes 0.3 s
            proxy.set_down(True)
            proxy.set_down(False)
            exports.add(pristine[1], previous=full)
            direct = boto3.client(
                "s3",
                endpoint_url=env["AWS_ENDPOINT_URL"],
                region_name=env["AWS_DEFAULT_REGION"],
                aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            )
            # S3 goes down as version 2's first file lands: the publish is midway, its DONE not written
            _wait(
                "version 2's first file",
                lambda: direct.list_objects_v2(Bucket="models", Prefix="prod/ctr/00000002/").get("KeyCount", 0) > 0,
                [manager],
                timeout=60,
            )
            proxy.set_down(True)
            time.sleep(6.0)
            proxy.delay_s = 0.0
            proxy.set_down(False)
            # the half-written version's files are removed; its number may stay used (SeaweedFS
            # keeps the emptied folder, and a number is never given twice)
            _wait("the delta published after the outage", lambda: len(repo.versions()) == 2, [manager], timeout=60)
            time.sleep(1.0)
            assert len(repo.versions()) == 2, repo.versions()  # published once, not again at a retry
        finally:
            manager.stop()
            proxy.close()
        log = manager.log.read_text()
        delta = repo.versions()[-1]
        assert repo.manifest_model(delta).kind == "delta" and repo.version_of_export(repo.manifest_model(delta).export_id)
        keys = [o["Key"] for o in direct.list_objects_v2(Bucket="models", Prefix="prod/ctr/").get("Contents", [])]
        folders = {k.split("/")[2] for k in keys if k.count("/") >= 3 and k.split("/")[2].isdigit()}
        assert all(f"prod/ctr/{f}/{DONE}" in keys for f in folders), ("a half-written version is left", sorted(keys))
        assert repo.rejected() == [], repo.rejected()
        assert log.count("not published, the repository cannot be written") == 1, log[-3000:]
        assert "the repository is written again after" in log, log[-3000:]


def test_a_manager_whose_s3_lease_lapses_in_an_outage_takes_it_again_and_publishes(pristine, tmp_path):
    """S3 away for longer than two thirds of the writer's lease (--writer-lease-s 3): the
    manager gives the lease up, as it must (a contender may take it after a whole term),
    writes nothing meanwhile, takes it again once S3 answers (it is still its own) and
    publishes the export that came during the outage. Before, it exited with code 1 ("this
    manager stops") at the first outage past 20 s at the default term: without a
    supervisor that restarts it, nothing was published again."""
    from tests.integration.s3_server import s3_server

    with s3_server(tmp_path / "weed") as env:
        proxy, exports, repo, manager = _manager_behind_proxy(env, tmp_path, "--writer-lease-s", "3")
        try:
            manager.wait_ready()
            full = exports.add(pristine[0])
            _wait("version 1 published", lambda: repo.versions() == [1], [manager])
            proxy.set_down(True)
            exports.add(pristine[1], previous=full)
            time.sleep(6.0)  # twice the term: the lease lapses
            assert manager.proc.poll() is None, manager.log.read_text()[-3000:]
            assert repo.versions() == [1]
            proxy.set_down(False)
            _wait("version 2 published after the outage", lambda: repo.versions() == [1, 2], [manager], timeout=60)
        finally:
            manager.stop()
            proxy.close()
        log = manager.log.read_text()
        assert "publishing pauses until the lease is taken again" in log, log[-3000:]
        assert "the lease is held again; publishing goes on" in log, log[-3000:]


@pytest.mark.parametrize("relisted", [False, True], ids=["next-poll", "after-a-relisting"])
def test_an_export_whose_version_landed_before_the_repository_failed_is_not_published_twice(pristine, tmp_path, relisted):
    """The repository fails after a version is in place, before the counter says its export
    is handled (S3 gone between DONE and COUNTER.json): the export is left for the next
    scan, which finds its version and only records it. Before, the retry published it a
    second time, or, after a relisting, rejected it as out of order with a record saying
    so, though it was served."""
    from ctr.repository.storage import StorageUnreachable

    exports = Exports(tmp_path / "exports")
    repo = Repository(tmp_path / "repo", "ctr")
    pub = Publisher(repo, exports.root, QualityGate(min_samples=1, max_auc_drop=1.0))
    real = repo.record_published
    failures: list[str] = []

    def record_once_failing(version: int, export_id: str) -> None:
        if not failures:
            failures.append(export_id)
            raise StorageUnreachable(f"{repo.storage.url}/COUNTER.json: connection closed")
        real(version, export_id)

    repo.record_published = record_once_failing  # type: ignore[method-assign]
    full = exports.add(pristine[0])
    assert pub.poll() == [] and repo.versions() == [1] and failures == [full]
    if relisted:
        os.utime(exports.root, ns=(time.time_ns(), time.time_ns() + 10**9))  # the folder listed anew
    assert pub.poll() == ([] if relisted else [1])  # relisted, the counter finds its version: handled
    assert repo.versions() == [1] and repo.rejected() == []
    assert repo.counter().handled_through == full
    exports.add(pristine[1], previous=full)
    assert pub.poll() == [2] and repo.versions() == [1, 2]


def test_serving_applies_deltas_into_a_double_buffered_overlay(pristine, tmp_path):
    """Each delta lands in the overlay of the version before the current one (no request
    uses it any more): the same rows as a version built from scratch, without copying."""
    from ctr.repository.holdout import read
    from modelmgr.publish.evaluate import load_published
    from serving.loading.watcher import ModelWatcher

    exports, repo = Exports(tmp_path / "exports"), Repository(tmp_path / "repo", "ctr")
    previous = exports.add(pristine[0])
    for src in pristine[1:4]:
        previous = exports.add(src, previous=previous)
    assert Publisher(repo, exports.root, QualityGate(max_auc_drop=1.0)).poll() == [1, 2, 3, 4]
    keys = np.unique(np.concatenate([read(p / "holdout.npz").keys for p in pristine[:5]]))
    watcher = ModelWatcher(repo, 1.0)
    overlays: list[Any] = []
    for v in (1, 2, 3, 4):
        repo.set_policy(Policy("pinned", v))
        if v == 4:  # a request still scores with version 2 (retired): its overlay is not touched
            retired = watcher._retired
            assert retired is not None and retired.version == 2
            retired.active += 1
            watcher.refresh()
            assert retired.overlay is overlays[1]
        else:
            with watcher.use() as using:  # requests on the current version do not hold the spare back
                watcher.refresh()
            assert using is None or using.version == v - 1
        model = watcher.current
        assert model is not None and model.version == v
        overlays.append(model.overlay)
        fresh = load_published(repo, v)
        np.testing.assert_array_equal(model.rows(keys), fresh.rows(keys))
    assert overlays[2] is overlays[0]  # version 3 took version 1's overlay: a double buffer
    assert all(overlays[3] is not o for o in overlays[:3])  # version 4 got a copy instead
    watcher.stop()


def test_the_manager_tells_serving_at_once_when_it_publishes(pristine, tmp_path):
    """Serving polls every 600 s here: only the manager's Refresh can make it switch within
    the waits below (generous, for a loaded machine, and still far below a poll)."""
    exports, repo_dir = Exports(tmp_path / "exports"), tmp_path / "repo"
    serving = start("serving", ["serve", "--repo", str(repo_dir), "--poll-s", "600"], tmp_path)
    serving.wait_ready()
    watch = ["model", "watch", "--exports", str(exports.root), "--repo", str(repo_dir), "--poll-s", "0.1"]
    manager = start("modelmgr", [*watch, "--notify", serving.address, "--max-auc-drop", "1"], tmp_path)
    daemons = [manager, serving]
    try:
        manager.wait_ready()
        client = PredictClient(serving.address)
        full = exports.add(pristine[0])
        _wait("serving version 1 without polling", lambda: _served(client) == 1, daemons, timeout=120)
        exports.add(pristine[1], previous=full)
        _wait("serving version 2 without polling", lambda: _served(client) == 2, daemons, timeout=120)
        client.close()
    finally:
        for d in daemons:
            d.stop()


def _two_chains(pristine, tmp_path) -> Repository:
    """Versions 1-4 published: full 1 with its delta 2, full 3 with its delta 4; no retention
    of the publisher's own and no auto-rollback."""
    exports, repo = Exports(tmp_path / "exports"), Repository(tmp_path / "repo", "ctr")
    lenient = QualityGate(max_auc_drop=1.0, rollback_auc_drop=1.0)  # no auto-rollback pins a version here
    publisher = Publisher(repo, exports.root, lenient, compact_after=0, keep_full=0)
    full = exports.add(pristine[0])
    exports.add(pristine[1], previous=full)
    full2 = exports.add(pristine[0])
    exports.add(pristine[1], previous=full2)
    assert publisher.poll() == [1, 2, 3, 4]
    return repo


def test_retention_cut_short_never_leaves_a_version_that_looks_servable(pristine, tmp_path, monkeypatch):
    repo = _two_chains(pristine, tmp_path)

    # a file gone from a version (a deletion cut short by an older gc, a hand): list, pin and
    # serving see it, instead of a version that looks whole and does not load
    victim = next(f["name"] for f in repo.manifest(1)["files"] if f["role"] != "dense")
    (repo.path(1) / victim).unlink()
    assert "listed but missing" in str(repo.broken(1)) and "listed but missing" in str(repo.broken(2))
    refused = _cli(repo.root, "pin", "2")
    assert refused.returncode != 0 and "listed but missing" in refused.stdout + refused.stderr
    assert "listed but missing" in _cli(repo.root, "list").stdout

    # gc takes a version out of what readers see before it deletes it: cut short, nothing half-served
    real = repo.storage.delete_tree

    def cut_short(prefix: str) -> None:
        first = next((p for p in sorted((repo.storage.local_root / prefix).iterdir()) if p.is_file()), None)  # type: ignore[operator]
        if first is not None:
            first.unlink()
        raise OSError("killed mid-delete")

    monkeypatch.setattr(repo.storage, "delete_tree", cut_short)
    with pytest.raises(OSError):
        repo.gc(keep_full=1)
    assert 1 not in repo.versions()  # DONE went first: no reader lists it, no pin takes it
    monkeypatch.setattr(repo.storage, "delete_tree", real)
    repo.gc(keep_full=1)
    assert repo.versions() == [3, 4] and not (repo.dir / "00000001").exists() and not (repo.dir / "00000002").exists()


def test_retention_keeps_the_versions_labels_name(pristine, tmp_path):
    """A canary or a shadow on an older version: the manager's retention removed it (and the
    full version under it) once newer full versions came, and left the label naming a
    version that no longer exists."""
    repo = _two_chains(pristine, tmp_path)
    repo.set_label("canary", 2, share=0.1)  # a delta: its full version 1 must stay too
    assert repo.gc(keep_full=1) == [] and repo.versions() == [1, 2, 3, 4]
    repo.remove_label("canary")
    assert repo.gc(keep_full=1) == [1, 2] and repo.versions() == [3, 4]


def test_one_manager_writes_a_model_and_a_second_is_refused_naming_it(pristine, tmp_path):
    """Two managers on one model removed each other's staged versions: one published every
    export and the other recorded each as rejected (internal: FileNotFoundError), false
    evidence in the repository. Now the second is refused before it touches anything, and so
    is a direct gc while the manager runs; the lock goes with its holder, even by SIGKILL."""
    exports, repo_dir = Exports(tmp_path / "exports"), tmp_path / "repo"
    watch = ["model", "watch", "--exports", str(exports.root), "--repo", str(repo_dir), "--poll-s", "0.05"]
    first = start("first", [*watch, "--max-auc-drop", "1"], tmp_path)
    try:
        first.wait_ready()
        full = exports.add(pristine[0])
        delta = exports.add(pristine[1], previous=full)
        second = subprocess.run(
            [sys.executable, "-m", "boundless", *watch, "--max-auc-drop", "1"], capture_output=True, text=True, timeout=60
        )
        assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr[-3000:]
        admin = f"127.0.0.1:{first.ready['grpc_port']}"
        holder = f"model manager pid {first.proc.pid} on "
        assert holder in second.stderr and f"--manager {admin}" in second.stderr, second.stderr[-2000:]
        repo = Repository(repo_dir, "ctr")
        _wait("both exports published", lambda: repo.counter().handled_through >= delta, [first])
        assert repo.versions() == [1, 2] and repo.rejected() == []

        gc = _cli(repo_dir, "gc", "--keep-full", "1")
        assert gc.returncode == 2 and holder in gc.stdout and f"--manager {admin}" in gc.stdout, gc.stdout + gc.stderr
        assert _cli(repo_dir, "gc", "--keep-full", "1", "--dry-run").returncode == 0  # it reads only
        assert _cli(repo_dir, "gc", "--keep-full", "1", "--manager", admin).returncode == 0
        assert _cli(repo_dir, "list").returncode == 0
    finally:
        first.proc.kill()  # SIGKILL: the kernel drops its lock
        first.proc.wait()
    after = start("after", [*watch, "--max-auc-drop", "1"], tmp_path)
    try:
        after.wait_ready()
        exports.add(pristine[2], previous=delta)
        _wait("the next export published by the next manager", lambda: Repository(repo_dir, "ctr").versions()[-1] == 3, [after])
    finally:
        after.stop()
    assert _cli(repo_dir, "gc", "--keep-full", "1").returncode == 0  # no manager: gc writes directly


def test_an_export_numbered_behind_the_last_handled_is_rejected_not_left_lying(pristine, tmp_path, monkeypatch):
    """Exports are published in id order. One that appears with an id at or below the last
    handled (its trainer's clock lags) was skipped by every scan and deleted by retention,
    silently; now it is rejected with the reason, and the next exports publish as before."""
    from modelmgr.publish import publisher as publisher_module

    monkeypatch.setattr(publisher_module, "RELIST_S", 0.0)  # every poll lists the folder
    exports, repo = Exports(tmp_path / "exports"), Repository(tmp_path / "repo", "ctr")
    publisher = Publisher(repo, exports.root, QualityGate(max_auc_drop=1.0, rollback_auc_drop=1.0))
    full = exports.add(pristine[0])
    assert publisher.poll() == [1]
    late = f"{int(full) - 60_000_000_000:020d}"  # a minute behind
    exports.add(pristine[0], export_id=late)
    exports.base = full  # the next delta builds on the published full export
    assert publisher.poll() == []
    (record,) = repo.rejected()
    assert record["export_id"] == late and record["reason"].startswith("order: its id is not above " + full)
    assert publisher.poll() == [] and len(repo.rejected()) == 1  # once
    exports.add(pristine[1], previous=full)
    assert publisher.poll() == [2]
    # a manager started later takes what is in the folder as handled before
    assert Publisher(repo, exports.root, QualityGate(max_auc_drop=1.0)).poll() == [] and len(repo.rejected()) == 1


def test_one_manager_writes_an_s3_model_across_hosts_and_takes_over_from_one_that_stopped(pristine, tmp_path):
    """Managers on other hosts share no folder, so the flock cannot keep them apart on an S3
    repository (here: processes with separate local caches, as hosts have). The model's
    writer lease on S3 does: a second manager is refused naming the first, which renews its
    lease; a manager whose holder stopped renewing (SIGSTOP: a frozen host) takes over after
    a term; and the frozen one, resumed, finds its lease taken and stops without writing."""
    import signal

    from tests.integration.s3_server import s3_server

    with s3_server(tmp_path / "weed") as env:
        url = "s3://models/prod"
        exports = Exports(tmp_path / "exports")
        repo = Repository(url, "ctr", cache=tmp_path / "reader-cache")
        watch = ["model", "watch", "--exports", str(exports.root), "--repo", url, "--poll-s", "0.1"]
        watch += ["--max-auc-drop", "1", "--writer-lease-s", "3"]

        def host(name: str) -> dict[str, str]:
            (tmp_path / name).mkdir(exist_ok=True)
            return {**env, "TMPDIR": str(tmp_path / name)}  # the S3 cache, and so the flock, of that host

        first = start("first", watch, tmp_path, host("a"))
        daemons = [first]
        try:
            first.wait_ready()
            full = exports.add(pristine[0])
            _wait("version 1", lambda: repo.versions() == [1], daemons)
            cmd = [sys.executable, "-m", "boundless", *watch]
            second = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={**os.environ, **host("b")})
            assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr[-3000:]
            admin = f"127.0.0.1:{first.ready['grpc_port']}"
            assert f"model manager pid {first.proc.pid} on " in second.stderr, second.stderr[-2000:]
            assert f"--manager {admin}" in second.stderr and "renews its lease" in second.stderr, second.stderr[-2000:]

            os.kill(first.proc.pid, signal.SIGSTOP)  # alive, but renewing nothing
            third = start("third", watch, tmp_path, host("c"))
            daemons = [third]
            third.wait_ready(timeout=60)
            assert "not renewed for 3 s" in third.log.read_text()
            exports.add(pristine[1], previous=full)
            _wait("version 2, by the manager that took over", lambda: repo.versions() == [1, 2], daemons)
            os.kill(first.proc.pid, signal.SIGCONT)
            assert first.proc.wait(timeout=30) == 1
            said = first.log.read_text()
            assert "this manager stops" in said and "Traceback" not in said, said[-2000:]
            assert repo.versions() == [1, 2] and repo.rejected() == []
            third.stop()
            assert not repo.storage.exists("ctr/.writer.lease")  # given back: the next manager takes it at once
        finally:
            for d in (first, *daemons):
                if d.proc.poll() is None:
                    os.kill(d.proc.pid, signal.SIGCONT)
                    d.stop()
