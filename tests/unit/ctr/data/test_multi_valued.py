"""Multi-valued csv fields (schema.multi_valued): a cell such as `Action|Comedy` is one
feature per value; the trainer's kernel, its reference parser and a client sending the
joined text, a list or columns give the same keys; the schema says what it cannot take."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import yaml

from ctr.data.fields import FieldIndex
from ctr.data.schema import FeatureSchema, transform_digest
from protos import predict_pb2
from serving.client import RequestEncoder
from serving.client.predict_client import Value, schema_of
from serving.request.encoding import decode, field_hash_ids
from serving.service import transform_of
from trainer.input.block_parser import BlockParser

SCHEMA = FeatureSchema(format="csv", label="click", numeric=("price",), multi_valued=(("genres", "|"), ("tags", ";")))
HEADER = "click,genres,tags,price,site"
NAMES = ("genres", "tags", "price", "site")
LINES = [
    "1,Action|Comedy,a;b;c,12.5,s1",
    "0,Drama,,3,s2",
    "1,|Action||,;x;,250,s1",  # empty pieces are missing values
    '0,"Comedy|Drama",b,1,s3',  # quoted as a csv writer may
]


def _trainer_keys() -> list[list[int]]:
    parser = BlockParser(SCHEMA, FieldIndex(NAMES), HEADER)
    parser.reference = lambda text: pytest.fail(f"deferred: {text!r}")  # type: ignore[method-assign]
    got = parser.parse("\n".join(LINES).encode() + b"\n", True, 100)
    assert got.bad == [] and got.lines == len(LINES)
    b = got.batch
    return [sorted(b.keys[b.offsets[i] : b.offsets[i + 1]].tolist()) for i in range(len(LINES))]


def _client_keys(enc: RequestEncoder, req, n: int) -> list[list[int]]:
    d = decode(req, len(NAMES), field_hash_ids(NAMES))
    return [sorted(d.keys[d.item_indices[d.item_offsets[i] : d.item_offsets[i + 1]]].tolist()) for i in range(n)]


def test_each_value_of_a_multi_valued_cell_is_a_feature_of_its_field() -> None:
    keys = _trainer_keys()
    assert [len(k) for k in keys] == [2 + 3 + 2, 1 + 2, 1 + 1 + 2, 2 + 1 + 2]
    single = BlockParser(FeatureSchema(format="csv", label="click", numeric=("price",)), FieldIndex(NAMES), HEADER)
    got = single.parse("\n".join(LINES).encode() + b"\n", True, 100).batch
    assert np.diff(got.offsets).tolist() == [4, 3, 4, 4]  # without the schema: the joined text, one feature


def test_a_client_sending_the_joined_text_a_list_or_columns_scores_the_trainers_keys() -> None:
    want = _trainer_keys()
    enc = RequestEncoder(SCHEMA, list(NAMES))
    joined: list[dict[str, Value]] = [
        {"genres": "Action|Comedy", "tags": "a;b;c", "price": 12.5, "site": "s1"},
        {"genres": "Drama", "tags": "", "price": 3, "site": "s2"},
        {"genres": "|Action||", "tags": ";x;", "price": 250, "site": "s1"},
        {"genres": "Comedy|Drama", "tags": "b", "price": 1, "site": "s3"},
    ]
    assert _client_keys(enc, enc.encode(joined), 4) == want
    listed: list[dict[str, Value]] = [
        {"genres": ["Action", "Comedy"], "tags": ["a", "b", "c"], "price": 12.5, "site": "s1"},
        {"genres": ["Drama"], "tags": [], "price": 3, "site": "s2"},
        {"genres": ["Action"], "tags": ["x"], "price": 250, "site": "s1"},
        {"genres": ["Comedy", "Drama"], "tags": ["b"], "price": 1, "site": "s3"},
    ]
    assert _client_keys(enc, enc.encode(listed), 4) == want
    columns = {
        "genres": np.array([r["genres"] for r in joined]),
        "tags": np.array([r["tags"] for r in joined]),
        "price": np.array([12.5, 3, 250, 1]),
        "site": np.array(["s1", "s2", "s1", "s3"]),
    }
    for tokens in (False, True):
        assert _client_keys(enc, enc.encode_columns(columns, tokens=tokens), 4) == want


def test_the_served_transform_carries_the_fields_and_their_separators() -> None:
    schema = FeatureSchema(format="csv", label="click", delimiter=";", multi_valued=(("genres", ","),))
    wire = predict_pb2.FeatureTransform.FromString(transform_of(schema).SerializeToString())
    back = schema_of(wire)
    assert back.multi_valued == (("genres", ","),) and back.delimiter == ";"
    assert transform_digest(["genres"], back) == transform_digest(["genres"], schema)


def test_the_yaml_forms_and_what_the_schema_refuses() -> None:
    listed = FeatureSchema.from_dict(yaml.safe_load("format: csv\nlabel: click\nmulti_valued: [genres, tags]\nseparator: ';'"))
    assert listed.multi_valued == (("genres", ";"), ("tags", ";"))
    mapped = FeatureSchema.from_dict(yaml.safe_load("format: csv\nlabel: click\nmulti_valued: {genres: '|', tags: ';'}"))
    assert mapped == SCHEMA.__class__.from_dict(mapped.to_dict()) and mapped.separator_of("tags") == ";"
    assert FeatureSchema.from_dict({"format": "csv", "multi_valued": ["g"]}).multi_valued == (("g", "|"),)
    refused = {
        "numeric and multi-valued": dict(numeric=("g",)),
        "a cross of a multi-valued field": dict(cross=(("g", "h"),)),
        "separator ','": dict(),  # the csv delimiter
    }
    for why, extra in refused.items():
        sep = "," if why.startswith("separator") else "|"
        with pytest.raises(ValueError, match=why.split(" ")[0]):
            FeatureSchema(format="csv", multi_valued=(("g", sep),), **extra)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="csv input only"):
        FeatureSchema(format="kv", multi_valued=(("g", "|"),))


def test_a_schema_without_multi_valued_fields_keeps_its_digest() -> None:
    """Versions published before multi-valued fields existed keep the digest clients stamp."""
    schema = FeatureSchema(format="csv", label="click", numeric=("n",), skip=("id",), cross=(("a", "b"),))
    text = json.dumps([["a", "b", "n"], ["n"], ["id"], "click", [["a", "b"]]])
    before = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
    assert transform_digest(["a", "b", "n"], schema) == before


def test_rest_rows_and_columns_take_lists_of_values() -> None:
    """REST: in a multi-valued field any list is its values (ids too: [12, 7] is two ids,
    not a weighted feature); elsewhere a list of strings is several values and [token, x]
    a weighted feature; items' lists may differ in length."""
    from serving.rest import column_of, features_of

    multi = frozenset({"genres", "tags"})
    assert features_of({"genres": [12, 7], "site": ["x", "y"]}, "instances[0]", multi) == {"genres": [12, 7], "site": ["x", "y"]}
    assert features_of({"site": ["x", 2]}, "instances[0]") == {"site": ("x", 2.0)}
    want = _trainer_keys()
    enc = RequestEncoder(SCHEMA, list(NAMES))
    rows = [
        {"genres": ["Action", "Comedy"], "tags": "a;b;c", "price": 12.5, "site": "s1"},
        {"genres": ["Drama"], "tags": None, "price": 3, "site": "s2"},
        {"genres": "|Action||", "tags": ["x"], "price": 250, "site": "s1"},
        {"genres": ["Comedy", "Drama"], "tags": ["b", None], "price": 1, "site": "s3"},
    ]
    checked = [features_of(r, f"instances[{i}]", multi) for i, r in enumerate(rows)]
    assert _client_keys(enc, enc.encode(checked), 4) == want
    genres = column_of([["Action", "Comedy"], ["Drama"], ["Action"], ["Comedy", "Drama"]], "inputs.genres", 4)
    assert genres.tolist() == [["Action", "Comedy"], ["Drama", ""], ["Action", ""], ["Comedy", "Drama"]]
    columns = {
        "genres": genres,
        "tags": column_of([["a", "b", "c"], [], ["x"], ["b"]], "inputs.tags", 4),
        "price": np.array([12.5, 3, 250, 1]),
        "site": np.array(["s1", "s2", "s1", "s3"]),
    }
    assert _client_keys(enc, enc.encode_columns(columns), 4) == want
