"""Vowpal Wabbit's text format as input: a namespace is a field, a feature's name its token,
its value (times the namespace's scale) its value; detected from a line; the numba kernel
and the reference parser give the same batches (also in test_block_parser's generated
streams), and a file in it trains as the same features written as kv."""

from __future__ import annotations

import re

import numpy as np
import pytest

from ctr.data.fields import FieldIndex
from ctr.data.formats import ParseError, make_parser
from ctr.data.schema import PRESETS, FeatureSchema, detect_schema
from trainer.input.block_parser import BlockParser


@pytest.mark.parametrize(
    ("line", "fmt"),
    [
        ("1 |user alice |item x:0.5", "vw"),
        ("-1 1.0 'row7|user alice", "vw"),
        ("0 row7|user alice", "vw"),  # a tag against the '|'
        ("click|site|app", "csv"),  # a header delimited by '|' starts with a name
        ("1 |user", ""),  # namespaces with no feature: a headerless pipe-delimited row, not VW
        ("1 3:1 7:1", "libsvm"),
    ],
)
def test_a_vw_line_is_told_from_the_other_formats(line, fmt):
    if not fmt:
        with pytest.raises(ValueError, match="cannot tell the format"):
            detect_schema(line)
        with pytest.raises(ValueError, match="cannot tell the format"):
            detect_schema("1|a|b")
        return
    assert detect_schema(line).format == fmt


def test_namespaces_are_fields_and_values_are_scaled():
    index = FieldIndex()
    parse = make_parser(PRESETS["vw"], index)
    s = parse("1 1 'tag|user alice bob:2 |item:0.5 x:3 y | plain")
    assert s.label == 1.0 and index.names == ["user", "item", "default"]
    assert list(zip(s.fields, s.tokens, s.values, strict=True)) == [
        (0, "alice", 1.0),
        (0, "bob", 2.0),
        (1, "x", 1.5),
        (1, "y", 0.5),
        (2, "plain", 1.0),
    ]
    assert parse("-1 |user carol").label == 0.0


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("1 2 |user a", "an importance weight other than 1, or a base, is not supported"),
        ("1 1 0.5 |user a", "'0.5' before the first '|'"),
        ("1 word |user a", "neither an importance weight nor a tag"),
        ("1 user a", "no '|' before the features"),
        ("0.3 |user a", "is a fraction"),
        ("1 |user a:x", "value 'x' is not a number"),
        ("1 |user :2", "has no name"),
        ("1 |:2 a", "a namespace with a scale ('2') and no name"),
    ],
)
def test_what_vw_lines_cannot_say_here_is_named(line, why):
    with pytest.raises(ParseError, match=re.escape(why)):
        make_parser(PRESETS["vw"], FieldIndex())(line)
    got = BlockParser(PRESETS["vw"], FieldIndex()).parse(f"{line}\n".encode(), True, 10)
    assert len(got.batch.labels) == 0 and why in got.bad[0].reason  # the kernel defers it to the reference


def test_skipped_namespaces_and_numeric_settings():
    schema = FeatureSchema(format="vw", skip=("id",))
    index = FieldIndex()
    s = make_parser(schema, index)("1 |id 7 |user a")
    assert s.tokens == ["a"] and index.names == ["user"]
    with pytest.raises(ValueError, match="a Vowpal Wabbit feature carries its own value"):
        FeatureSchema(format="vw", numeric=("price",))


def test_a_real_file_in_vw_parses_as_the_same_features_in_kv(data_dir):
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:5000]
    vw, kv = [], []
    for line in lines:
        label, *feats = line.split()
        names = [f.split(":")[0] for f in feats]
        vw.append(label + " " + " ".join(f"|f{i} {x}" for i, x in enumerate(names)))
        kv.append(label + "\t" + "\t".join(f"f{i}={x}" for i, x in enumerate(names)))
    got = {}
    for fmt, text in (("vw", vw), ("kv", kv)):
        parser = BlockParser(PRESETS[fmt], FieldIndex())
        parser.parse(("\n".join(text[:50]) + "\n").encode(), True, 50)  # the fields, grown by the reference
        got[fmt] = parser.parse(("\n".join(text) + "\n").encode(), True, len(text)).batch
    for name in ("labels", "offsets", "keys", "fields", "values"):
        assert np.array_equal(getattr(got["vw"], name), getattr(got["kv"], name)), name
