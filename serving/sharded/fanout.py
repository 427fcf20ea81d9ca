"""Fan-out from the router to the serving shards, with a deadline and hedged requests.

Each shard has one or more replicas. A call goes to one replica (round robin); when it has
not answered after the shard's hedge delay (twice its fastest recent answer, at least
`hedge_min_s`), the same request also goes to the next replica, and the first answer
wins. A replica that fails hands over to the next at once. Past the deadline every call
still in flight is cancelled and the fan-out fails with DEADLINE_EXCEEDED; when every
replica of a shard has failed, with the last error's code. It never waits longer.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from ctr.runtime.security import open_channel
from protos import predict_pb2_grpc
from serving import metrics

RECENT = 50  # answers per shard that the hedge delay looks back on


class FanOutError(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Shard:
    addresses: list[str]
    stubs: list[predict_pb2_grpc.ShardScorerStub]
    channels: list[grpc.Channel]
    recent: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=RECENT))
    turn: itertools.count[int] = field(default_factory=itertools.count)


def parse_shards(text: str) -> list[list[str]]:
    """`a1|a2,b1` -> [[a1, a2], [b1]]: shards by comma, a shard's replicas by `|`."""
    shards = [[a for a in part.split("|") if a] for part in text.split(",") if part]
    if not shards or any(not s for s in shards):
        raise ValueError(f"shards: {text!r} names no replica for some shard (a1|a2,b1|b2)")
    return shards


class FanOut:
    def __init__(self, shards: Sequence[Sequence[str]], deadline_s: float, hedge_min_s: float, max_message_bytes: int) -> None:
        opts = [("grpc.max_receive_message_length", max_message_bytes), ("grpc.max_send_message_length", max_message_bytes)]
        self.shards = []
        for addresses in shards:
            channels = [open_channel(a, opts) for a in addresses]
            stubs = [predict_pb2_grpc.ShardScorerStub(c) for c in channels]
            self.shards.append(Shard(list(addresses), stubs, channels))
        self.deadline_s = deadline_s
        self.hedge_min_s = hedge_min_s

    def __len__(self) -> int:
        return len(self.shards)

    def hedge_delay(self, shard: Shard) -> float:
        return max(self.hedge_min_s, 2 * min(shard.recent)) if shard.recent else self.hedge_min_s * 10

    def call(self, method: str, requests: Sequence[Any]) -> list[Any]:
        """requests[j] to shard j; returns the answers in shard order (see the module doc)."""
        lock = threading.Condition()
        answers: list[Any] = [None] * len(self.shards)
        failures: list[list[grpc.RpcError]] = [[] for _ in self.shards]
        in_flight: list[list[grpc.Future]] = [[] for _ in self.shards]  # every call made, per shard
        first_replica = [0] * len(self.shards)
        start = time.monotonic()
        deadline = start + self.deadline_s

        def launch(j: int) -> None:
            shard, tried = self.shards[j], len(in_flight[j])
            if tried == 0:
                first_replica[j] = next(shard.turn) % len(shard.stubs)  # round robin
            replica = (first_replica[j] + tried) % len(shard.stubs)
            sent = time.monotonic()
            fut = getattr(shard.stubs[replica], method).future(requests[j], timeout=max(0.001, deadline - sent))
            in_flight[j].append(fut)
            fut.add_done_callback(lambda f, j=j, sent=sent: done(j, f, sent))

        def done(j: int, fut: grpc.Future, sent: float) -> None:
            with lock:
                if fut.cancelled():
                    return
                err = fut.exception()
                if err is None and answers[j] is None:
                    answers[j] = fut.result()
                    took = time.monotonic() - sent
                    self.shards[j].recent.append(took)
                    metrics.SHARD_SECONDS.observe(took)
                elif err is not None:
                    failures[j].append(err)  # type: ignore[arg-type]
                lock.notify_all()

        with lock:
            for j in range(len(self.shards)):
                launch(j)
            try:
                while True:
                    now = time.monotonic()
                    pending = [j for j in range(len(self.shards)) if answers[j] is None]
                    if not pending:
                        return answers
                    if now >= deadline:
                        raise FanOutError(
                            grpc.StatusCode.DEADLINE_EXCEEDED,
                            f"shards {pending} did not answer within {self.deadline_s * 1e3:.0f} ms",
                        )
                    wake = deadline
                    # a call can complete inside launch(), its callback then running on this
                    # thread: after a launch, look at the answers again before waiting
                    for j in pending:
                        shard = self.shards[j]
                        live = len(in_flight[j]) - len(failures[j])
                        if live <= 0:  # every call so far failed: the next replica, or give up
                            if len(in_flight[j]) < len(shard.stubs):
                                launch(j)
                                wake = now
                                continue
                            last = failures[j][-1]
                            raise FanOutError(
                                last.code() if hasattr(last, "code") else grpc.StatusCode.UNAVAILABLE,  # type: ignore[union-attr]
                                f"every replica of shard {j} failed: {last}",
                            )
                        hedge_at = start + self.hedge_delay(shard)
                        if len(in_flight[j]) == 1 < len(shard.stubs):
                            if now >= hedge_at:
                                metrics.HEDGED.inc()
                                launch(j)
                                wake = now
                            else:
                                wake = min(wake, hedge_at)
                    lock.wait(max(0.0, wake - time.monotonic()))
            finally:
                for calls in in_flight:
                    for f in calls:
                        f.cancel()

    def close(self) -> None:
        for shard in self.shards:
            for c in shard.channels:
                c.close()
