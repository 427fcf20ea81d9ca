"""A PS shard's `--max-concurrent`: calls past it are refused with RESOURCE_EXHAUSTED
before any handler runs, and the trainer's client backs off and sends them again, so a
flood of calls stays bounded and every push is applied exactly once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np

from boundless.processes import start
from ctr.model.spec import ModelSpec
from protos import ps_pb2, ps_pb2_grpc
from ps.client import PSClient
from ps.wire import KEYS_DELTA_VARINT, encode_keys

SPEC = ModelSpec("fm", k=8)
KEYS = np.arange(1, 200_001, dtype=np.uint64)  # a pull of 200k rows keeps a call in flight a while


def _raw_pull(address: str) -> grpc.StatusCode:
    channel = grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 1 << 30)])
    req = ps_pb2.PullRequest(
        table="v",
        keys=encode_keys(KEYS, KEYS_DELTA_VARINT),
        key_count=KEYS.shape[0],
        key_encoding=KEYS_DELTA_VARINT,  # type: ignore[arg-type]
    )
    try:
        ps_pb2_grpc.ParameterServerStub(channel).Pull(req, timeout=60)
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()
    finally:
        channel.close()


def _pull_and_push(address: str, rounds: int) -> None:
    client = PSClient.connect([address])
    client.know(SPEC.tables())
    grads = np.full((KEYS.shape[0], SPEC.k), 0.01, dtype=np.float32)
    for _ in range(rounds):
        _, session = client.pull("v", KEYS)
        client.push("v", KEYS, grads, session, samples=1)
    client.close()


def test_calls_past_the_limit_are_refused_and_the_client_retries_them_exactly_once(tmp_path):
    ps = start("ps", ["ps", "--max-concurrent", "1", "--grpc-threads", "4"], tmp_path)
    try:
        ps.wait_ready()
        client = PSClient.connect([ps.address])
        client.control.declare(SPEC.tables())
        before = client.control.status()[0].update_seq

        seen: set[grpc.StatusCode] = set()
        with ThreadPoolExecutor(8) as pool:
            for _ in range(5):  # bounded: calls overlap in the first round on any machine seen so far
                seen |= set(pool.map(_raw_pull, [ps.address] * 8))
                if grpc.StatusCode.RESOURCE_EXHAUSTED in seen:
                    break
        assert grpc.StatusCode.RESOURCE_EXHAUSTED in seen, seen
        assert seen <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}, seen

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _: _pull_and_push(ps.address, 3), range(4)))  # raises if any call failed
        assert client.control.status()[0].update_seq - before == 4 * 3  # every push applied, none twice
        client.close()
        ps.check()
    finally:
        ps.stop()
