import logging

import pytest

from ctr.data.fields import FieldIndex
from ctr.data.formats import ParseError, make_parser, resolve_fields
from ctr.data.schema import DELIMITED, PRESETS, FeatureSchema, detect_schema

FILES = [
    ("criteo_10k/train_rows1-10000.tsv", "criteo", 10000),
    ("criteo_small/pytorchfm_jqsl_train.txt", "criteo", None),
    ("avazu_10k/train_rows1-9999.csv", "csv", 9999),
    ("avazu_small/deepctr_avazu_sample.txt", "csv", 100),
    ("criteo_small/deepctr_criteo_sample.txt", "csv", 200),
    ("criteo_small/xlearn_small_train.txt", "libffm", 200),
    ("frappe/frappe.validation.libfm", "libsvm", 57722),
    ("ipinyou/train.fm.txt", "libsvm", 26773),
    ("talkingdata/train_sample.csv", "csv", 100000),
]


@pytest.mark.slow
@pytest.mark.parametrize("path,fmt,rows", FILES)
def test_real_files_parse_whole(data_dir, path, fmt, rows):
    lines = (data_dir / path).read_text().splitlines()
    schema = detect_schema(lines[0])
    assert schema.format == fmt
    header = lines[0] if fmt == "csv" else None
    parse = make_parser(schema, FieldIndex(), header)
    body = lines[1:] if header else lines
    samples = [parse(line) for line in body]
    if rows is not None:
        assert len(samples) == rows
    assert all(s.label in (0.0, 1.0) for s in samples)
    assert sum(len(s.tokens) for s in samples) > len(samples)


def test_criteo_ragged_rows_treat_missing_trailing_fields_as_empty(data_dir):
    lines = (data_dir / "criteo_small/pytorchfm_jqsl_train.txt").read_text().splitlines()
    ragged = [line for line in lines if len(line.split("\t")) < 40]
    assert ragged, "the file is known to hold rows of 37 and 38 columns"
    parse = make_parser(PRESETS["criteo"], FieldIndex())
    for line in ragged:
        s = parse(line)
        assert len(s.tokens) <= len(line.split("\t")) - 1


def test_criteo_numeric_bucketing():
    s = make_parser(PRESETS["criteo"], FieldIndex())("1\t5\t\t0\t" + "\t".join(["1"] * 10) + "\tab")
    assert s.tokens[:2] == ["b2", "v0"]  # floor(ln(5)^2) = 2; empty I2 is missing
    assert s.tokens[-1] == "ab" and len(s.tokens) == 13


@pytest.mark.parametrize(
    "fmt,line,needle",
    [
        ("criteo", "x\t1\t2", "label"),
        ("criteo", "1\tabc\t2", "field I1"),  # a number or a missing marker (nan, NA): neither
        ("libsvm", "1 5:1 bad", "feature 2"),
        ("libffm", "0 1:2 3:4:5", "feature 1"),
        ("kv", "1\tuser=3\tnoequals", "column 3"),
    ],
)
def test_malformed_lines_name_what_is_wrong(fmt, line, needle):
    with pytest.raises(ParseError, match=needle):
        make_parser(PRESETS[fmt], FieldIndex())(line)


def test_csv_column_count_mismatch():
    parse = make_parser(PRESETS["avazu"], FieldIndex(), "id,click,site")
    with pytest.raises(ParseError, match="3"):
        parse("1,0")


def test_trainer_reports_bad_line_as_file_line_and_keeps_going(tmp_path, caplog):
    import argparse
    import json

    from trainer import daemon as server

    path = tmp_path / "samples.libsvm"
    good = ["1 3:1 7:1", "0 4:1 9:1"] * 50
    lines = good[:10] + ["1 3:1 oops"] + good[10:]
    path.write_text("\n".join(lines) + "\n")
    parser = argparse.ArgumentParser(allow_abbrev=False)
    server.add_arguments(parser)
    out = tmp_path / "m.json"
    args = parser.parse_args(
        ["--source", str(path), "--no-follow", "--metrics-port", "-1", "--metrics-out", str(out), "--batch-size", "16"]
    )
    with caplog.at_level(logging.WARNING, logger="trainer"):
        assert server.run(args) == 0
    assert f"{path}:11: feature 2" in caplog.text
    result = json.loads(out.read_text())
    assert result["samples"] == 100 and result["bad_lines"] == 1


@pytest.mark.parametrize(
    "schema,lines,needle",
    [
        ({"format": "csv", "label": "click", "fields": ["site", "app"]}, ["click,site,device", "1,a,b"], "'app'"),
        ({"format": "csv", "label": "click", "fields": ["site"]}, ["click,site,device", "1,a,b"], "'device'"),
        ({"format": "kv", "fields": ["user"]}, ["1\tuser=3\titem=4"], "'item'"),
        ({"format": "libffm", "fields": ["0", "1"]}, ["1 0:1:1 5:2:1"], "'5'"),
        ({"format": "criteo", "fields": ["I1", "Z9"]}, [], "Z9"),
        ({"format": "criteo", "cross": [["C1", "C99"]]}, [], "C99"),
        # a misspelt numeric or multi-valued column would train the column it meant as plain text
        (
            {"format": "csv", "label": "click", "numeric": ["prize"]},
            ["click,site,price", "1,a,2.5"],
            r"schema.numeric: \['prize'\]",
        ),
        ({"format": "csv", "label": "click", "multi_valued": ["genre"]}, ["click,genres", "1,a|b"], "schema.multi_valued"),
    ],
)
def test_a_schema_that_does_not_fit_the_data_is_refused_naming_the_setting(schema, lines, needle):
    from ctr.data.formats import resolve_fields
    from ctr.data.schema import FeatureSchema

    with pytest.raises(ValueError, match=needle):
        resolve_fields(FeatureSchema.from_dict(schema), lines, freeze=True)


@pytest.mark.parametrize(
    "raw,needle",
    [
        ([1, 2], "schema: expected a mapping of settings"),
        ({"format": "csv", "numeric": {"price": 1}}, "schema.numeric: expected a list of column names"),
        ({"format": "csv", "skip": [["id"]]}, "schema.skip: expected a list of column names"),
        ({"format": "csv", "max_fields": "many"}, "schema.max_fields: expected a whole number"),
    ],
)
def test_a_schema_yaml_of_the_wrong_shape_is_refused_naming_the_setting(raw, needle):
    from ctr.data.schema import FeatureSchema

    with pytest.raises(ValueError, match=needle):
        FeatureSchema.from_dict(raw)


def test_one_column_name_alone_is_a_list_of_one():
    from ctr.data.schema import FeatureSchema

    schema = FeatureSchema.from_dict({"format": "csv", "numeric": "price", "skip": "id", "fields": ["a", 7]})
    assert schema.numeric == ("price",) and schema.skip == ("id",) and schema.fields == ("a", "7")


def test_skipped_columns_may_be_left_out_of_the_field_list():
    from ctr.data.formats import resolve_fields
    from ctr.data.schema import FeatureSchema

    schema = FeatureSchema.from_dict({"format": "csv", "label": "click", "fields": ["site"], "skip": ["device"]})
    assert resolve_fields(schema, ["click,site,device", "1,a,b"], freeze=True).names == ["site"]


@pytest.mark.parametrize("delim", [",", "\t", ";", "|"])
def test_a_header_with_a_label_is_detected_as_csv_by_its_delimiter(delim):
    schema = detect_schema(delim.join(["click", "site", "app"]))
    assert (schema.format, schema.label, schema.delimiter) == ("csv", "click", delim)
    criteo_header = delim.join(["label", *(f"I{i}" for i in range(1, 14)), *(f"C{i}" for i in range(1, 27))])
    assert detect_schema(criteo_header).numeric[:2] == ("I1", "I2")  # Criteo's columns by name, not headerless Criteo
    assert detect_schema(delim.join(["a", "is_attributed"])).skip == PRESETS["talkingdata"].skip


def test_headerless_lines_are_not_taken_for_headers():
    assert detect_schema("\t".join(["1", *["5"] * 38])).format == "criteo"
    assert detect_schema("1 3:1 5:2").format == "libsvm"
    assert detect_schema("0\tsite=a\tapp=b").format == "kv"
    with pytest.raises(ValueError, match="no label column 'y'.*its columns: a, b"):
        detect_schema("a\tb", label="y")
    with pytest.raises(ValueError, match="looked for click"):
        detect_schema("a,b,c")


def test_format_csv_or_tsv_takes_only_a_header_so_delimited_that_names_the_label():
    assert detect_schema("id;conv;site", "conv", DELIMITED["csv"]).delimiter == ";"
    assert detect_schema("conv\tsite", "conv", DELIMITED["tsv"]).delimiter == "\t"
    assert detect_schema("click,site", None, DELIMITED["csv"]).label == "click"
    with pytest.raises(ValueError, match=r"not a header delimited by '\\t' that names the label column \('conv'\)"):
        detect_schema("id,conv,site", "conv", DELIMITED["tsv"])
    with pytest.raises(ValueError, match="not a header delimited by"):
        detect_schema("1 3:1 5:2", None, DELIMITED["csv"])  # libsvm: not taken for csv
    with pytest.raises(ValueError, match="one of click, label"):
        detect_schema("a,b,c", None, DELIMITED["csv"])
    assert PRESETS["libfm"] == PRESETS["libsvm"]  # libFM's text format


def test_the_transform_digest_changes_with_what_changes_a_features_encoding_only():
    from dataclasses import replace

    from ctr.data.schema import FeatureSchema, transform_digest

    base = FeatureSchema(format="csv", label="click", numeric=("n",), skip=("id",), cross=(("a", "b"),))
    digest = transform_digest(("a", "b", "n"), base)
    assert digest == transform_digest(["a", "b", "n"], replace(base, delimiter=";", format="kv"))  # not the file's shape
    for other in (
        transform_digest(("b", "a", "n"), base),  # another field order: other slots
        transform_digest(("a", "b", "n"), replace(base, numeric=())),
        transform_digest(("a", "b", "n"), replace(base, skip=())),
        transform_digest(("a", "b", "n"), replace(base, cross=())),
        transform_digest(("a", "b", "n"), replace(base, label="y")),
    ):
        assert other != digest and other != 0


def test_svmlight_comments_and_query_ids_are_not_features():
    """SVMlight's '# info' to the line's end and its qid:N before the features: the comment
    was a bad line, and qid took field 0, moving every feature after it one field on."""
    schema = FeatureSchema(format="libsvm")
    parse = make_parser(schema, resolve_fields(schema, [], freeze=False), None)
    plain = parse("1 1:0.5 2:1")
    for line in ("1 qid:7 1:0.5 2:1 # doc 42", "1 1:0.5 2:1 #doc42", "1 qid:7 1:0.5 2:1"):
        got = parse(line)
        assert (got.fields, got.tokens, got.values) == (plain.fields, plain.tokens, plain.values), line
    assert parse("0 qid:3 # nothing else").fields == []
    for bad, why in (("1 qid:x 1:1", "a qid is a whole number"), ("1 qid: 1:1", "a qid is a whole number")):
        with pytest.raises(ParseError, match=why):
            parse(bad)
    assert detect_schema("1 qid:7 1:0.5 2:1 # doc").format == "libsvm"


def test_a_header_naming_several_label_columns_is_refused_unless_told_which():
    """The first usual name was the label and the others features: a second label column
    (a copy, a conversion) trained as a feature leaks the label into the model."""
    with pytest.raises(ValueError, match=r"names several label columns \(click, y\): say which is the label with --label"):
        detect_schema("click,y,site")
    assert detect_schema("click,y,site", label="click").label == "click"
    assert detect_schema("click,site").label == "click"
