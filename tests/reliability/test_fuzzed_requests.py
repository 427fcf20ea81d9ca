"""Fuzzed requests against running daemons (hypothesis): Predict requests of random and
of damaged compact encodings to serving, random Pull and Push requests to a PS shard, and
byte-plane (fp32z, fp64z, bf16z) pushes cut short and followed by junk.
Every answer is OK or a refusal that names the input (INVALID_ARGUMENT, NOT_FOUND,
FAILED_PRECONDITION, RESOURCE_EXHAUSTED), never INTERNAL or UNKNOWN; the daemons live on,
serving still scores a valid request exactly as before, and no refused push changes the
shard's digest."""

from __future__ import annotations

import os
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from bench.serving_model import publish, requests, spec_for
from boundless.processes import Daemon, start
from ctr.model.spec import ModelSpec
from ctr.repository.versions import Repository
from protos import predict_pb2, predict_pb2_grpc, ps_pb2, ps_pb2_grpc
from ps.api import SparsePush
from ps.client import PSClient
from ps.compression.payload import encode_rows
from serving.client import PredictClient

REFUSALS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
}
# the same examples on every run of the suite; `make reliability` draws new ones each time
FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=not os.environ.get("BOUNDLESS_FUZZ_RANDOM"),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def serving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Daemon, predict_pb2.PredictRequest, np.ndarray]]:
    run = tmp_path_factory.mktemp("fuzz-serving")
    reqs = requests(1, seed=5, items=20)
    publish(Repository(run / "repo", "ctr"), 1, spec_for("fm", k=4, hidden=()), reqs, keys=5000, shards=2)
    d = start("serving", ["serve", "--repo", str(run / "repo"), "--poll-s", "0.2"], run)
    try:
        d.wait_ready()
        client = PredictClient(d.address)
        client.wait_for_model()
        good = client.to_proto(reqs[0])
        yield d, good, client.predict_encoded(reqs[0]).scores
    finally:
        d.stop()


@pytest.fixture(scope="module")
def shard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    run = tmp_path_factory.mktemp("fuzz-ps")
    d = start("ps", ["ps", "--data-dir", str(run / "ps")], run)
    try:
        d.wait_ready()
        client = PSClient.connect([d.address])
        client.control.declare(ModelSpec("fm", k=4).tables())
        keys = np.arange(1, 200, dtype=np.uint64)
        client.push("w", keys, np.full((keys.shape[0], 1), 0.01), samples=1)  # rows to pull
        client.close()
        yield d
    finally:
        d.stop()


def _call(method, request) -> grpc.StatusCode:  # type: ignore[no-untyped-def]
    try:
        method(request, timeout=10)
    except grpc.RpcError as e:
        return e.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


def _damaged(good: predict_pb2.PredictRequest, data: st.DataObject) -> predict_pb2.PredictRequest:
    """The valid request with one field cut, flipped or swapped for random bytes."""
    req = predict_pb2.PredictRequest()
    req.CopyFrom(good)
    fields = ["dictionary", "values", "context", "items", "fields", "tokens", "item_count", "compression"]
    name = data.draw(st.sampled_from(fields))
    if name in ("item_count", "compression"):
        setattr(req, name, data.draw(st.integers(0, 2**32 - 1)))
        return req
    blob = bytearray(getattr(req, name))
    how = data.draw(st.sampled_from(["cut", "flip", "random"]))
    if how == "cut" and blob:
        blob = blob[: data.draw(st.integers(0, len(blob) - 1))]
    elif how == "flip" and blob:
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] ^= 1 << data.draw(st.integers(0, 7))
    else:
        blob = bytearray(data.draw(st.binary(max_size=512)))
    setattr(req, name, bytes(blob))
    return req


@FUZZ
@given(data=st.data())
def test_damaged_predict_requests_are_refused_or_scored_and_serving_lives_on(serving, data):
    d, good, _ = serving
    stub = predict_pb2_grpc.PredictorStub(grpc.insecure_channel(d.address))
    code = _call(stub.Predict, _damaged(good, data))
    assert code == grpc.StatusCode.OK or code in REFUSALS, code
    d.check()


@FUZZ
@given(
    item_count=st.integers(0, 5000),
    blobs=st.lists(st.binary(max_size=256), min_size=6, max_size=6),
    compression=st.integers(0, 3),
)
def test_random_predict_requests_never_crash_serving(serving, item_count, blobs, compression):
    d, good, scores = serving
    stub = predict_pb2_grpc.PredictorStub(grpc.insecure_channel(d.address))
    fields = dict(zip(["dictionary", "values", "context", "items", "fields", "tokens"], blobs, strict=True))
    code = _call(stub.Predict, predict_pb2.PredictRequest(model="ctr", item_count=item_count, compression=compression, **fields))
    assert code == grpc.StatusCode.OK or code in REFUSALS, code
    d.check()
    again = stub.Predict(good, timeout=10)  # the model is untouched
    np.testing.assert_array_equal(np.array(again.scores, np.float32), scores)


def _digest(address: str) -> dict[str, tuple[int, int, int]]:
    client = PSClient.connect([address])
    try:
        return {t.name: (t.digest, t.rows, t.samples) for t in client.control.status()[0].tables}
    finally:
        client.close()


@FUZZ
@example(table="w", keys=b"", key_count=0, encoding=0, payload=b"", kind=0, pull=True, codec="fp16")  # was UNKNOWN
@given(
    table=st.sampled_from(["w", "v", "nope", ""]),
    keys=st.binary(max_size=256),
    key_count=st.integers(0, 100_000),
    encoding=st.integers(0, 3),
    payload=st.binary(max_size=512),
    kind=st.integers(0, 3),
    pull=st.booleans(),
    codec=st.sampled_from(["", "fp16", "int8", "epgc8", "bogus"]),
)
def test_random_pulls_and_pushes_are_refused_or_applied_never_crash_the_shard(
    shard, table, keys, key_count, encoding, payload, kind, pull, codec
):
    stub = ps_pb2_grpc.ParameterServerStub(grpc.insecure_channel(shard.address))
    before = _digest(shard.address)
    if pull:
        code = _call(
            stub.Pull, ps_pb2.PullRequest(table=table, keys=keys, key_count=key_count, key_encoding=encoding, reply_codec=codec)
        )
    else:
        push = ps_pb2.PushRequest(table=table, keys=keys, key_count=key_count, key_encoding=encoding, payload=payload, kind=kind)
        code = _call(stub.Push, push)
    assert code == grpc.StatusCode.OK or code in REFUSALS, code
    shard.check()
    if code != grpc.StatusCode.OK or pull:
        assert _digest(shard.address) == before  # a refused push (and any pull) changes nothing


@FUZZ
@example(codec="fp64z", cut=0, junk=b"")
@given(codec=st.sampled_from(["fp32z", "fp64z", "bf16z"]), cut=st.integers(0, 10_000), junk=st.binary(max_size=300))
def test_plane_codec_pushes_cut_short_or_damaged_are_refused_and_change_nothing(shard, codec, cut, junk):
    """A byte-plane push (zstd frames behind a valid header) cut anywhere and followed by
    junk: refused naming what, the shard alive and its rows as they were."""
    keys = np.arange(1, 600, dtype=np.uint64)
    rows = np.random.default_rng(cut).normal(size=(keys.shape[0], 1)) * 0.01
    good = encode_rows(rows, codec, np.random.default_rng(0))  # 599 values: planes in every codec
    damaged = good[: 7 + cut % (len(good) - 7)] + junk
    assume(damaged != good)
    client = PSClient.connect([shard.address])
    try:
        before = _digest(shard.address)
        try:
            client.transport.push(SparsePush(0, "w", keys, (), damaged, "gradient"))
            code = grpc.StatusCode.OK
        except grpc.RpcError as e:
            code = e.code()
        shard.check()
        assert code in REFUSALS, code
        assert _digest(shard.address) == before
    finally:
        client.close()
