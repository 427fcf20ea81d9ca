"""The router's fan-out logic (serving.sharded.fanout) against replicas whose calls are futures this
test completes: an answer that arrives while the hedge is being sent, a replica that fails
at once, a shard whose every replica fails, and one that never answers. The real gRPC path,
with processes and a slow proxy, is tests/integration/test_sharded_serving.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from serving.sharded.fanout import FanOut, FanOutError, parse_shards


class Call(grpc.Future):  # type: ignore[misc]
    """A call's future that completes when the test says so (or at once, given an outcome)."""

    def __init__(self) -> None:
        self._done = False
        self._cancelled = False
        self._result: Any = None
        self._error: grpc.RpcError | None = None
        self._callbacks: list[Callable[[grpc.Future], None]] = []

    def finish(self, result: Any = None, error: grpc.RpcError | None = None) -> Call:
        self._done, self._result, self._error = True, result, error
        for cb in self._callbacks:
            cb(self)
        return self

    def cancel(self) -> bool:
        if self._done:
            return False
        self._cancelled = True
        self.finish(error=Failure(grpc.StatusCode.CANCELLED))
        return True

    def cancelled(self) -> bool:
        return self._cancelled

    def running(self) -> bool:
        return not self._done

    def done(self) -> bool:
        return self._done

    def result(self, timeout: float | None = None) -> Any:
        if self._error is not None:
            raise self._error
        return self._result

    def exception(self, timeout: float | None = None) -> grpc.RpcError | None:
        return self._error

    def traceback(self, timeout: float | None = None) -> None:
        return None

    def add_done_callback(self, fn: Callable[[grpc.Future], None]) -> None:
        if self._done:
            fn(self)  # as grpc does for a call already complete: on the caller's thread
        else:
            self._callbacks.append(fn)


class Failure(grpc.RpcError):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode) -> None:
        super().__init__(code.name)
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


class Replica:
    """A stub whose Partial returns the next of `calls`, recording each request."""

    def __init__(self, *calls: Call) -> None:
        self.calls = list(calls)
        self.asked: list[Any] = []

    def future(self, request: Any, timeout: float) -> Call:
        self.asked.append(request)
        return self.calls.pop(0)

    @property
    def Partial(self) -> Replica:  # noqa: N802 - the gRPC method's name
        return self


def _fanout(replicas: list[list[Replica]], deadline_s: float) -> FanOut:
    fan = FanOut([[f"127.0.0.1:{1 + i}" for i, _ in enumerate(s)] for s in replicas], deadline_s, 0.001, 1 << 20)
    for shard, stubs in zip(fan.shards, replicas, strict=True):
        shard.stubs = stubs  # type: ignore[assignment]
    return fan


def test_an_answer_that_arrives_while_the_hedge_is_sent_ends_the_call_at_once() -> None:
    hanging = Call()
    fan = _fanout([[Replica(hanging), Replica(Call().finish("b"))]], deadline_s=5.0)
    t = time.monotonic()
    assert fan.call("Partial", ["ask"]) == ["b"]
    assert time.monotonic() - t < 2.0  # not the 5 s deadline
    assert hanging.cancelled()  # the slow call is given up once the hedge answered


def test_a_replica_that_fails_hands_over_to_the_next() -> None:
    first = Replica(Call().finish(error=Failure(grpc.StatusCode.UNAVAILABLE)))
    second = Replica(Call().finish("answer"))
    fan = _fanout([[first, second], [Replica(Call().finish("other"))]], deadline_s=5.0)
    assert fan.call("Partial", ["a", "b"]) == ["answer", "other"]
    assert first.asked == second.asked == ["a"]


def test_a_shard_whose_every_replica_failed_fails_with_the_last_code() -> None:
    failing = [Replica(Call().finish(error=Failure(code))) for code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL)]
    fan = _fanout([failing], deadline_s=5.0)
    with pytest.raises(FanOutError) as e:
        fan.call("Partial", ["a"])
    assert e.value.code == grpc.StatusCode.INTERNAL


def test_a_shard_that_never_answers_fails_at_the_deadline() -> None:
    calls = [Call(), Call()]
    fan = _fanout([[Replica(calls[0]), Replica(calls[1])]], deadline_s=0.2)
    t = time.monotonic()
    with pytest.raises(FanOutError) as e:
        fan.call("Partial", ["a"])
    assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert 0.19 < time.monotonic() - t < 3.0
    assert all(c.cancelled() for c in calls)  # hedged too, and both calls given up


def test_shards_are_parsed_by_comma_and_replicas_by_bar() -> None:
    assert parse_shards("a1|a2,b1") == [["a1", "a2"], ["b1"]]
    with pytest.raises(ValueError, match="names no replica"):
        parse_shards("a1,|")
