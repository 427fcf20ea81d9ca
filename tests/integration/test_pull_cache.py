"""The pull cache over gRPC (docs/design/pull-cache.md), against two shard processes: a
worker's pull never returns a row older than what another worker pushed and had
acknowledged before it; one worker's kept pulls give the bits of plain ones while rows
stop travelling; and a whole training run is bit-identical with and without the cache."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from boundless.processes import Daemon, start
from ctr.model.optim import OptimizerSpec
from ctr.model.spec import TableSpec
from ps.api import DELTA
from ps.client import PSClient

FTRL = TableSpec("w", "sparse", 1, OptimizerSpec("ftrl", lr=0.05), "example")


def _shards(tmp_path: Path, *flags: str) -> Iterator[list[Daemon]]:
    out = []
    try:
        for i in range(2):
            args = ["ps", "--shard-index", str(i), "--shard-count", "2", "--data-dir", str(tmp_path / f"ps{i}"), *flags]
            d = start(f"ps{i}", args, tmp_path)
            d.wait_ready()
            out.append(d)
        yield out
    finally:
        for d in out:
            d.stop()


@pytest.fixture
def shards(tmp_path: Path) -> Iterator[list[Daemon]]:
    yield from _shards(tmp_path)


@pytest.fixture
def leasing_shards(tmp_path: Path) -> Iterator[list[Daemon]]:
    """Shards whose write leases last 0.5 s (granted after 1 s as a table's only writer)."""
    yield from _shards(tmp_path, "--write-lease-s", "0.5")


def _client(shards: list[Daemon], keep: bool, codec: str = "auto", seed: int = 0) -> PSClient:
    client = PSClient.connect([s.address for s in shards], push_codec=codec, seed=seed)
    client.control.declare([FTRL])
    if keep:
        client.keep_rows()
    return client


def test_two_workers_see_each_others_acknowledged_pushes(shards: list[Daemon]) -> None:
    rng = np.random.default_rng(7)
    pool = np.unique(rng.integers(1, 1 << 50, size=80, dtype=np.uint64))
    a, b = _client(shards, True, "onebit", 1), _client(shards, True, "auto", 2)
    reader = _client(shards, False)
    try:
        for step in range(150):
            c = (a, b)[step % 3 == 0]
            keys = np.unique(rng.choice(pool, size=25))
            rows, session = c.pull("w", keys, state=True)
            truth, _ = reader.pull("w", keys, session=False, state=True)
            np.testing.assert_array_equal(rows, truth)
            delta = np.column_stack([rng.normal(size=keys.shape[0]) * 0.1, np.abs(rng.normal(size=keys.shape[0]))])
            c.push("w", keys, delta, session, kind=DELTA, samples=1)
        stats = a.compression_stats()
        assert stats["kept_rows_changed"] > 0 and stats["kept_rows_sent_as_ids"] > 0
    finally:
        for c in (a, b, reader):
            c.close()


def test_a_lone_writers_leased_pulls_are_the_shards_rows_and_a_second_writer_is_seen(leasing_shards: list[Daemon]) -> None:
    """docs/design/write-leases.md over gRPC: a worker alone on the table reads held rows
    from its copies, each pull still the shards' rows; another worker's push waits for the
    lease, and the first worker's next pull brings what it pushed."""
    rng = np.random.default_rng(8)
    pool = np.unique(rng.integers(1, 1 << 50, size=60, dtype=np.uint64))
    a, b = _client(leasing_shards, True, "auto", 1), _client(leasing_shards, True, "auto", 2)
    reader = _client(leasing_shards, False)
    try:

        def step(c: PSClient, keys: np.ndarray) -> None:
            rows, session = c.pull("w", keys, state=True)
            truth, _ = reader.pull("w", keys, session=False, state=True)
            np.testing.assert_array_equal(rows, truth)
            delta = np.column_stack([rng.normal(size=keys.shape[0]) * 0.1, np.abs(rng.normal(size=keys.shape[0]))])
            c.push("w", keys, delta, session, kind=DELTA, samples=1)

        until = time.monotonic() + 20
        while a.compression_stats().get("pulls_leased", 0) < 3 and time.monotonic() < until:
            step(a, pool)  # past 1 s as the only writer: leases come
            time.sleep(0.01)
        leased = a.compression_stats()["pulls_leased"]
        assert leased >= 3
        step(b, pool[:20])  # waits until a's lease has run out
        step(a, pool)  # its pull goes to the shards and brings b's rows back as changed
        assert a.compression_stats()["pulls_leased"] == leased
        assert a.compression_stats()["kept_rows_changed"] >= 20
        granted, families = 0.0, set()
        for d in leasing_shards:
            text = urllib.request.urlopen(f"http://127.0.0.1:{d.ready['metrics_port']}/metrics", timeout=10).read().decode()
            for family in text_string_to_metric_families(text):
                families.add(family.name)
                granted += sum(x.value for x in family.samples if x.name == "boundless_ps_write_leases_granted_total")
        assert granted >= 3
        assert "boundless_ps_write_lease_wait_seconds" in families  # whether b waited, and how long, is timing
    finally:
        for c in (a, b, reader):
            c.close()


def _train(shards: list[Daemon], stream: Path, out: Path, cache: str) -> dict:
    cmd = [sys.executable, "-m", "boundless", "train", "--source", str(stream), "--no-follow", "--metrics-port", "-1"]
    cmd += ["--ps", ",".join(s.address for s in shards), "--model", "ffm", "--k", "4", "--batch-size", "1024"]
    cmd += ["--push-codec", "fp64", "--pull-cache", cache, "--replace-model", "--from-start", "--metrics-out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_a_run_with_the_cache_is_bit_identical_and_pulls_far_less(shards: list[Daemon], data_dir: Path, tmp_path: Path) -> None:
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:15000]
    stream = tmp_path / "stream.libfm"
    stream.write_text("\n".join(lines * 3) + "\n")
    reader = _client(shards, False)
    try:
        runs = {}
        for cache in ("off", "on"):
            summary = _train(shards, stream, tmp_path / f"{cache}.json", cache)
            runs[cache] = (summary, {(st.index, t.name): t.digest for st in reader.control.status() for t in st.tables})
    finally:
        reader.close()
    assert runs["on"][1] == runs["off"][1]  # every table's digest on every shard
    assert runs["on"][0]["progressive_logloss"] == runs["off"][0]["progressive_logloss"]
    assert runs["on"][0]["codecs"]["pull_cache"] == "on" and runs["off"][0]["codecs"]["pull_cache"] == "off"
    pulls = {c: sum(k.get("sparse_pull", {}).get("received", 0) for k in s["wire"].values()) for c, (s, _) in runs.items()}
    assert pulls["on"] < pulls["off"] / 5, pulls
