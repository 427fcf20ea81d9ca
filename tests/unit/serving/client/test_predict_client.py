"""The client applies the model's feature transform (numeric bucketing, skipped columns,
crosses) exactly as the trainer's parser does, in both the dict and the column encodings,
and counts features of fields the model does not have."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctr.data.batch import build_batch
from ctr.data.fields import FieldIndex
from ctr.data.formats import make_parser, resolve_fields
from ctr.data.schema import FeatureSchema
from serving.client import RequestEncoder
from serving.client.predict_client import Value
from serving.request.encoding import decode, field_hash_ids
from serving.rest import Refused, column_of, features_of

SCHEMA = FeatureSchema(format="kv", numeric=("n",), skip=("id",), cross=(("a", "n"), ("u", "b")))
LINES = ["1\tu=alice\ta=x\tb=y\tn=7\tid=9", "0\tu=alice\ta=z\tb=y2\tn=1.5\tid=10", "1\tu=alice\ta=q\tb=w\tn=250\tid=11"]


def _trainer_keys() -> tuple[list[str], list[list[int]]]:
    index = resolve_fields(SCHEMA, LINES, freeze=True)
    parse = make_parser(SCHEMA, index)
    batch = build_batch([parse(line) for line in LINES], index.ids())
    per = [sorted(batch.keys[batch.offsets[i] : batch.offsets[i + 1]].tolist()) for i in range(len(LINES))]
    return list(index.names), per


def _item_keys(encoder: RequestEncoder, req, n: int) -> list[list[int]]:
    fields = tuple(encoder.index.names)
    d = decode(req, len(fields), field_hash_ids(fields))
    ctx = d.keys[d.context].tolist()
    return [sorted(ctx + d.keys[d.item_indices[d.item_offsets[i] : d.item_offsets[i + 1]]].tolist()) for i in range(n)]


def test_a_crossed_numeric_column_crosses_its_buckets_and_leaves_a_missing_value_out():
    """A cross of a numeric field pairs its bucket, as the trainer's line does: a column of
    numbers as text crossed the text ('7', a token no line had), and a NaN crossed a token
    made of an undefined integer; a missing value makes no cross, as in the trainer."""
    lines = ["1\tu=alice\ta=x\tb=y\tn=7", "0\tu=alice\ta=z\tb=y2", "1\tu=alice\ta=q\tb=w\tn=250"]
    index = resolve_fields(SCHEMA, LINES, freeze=True)
    parse = make_parser(SCHEMA, index)
    batch = build_batch([parse(line) for line in lines], index.ids())
    want = [sorted(batch.keys[batch.offsets[i] : batch.offsets[i + 1]].tolist()) for i in range(3)]
    enc = RequestEncoder(SCHEMA, list(index.names))
    for n in (np.array([7.0, np.nan, 250.0]), np.array(["7", "", "250"]), np.array(["7", "NA", "250"])):
        items = {"a": np.array(["x", "z", "q"]), "b": np.array(["y", "y2", "w"]), "n": n}
        for tokens in (False, True):
            req = enc.encode_columns(items, context={"u": np.array(["alice"])}, tokens=tokens)
            assert _item_keys(enc, req, 3) == want, (n, tokens)


def test_dicts_with_a_shared_context_score_the_trainers_keys():
    names, expected = _trainer_keys()
    enc = RequestEncoder(SCHEMA, names)
    items: list[dict[str, Value]] = [
        {"a": "x", "b": "y", "n": "7", "id": "9"},
        {"a": "z", "b": "y2", "n": "1.5"},
        {"a": "q", "b": "w", "n": 250},
    ]
    req = enc.encode(items, context={"u": "alice"})
    assert req.unknown_features == 0  # id is a skipped column, not an unknown one
    assert _item_keys(enc, req, 3) == expected


def test_columns_score_the_trainers_keys():
    names, expected = _trainer_keys()
    enc = RequestEncoder(SCHEMA, names)
    items = {"a": np.array(["x", "z", "q"]), "b": np.array(["y", "y2", "w"]), "n": np.array([7.0, 1.5, 250.0])}
    for tokens in (False, True):
        req = enc.encode_columns(items, context={"u": np.array(["alice"])}, tokens=tokens)
        assert _item_keys(enc, req, 3) == expected


def test_without_the_transform_numeric_values_hash_as_raw_categories():
    names, expected = _trainer_keys()
    enc = RequestEncoder(FeatureSchema(format="kv"), names)
    req = enc.encode([{"a": "x", "b": "y", "n": "7"}], context={"u": "alice"})
    assert _item_keys(enc, req, 1) != expected[:1]


def test_unknown_feature_names_are_counted_with_their_names():
    names, _ = _trainer_keys()
    enc = RequestEncoder(SCHEMA, names)
    req = enc.encode([{"A": "x", "b": "y"}, {"A": "z", "zz": "1"}], context={"U": "alice"})
    assert req.unknown_features == 4 and req.unknown_fields == ("A", "U", "zz")
    cols = enc.encode_columns({"A": np.array(["x", "y"]), "b": np.array(["p", "q"])})
    assert cols.unknown_features == 2 and cols.unknown_fields == ("A",)


def test_none_and_nan_are_missing_features_as_an_empty_csv_field_is():
    """pandas writes NaN to a CSV as an empty field, which the trainer reads as missing: the
    same row from Python (None, NaN) or REST (null) scores without the feature, not with the
    token "None" or "nan"."""
    names, _ = _trainer_keys()
    enc = RequestEncoder(SCHEMA, names)
    want = _item_keys(enc, enc.encode([{"a": "x", "b": "y"}]), 1)
    for missing in (None, float("nan")):
        got = enc.encode([{"a": "x", "b": "y", "n": missing, "u": missing}])
        assert _item_keys(enc, got, 1) == want and got.unknown_features == 0
    assert features_of({"a": "x", "n": None}, "instances[0]") == {"a": "x"}


def test_null_in_a_rest_column_is_a_missing_value_of_strings_or_of_numbers():
    """pandas' to_json writes an integer column with a missing value as numbers and null:
    NaN, which the encoder leaves out (render_column) as the client's float column."""
    assert column_of(["a", None, "b"], "inputs.site", 3).tolist() == ["a", "", "b"]
    got = column_of([1005, None, 1002.0], "inputs.n", 3)
    assert got.dtype == np.float64 and np.isnan(got[1]) and got[[0, 2]].tolist() == [1005.0, 1002.0]
    with pytest.raises(Refused, match="inputs.n: expected numbers or strings"):
        column_of([1.5, None, "x"], "inputs.n", 3)


def test_a_list_is_a_multi_valued_feature_as_kv_repeats_a_field():
    schema = FeatureSchema(format="kv")
    index = FieldIndex()
    sample = make_parser(schema, index)("1\ttags=x\ttags=y\tsite=a")
    trained = sorted(build_batch([sample], index.ids()).keys.tolist())
    enc = RequestEncoder(schema, index.names)
    d = decode(enc.encode([{"tags": ["x", None, "y"], "site": "a"}]), 2, field_hash_ids(tuple(index.names)))
    assert sorted(d.keys.tolist()) == trained  # before: one token "['x', 'y']"


def test_unsigned_ids_past_int64_hash_as_their_decimal_text_in_every_encoding():
    """64-bit hashed ids in a uint64 column: the integer kernels read int64, which wrapped
    such an id to a negative number, a token the trainer never saw."""
    enc = RequestEncoder(FeatureSchema(format="csv", label="click"), ["uid"])
    ids = [10000169349117863715, 5, 2**64 - 1]

    def keys(req) -> list[int]:
        return sorted(decode(req, 1, field_hash_ids(("uid",))).keys.tolist())

    want = keys(enc.encode([{"uid": str(i)} for i in ids]))
    column = np.array(ids, dtype=np.uint64)
    assert keys(enc.encode([{"uid": i} for i in ids])) == want
    assert keys(enc.encode_columns({"uid": column})) == want
    assert keys(enc.encode_columns({"uid": column}, tokens=True)) == want


def test_a_numeric_columns_missing_values_are_missing_features_as_the_trainer_reads_them():
    """pandas makes a numeric column with a missing value float64 with NaN; exporters write
    NA, NULL, \\N or nothing. The trainer reads each as a missing feature; a column of them was
    refused, so a pandas user had to send rows. Now each item scores as its row without the
    feature does, by tokens and by hashed keys; a word or an infinity is still refused."""
    names = ["n", "site"]
    enc = RequestEncoder(FeatureSchema(format="csv", label="click", numeric=("n",)), names)

    def items(req) -> list[list[int]]:
        return _item_keys(enc, req, 5)

    site = np.array(["a", "b", "c", "d", "e"])
    want = items(enc.encode([{"n": 1.5, "site": "a"}, {"site": "b"}, {"n": 7, "site": "c"}, {"site": "d"}, {"site": "e"}]))
    for column in (
        np.array([1.5, np.nan, 7.0, np.nan, np.nan]),
        np.array(["1.5", "NA", "7", "", "\\N"]),
    ):
        for tokens in (True, False):
            assert items(enc.encode_columns({"n": column, "site": site}, tokens=tokens)) == want
    whole = items(enc.encode_columns({"n": np.array([1.5, 3.0, 7.0, 0.0, 2.0]), "site": site}, tokens=True))
    assert whole == items(enc.encode([{"n": v, "site": s} for v, s in zip([1.5, 3.0, 7.0, 0.0, 2.0], site, strict=True)]))
    for bad, said in ((np.array(["1.5", "many"]), "not a number"), (np.array([1.5, np.inf]), "an infinity")):
        with pytest.raises(ValueError, match=f"^n: a numeric column holds .*{said}"):
            enc.encode_columns({"n": bad})


def test_bytes_score_as_the_text_they_hold_and_a_mapping_is_no_value():
    """str(b"x") is "b'x'": bytes (Arrow's binary columns, a Kafka payload) hashed as a
    token no sample had and scored as an unseen value, without a word."""
    from ctr.data.formats import ParseError

    names, expected = _trainer_keys()
    enc = RequestEncoder(SCHEMA, names)
    items: list[dict[str, Value]] = [
        {"a": b"x", "b": bytearray(b"y"), "n": b"7"},  # type: ignore[dict-item]
        {"a": "z", "b": "y2", "n": "1.5"},
        {"a": "q", "b": memoryview(b"w"), "n": 250},  # type: ignore[dict-item]
    ]
    assert _item_keys(enc, enc.encode(items, context={"u": b"alice"}), 3) == expected  # type: ignore[dict-item]
    with pytest.raises(ParseError, match=r"^items\[0\]: field a: a dict is not a value"):
        enc.encode([{"a": {"x": 1}}])  # type: ignore[dict-item]
    with pytest.raises(ParseError, match=r"^items\[0\]: field a: bytes that are not UTF-8 text"):
        enc.encode([{"a": b"\xff"}])  # type: ignore[dict-item]


def test_a_value_a_numeric_field_cannot_take_is_named_by_its_item_or_the_context():
    from ctr.data.formats import ParseError

    encoder = RequestEncoder(SCHEMA, ["u", "a", "b", "n", "axn", "uxb"])
    with pytest.raises(ParseError, match=r"^items\[1\]: field n: 'abc' is not a number"):
        encoder.encode([{"n": 3}, {"n": "abc"}])
    with pytest.raises(ParseError, match=r"^instances\[0\]: field n: 'inf' is not a number"):
        encoder.encode([{"n": float("inf")}], items_name="instances")
    with pytest.raises(ParseError, match=r"^context: field n"):
        encoder.encode([{"a": "x"}], {"n": "x1"})


def test_rest_refuses_such_a_value_with_400_naming_it_not_a_500(tmp_path):
    from http import HTTPStatus

    from bench.serving_model import publish, requests, spec_for
    from ctr.repository.versions import Repository
    from serving.loading.watcher import ModelWatcher
    from serving.rest import RestFront, Target
    from serving.service import PredictorServicer

    spec = spec_for("lr", k=1, hidden=())
    repo = Repository(tmp_path / "repo", "ctr")
    publish(repo, 1, spec, requests(1, seed=5, items=5), keys=1_000, shards=1)
    watcher = ModelWatcher(repo, 60.0)
    watcher.refresh()
    assert watcher.current is not None
    watcher.current.schema = FeatureSchema(format="csv", numeric=(spec.fields[0],))  # a numeric field, as a csv's
    front = RestFront(PredictorServicer(watcher), 1 << 20, 4, None)
    name = spec.fields[0]
    for body, words in (
        ({"instances": [{name: 3}, {name: "abc"}]}, f"instances[1]: field {name}: 'abc' is not a number"),
        ({"inputs": {name: ["abc", "3"]}}, f"inputs: {name}: a numeric column holds a value that is not a number"),
    ):
        with pytest.raises(Refused) as e:
            front.predict(Target("ctr", "predict"), json.dumps(body).encode())
        assert e.value.status == HTTPStatus.BAD_REQUEST and words in str(e.value)
    assert front.predict(Target("ctr", "predict"), json.dumps({"instances": [{name: 3}]}).encode())["model_version"] == 1


def test_a_rest_request_routed_to_a_label_removed_before_it_scored_is_routed_again(tmp_path):
    """gRPC routes inside the call; REST routes first (to encode with that version's
    transform), so a label removed in between must not fail the request."""
    from bench.serving_model import publish, requests, spec_for
    from ctr.repository.versions import Repository
    from serving.loading.watcher import ModelWatcher
    from serving.rest import RestFront, Target
    from serving.service import PredictorServicer

    spec = spec_for("lr", k=1, hidden=())
    repo = Repository(tmp_path / "repo", "ctr")
    publish(repo, 1, spec, requests(1, seed=5, items=5), keys=1_000, shards=1)
    watcher = ModelWatcher(repo, 60.0)
    watcher.refresh()
    real, calls = watcher.routed, []

    def routed(key: str = ""):
        calls.append(key)
        return ("canary", None) if len(calls) == 1 else real(key)  # the label gone by the time it scores

    watcher.routed = routed  # type: ignore[method-assign, assignment]
    front = RestFront(PredictorServicer(watcher), 1 << 20, 4, None)
    body = json.dumps({"instances": [{spec.fields[0]: "a"}], "routing_key": "u1"}).encode()
    got = front.predict(Target("ctr", "predict"), body)
    assert (got["label"], got["model_version"], len(calls)) == ("stable", 1, 2)


def test_a_rest_request_to_a_json_lines_model_is_read_as_its_lines_trained():
    """Nested objects as their keys' fields and true/false as True/False (ctr.data.json_lines),
    only for a model trained on JSON lines: elsewhere an object is no value."""
    from serving.rest import _as_trained

    row = {"user": {"age": 31, "geo": {"city": "Oslo"}}, "new": True, "tags": [True, "x"]}
    assert features_of(_as_trained(row, True), "instances[0]") == {
        "user.age": 31,
        "user.geo.city": "Oslo",
        "new": "True",
        "tags": ["True", "x"],
    }
    with pytest.raises(Refused, match="instances\\[0\\].user: expected a string, a number"):
        features_of(_as_trained(row, False), "instances[0]")
