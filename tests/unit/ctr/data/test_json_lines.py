"""JSON Lines (`--format json`, ctr.data.json_lines): a line's object trains as the kv line
of the same fields and tokens would, its numbers as their JSON text; what cannot be a
sample is refused naming why."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctr.data.fields import FieldIndex
from ctr.data.formats import ParseError, make_parser
from ctr.data.json_lines import flattened
from ctr.data.schema import JSON_ONLY, FeatureSchema, detect_schema
from serving.client.predict_client import RequestEncoder, Value
from serving.request.encoding import decode, field_hash_ids

JSON = FeatureSchema(format="json", label="click")


def _parsed(schema: FeatureSchema, line: str) -> tuple[float, list[tuple[str, str]]]:
    index = FieldIndex()
    s = make_parser(schema, index)(line)
    return s.label, sorted((index.names[f], t) for f, t in zip(s.fields, s.tokens, strict=True))


def test_an_object_trains_as_the_kv_line_of_its_fields_and_tokens():
    line = json.dumps({"click": 1, "site": "a17", "hour": 14102100, "price": 1.50, "tags": ["x", None, "y"], "gone": None})
    line = line.replace("1.5", "1.50")  # as a producer wrote it: the text is the token
    kv = "1\tsite=a17\thour=14102100\tprice=1.50\ttags=x\ttags=y"
    assert _parsed(JSON, line) == _parsed(FeatureSchema(format="kv"), kv)


def test_nested_objects_and_booleans_train_as_a_client_sends_them():
    label, feats = _parsed(JSON, '{"click": true, "user": {"age": 31, "geo": {"city": "Oslo"}}, "new": false}')
    assert label == 1.0
    assert feats == [("new", "False"), ("user.age", "31"), ("user.geo.city", "Oslo")]
    request: dict[str, Value] = {"user": {"age": 31, "geo": {"city": "Oslo"}}, "new": False}
    assert flattened(request) == {"user.age": 31, "user.geo.city": "Oslo", "new": "False"}
    names = ["user.age", "user.geo.city", "new"]
    enc = RequestEncoder(JSON, names)
    nested, flat = enc.encode([request]), enc.encode([{"user.age": 31, "user.geo.city": "Oslo", "new": "False"}])
    keys = [np.sort(decode(r, 3, field_hash_ids(tuple(names))).keys) for r in (nested, flat)]
    assert np.array_equal(keys[0], keys[1]) and len(keys[0]) == 3


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ('{"click": 1, "a": ', "not JSON: Expecting value at column"),
        ('[1, "a"]', "expected one JSON object a line, got a list"),
        ('{"site": "a"}', "no label 'click' in the object (its keys: site)"),
        ('{"click": null, "site": "a"}', "no label 'click'"),
        ('{"click": 0.5, "site": "a"}', "label: '0.5' is a fraction"),
        ('{"click": 1, "a": [[1, 2]]}', "a[0]: expected a string, number, true/false or null, got a list"),
        ('{"click": 1, "a=b": 1}', "key 'a=b': a field's name"),
        ('{"click": 1, "": 1}', "key '': a field's name"),
    ],
)
def test_a_line_that_is_no_sample_is_refused_naming_why(line, said):
    with pytest.raises(ParseError) as refused:
        _parsed(JSON, line)
    assert said in str(refused.value)


def test_the_format_is_told_from_a_line_and_the_label_from_its_keys():
    assert detect_schema('{"click": 0, "site": "a"}') == JSON
    assert detect_schema('{"y": 1, "site": "a"}').label == "y"
    assert detect_schema('{"clicked_at": 1, "buy": 0}', label="buy") == FeatureSchema(format="json", label="buy")
    assert detect_schema('{"click": 0}', None, JSON_ONLY) == JSON  # --format json
    with pytest.raises(ValueError, match="several label keys \\(click, label\\)"):
        detect_schema('{"click": 0, "label": 1}')
    with pytest.raises(ValueError, match="no label key \\(looked for click, .*its keys: site, price"):
        detect_schema('{"site": "a", "price": 3}')
    with pytest.raises(ValueError, match="no label key 'buy'"):
        detect_schema('{"click": 0}', label="buy")
    with pytest.raises(ValueError, match="not a JSON object"):
        detect_schema("1 3:1", None, JSON_ONLY)
    with pytest.raises(ValueError, match="starts a JSON array .*one JSON object a line"):
        detect_schema('[{"click": 0, "site": "a"},')
