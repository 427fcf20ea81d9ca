"""A file scored by eval or predict: bad lines counted, the first named, a mostly bad file
refused, and figures that are not defined printed as n/a, not nan or inf."""

from __future__ import annotations

import pytest

from ctr.data.fields import FieldIndex
from ctr.data.formats import make_parser
from ctr.data.sample_file import SHOWN, check_bad, check_fields, figure, parse_file
from ctr.data.schema import FeatureSchema

PARSE = make_parser(FeatureSchema(format="libsvm"), FieldIndex(), "")


def test_bad_lines_are_counted_the_first_named_and_a_file_mostly_bad_is_refused(capsys):
    body = ["1 1:1", "0.5 1:1", "0 2:1"] + ["x 1:1"] * 8
    parsed = parse_file(body, PARSE, "f.svm", 1)
    assert len(parsed.samples) == 2 and parsed.bad == 9 and len(parsed.first_bad) == SHOWN
    assert parsed.first_bad[0].startswith("f.svm:2: label: '0.5' is a fraction")
    with pytest.raises(ValueError, match=r"--data f.svm: 9 of 11 lines are bad \(over --max-bad-fraction 0.1\)"):
        check_bad(parsed, "f.svm", 0.1)
    check_bad(parsed, "f.svm", 0.9)  # allowed: the first named on stderr, and the count
    err = capsys.readouterr().err
    assert "f.svm:2: label" in err and "f.svm: 9 bad lines skipped in all" in err
    with pytest.raises(ValueError, match="1 of 1 lines are bad"):
        check_bad(parse_file(["x"], PARSE, "g", 1), "g", 1.0)  # nothing parsed: never figures


def test_figures_not_defined_read_n_a():
    assert figure(float("nan")) == "n/a" and figure(float("inf"), 3) == "n/a" and figure(0.5, 3) == "0.500"


def test_features_of_fields_the_model_lacks_are_said_and_a_file_of_none_of_its_fields_refused():
    header = "click,site,app,foo"
    fields = FieldIndex(["site", "app"], frozen=True)
    parse = make_parser(FeatureSchema(format="csv", label="click"), fields, header)
    parsed = parse_file(["1,s1,a1,z", "0,s2,a2,z"], parse, "f.csv", 2)
    assert check_fields(parsed.samples, fields, "f.csv", "ctr") == (
        "f.csv: dropped 2 features of fields model 'ctr' does not have: foo (scored as absent)"
    )
    alien = FieldIndex(["site", "app"], frozen=True)
    parse_other = make_parser(FeatureSchema(format="csv", label="click"), alien, "click,foo,bar")
    other = parse_file(["1,x,y", "0,x,z"], parse_other, "g.csv", 2)
    with pytest.raises(ValueError, match=r"g.csv: none of its features is of a field model 'ctr' has \(the file's: bar, foo"):
        check_fields(other.samples, alien, "g.csv", "ctr")
