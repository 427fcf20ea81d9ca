"""`serve --processes 2`: two serving processes on one port under a supervisor. Swaps
under load fail no request and every answer holds the scores of the version it reports;
a process killed with -9 loses only the requests it held, the other keeps serving, and the
supervisor starts it again; SIGTERM stops them all and removes the shared copies. The port
is the group's alone: another server, group or shard started on it is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import numpy as np

from bench.serving_model import requests
from boundless.processes import Daemon, start
from ctr.repository.versions import Policy, Repository
from serving.client import PredictClient
from serving.request.encoding import EncodedRequest
from tests.support import two_fm_versions, wait_until


def _requests_by_process(daemon: Daemon) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{daemon.ready['metrics_port']}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("boundless_serving_requests_total{") and 'code="OK"' in line:
            process = line.split('process="')[1].split('"')[0]
            out[process] = out.get(process, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def _process_up(daemon: Daemon) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{daemon.ready['metrics_port']}/metrics", timeout=10).read().decode()
    return {
        line.split('process="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("boundless_serving_process_up{")
    }


def _both_serve(daemon: Daemon, req: EncodedRequest) -> None:
    """Fresh connections until the kernel has given some to each process (SO_REUSEPORT
    spreads connections, not requests)."""
    for _ in range(48):
        c = PredictClient(daemon.address)
        c.predict_encoded(req)
        c.close()
        if len(_requests_by_process(daemon)) == 2:
            return
    raise AssertionError(f"one process took every connection: {_requests_by_process(daemon)}")


def _load(address: str, reqs: list[EncodedRequest], expected: dict[int, list[np.ndarray]], clients: int):
    """Clients scoring in a loop until the returned event is set; failures and versions seen."""
    stop = threading.Event()
    failures: list[tuple[grpc.StatusCode | None, str]] = []
    seen: dict[int, int] = {}

    def client(i: int) -> None:
        c = PredictClient(address)
        j = i
        while not stop.is_set():
            r = j % len(reqs)
            j += 1
            try:
                got = c.predict_encoded(reqs[r])
            except grpc.RpcError as e:
                failures.append((e.code(), str(e.details())))
                continue
            seen[got.version] = seen.get(got.version, 0) + 1
            if not np.allclose(got.scores, expected[got.version][r], atol=1e-5):
                failures.append((None, f"request {r} answered as version {got.version} with other scores"))
        c.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    return stop, threads, failures, seen


def _published(tmp_path: Path) -> tuple[Repository, list[EncodedRequest], dict[int, list[np.ndarray]]]:
    reqs = requests(3, seed=5, items=30)
    repo, expected = two_fm_versions(tmp_path / "repo", reqs, keys=30_000)
    return repo, reqs, expected


def test_two_processes_swap_under_load_with_no_failure_and_stop_together(tmp_path):
    repo, reqs, expected = _published(tmp_path)
    repo.set_policy(Policy("pinned", 1))
    copies = tmp_path / "copies"
    serving = start(
        "serving",
        ["serve", "--repo", str(repo.root), "--processes", "2", "--poll-s", "0.02", "--copies-dir", str(copies)],
        tmp_path,
    )
    try:
        serving.wait_ready()
        pids = serving.ready["pids"]
        assert len(pids) == 2 and serving.proc.pid not in pids
        PredictClient(serving.address).wait_for_model()
        _both_serve(serving, reqs[0])
        # one copy of each file for both processes
        assert len([p for p in copies.rglob("*.image")]) == 2
        stop, threads, failures, seen = _load(serving.address, reqs, expected, clients=4)
        for flip in range(20):
            repo.set_policy(Policy("pinned", 2 if flip % 2 == 0 else 1))
            time.sleep(0.15)
        stop.set()
        for t in threads:
            t.join(30)
        assert failures == [] and seen.get(1, 0) > 10 and seen.get(2, 0) > 10, (failures[:3], seen)
    finally:
        serving.stop()
    assert serving.proc.returncode == 0
    wait_until("the serving processes to exit", lambda: not any(os.path.exists(f"/proc/{p}") for p in pids), 30)
    assert not copies.exists() or not any(copies.glob(".using-*"))  # their lists of copies in use went with them


def test_a_killed_process_loses_only_its_requests_and_comes_back(tmp_path):
    repo, reqs, expected = _published(tmp_path)
    repo.set_policy(Policy("pinned", 1))
    serving = start("serving", ["serve", "--repo", str(repo.root), "--processes", "2"], tmp_path)
    try:
        serving.wait_ready()
        PredictClient(serving.address).wait_for_model()
        _both_serve(serving, reqs[0])
        clients = 6
        stop, threads, failures, seen = _load(serving.address, reqs, expected, clients)
        time.sleep(0.5)
        victim = serving.ready["pids"][0]
        os.kill(victim, 9)
        time.sleep(1.5)  # the other process serves every client meanwhile
        served_after_kill = sum(seen.values())
        time.sleep(1.0)
        assert sum(seen.values()) > served_after_kill  # still answering with one process down
        stop.set()
        for t in threads:
            t.join(30)
        # the requests the killed process held failed UNAVAILABLE and the client sent them
        # again to the other (serving.client.predict_client.RETRY_POLICY): none is lost
        assert failures == []
        wait_until("the restarted process", lambda: "serving process 0 serving again" in serving.log.read_text(), 120, [serving])
        assert _process_up(serving) == {"0": 1.0, "1": 1.0}
        c = PredictClient(serving.address)
        assert np.allclose(c.predict_encoded(reqs[1]).scores, expected[1][1], atol=1e-5)
        c.close()
    finally:
        serving.stop()


def test_one_client_reaches_every_process_through_several_connections(tmp_path):
    """SO_REUSEPORT spreads connections, not requests: a client of one connection is served by
    one process, one of 16 connections (taken in turn) by both, and so are 16 clients (all 16
    on one process: p = 2^-15)."""
    repo, reqs, expected = _published(tmp_path)
    serving = start("serving", ["serve", "--repo", str(repo.root), "--processes", "2"], tmp_path)
    try:
        serving.wait_ready()
        PredictClient(serving.address).wait_for_model()

        def served_by(client: PredictClient, n: int) -> dict[str, float]:
            before = _requests_by_process(serving)
            for i in range(n):
                got = client.predict_encoded(reqs[i % len(reqs)])
                assert np.allclose(got.scores, expected[got.version][i % len(reqs)], atol=1e-5)
            client.close()
            after = _requests_by_process(serving)
            return {p: after[p] - before.get(p, 0.0) for p in after if after[p] > before.get(p, 0.0)}

        one = served_by(PredictClient(serving.address), 8)
        assert list(one.values()) == [8.0]  # one connection, one process
        many = served_by(PredictClient(serving.address, connections=16), 32)
        assert sorted(many) == ["0", "1"] and sum(many.values()) == 32.0
        # and clients of one process are connections of their own (gRPC would share one)
        before = _requests_by_process(serving)
        clients = [PredictClient(serving.address) for _ in range(16)]
        for c in clients:
            c.predict_encoded(reqs[0])
        for c in clients:
            c.close()
        after = _requests_by_process(serving)
        assert all(after[p] > before.get(p, 0.0) for p in ("0", "1"))
    finally:
        serving.stop()


def _refused_quickly(*args: str) -> str:
    """Runs `boundless ARGS`, which must exit non-zero with a message and no traceback."""
    proc = subprocess.run([sys.executable, "-m", "boundless", *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.stderr


def test_a_server_started_on_the_groups_port_is_refused_and_the_group_keeps_it(tmp_path):
    """gRPC binds with SO_REUSEPORT by default on Linux: a second server of the same user on
    a served port bound beside the first, and the kernel gave it half of the connections,
    scored by whatever model it had. A PS shard there split a worker's pushes between two
    stores."""
    repo, reqs, expected = _published(tmp_path)
    repo.set_policy(Policy("pinned", 1))
    serving = start("serving", ["serve", "--repo", str(repo.root), "--processes", "2", "--rest-port", "0"], tmp_path)
    try:
        serving.wait_ready()
        port, rest_port = serving.ready["grpc_port"], serving.ready["rest_port"]
        other = tmp_path / "other"
        copies = tmp_path / "other-copies"
        alone = _refused_quickly("serve", "--repo", str(other), "--port", str(port), "--copies-dir", str(copies))
        assert f"--port {port} on 127.0.0.1" in alone and "another process listens there" in alone
        assert not any(copies.iterdir())  # refused before it copied (loaded) anything
        group = _refused_quickly("serve", "--repo", str(other), "--processes", "2", "--port", str(port))
        assert f"--port {port} on 127.0.0.1" in group
        rest = _refused_quickly("serve", "--repo", str(other), "--rest-port", str(rest_port))
        assert f"--rest-port {rest_port} on 127.0.0.1" in rest
        store = tmp_path / "shard"
        shard = _refused_quickly("ps", "--shard-index", "0", "--shard-count", "1", "--data-dir", str(store), "--port", str(port))
        assert f"--port {port} on 127.0.0.1" in shard and not any(store.iterdir())  # no store opened
        # every connection still reaches the group, and only it
        client = PredictClient(serving.address, connections=16)
        for i in range(32):
            got = client.predict_encoded(reqs[i % len(reqs)])
            assert got.version == 1 and np.allclose(got.scores, expected[1][i % len(reqs)], atol=1e-5)
        client.close()
        assert sum(_requests_by_process(serving).values()) >= 32
    finally:
        serving.stop()
    assert serving.proc.returncode == 0
