"""How a field's numbers were written in training (ctr.data.number_text): found from the
stream's first lines, and applied to a client's numbers, row by row and by column."""

from __future__ import annotations

import numpy as np
import pytest

from ctr.data.formats import make_parser, resolve_fields
from ctr.data.number_text import DECIMAL, INT, detect, render, render_column, style_of
from ctr.data.sample_file import parse_file
from ctr.data.schema import FeatureSchema


@pytest.mark.parametrize(
    ("token", "style"),
    [
        ("1005", INT), ("0", INT), ("-3", INT), ("007", None), ("+5", None), ("1005.0", DECIMAL), ("0.25", DECIMAL),
        ("-2.5", DECIMAL), ("1005.00", None), ("1e5", None), (".5", None), ("1fbe01fe", None), ("", None), ("nan", None),
    ],
)  # fmt: skip
def test_a_token_has_the_style_python_writes_a_number_in(token: str, style: str | None) -> None:
    assert style_of(token) == style
    if style == INT:
        assert str(int(token)) == token
    if style == DECIMAL:
        assert repr(float(token)) == token


def test_fields_written_in_one_style_are_found_and_mixed_ones_left_alone() -> None:
    schema = FeatureSchema(format="csv", label="click", numeric=("n",))
    lines = ["click,hour,site,price,mixed,n", "1,14102100,1fbe01fe,1.5,3,7", "0,14102101,85f751fd,2.0,3.5,8"]
    lines.append("0,14102102,12345678,,x,9")
    index = resolve_fields(schema, lines, freeze=False)
    found = detect(parse_file(lines[1:], make_parser(schema, index, lines[0]), "f.csv", 2).samples, index, skip=("n",))
    assert found == (("hour", INT), ("site", INT), ("price", DECIMAL))  # site: its all-digit id; n: bucketed


def test_numbers_are_rendered_in_their_fields_style() -> None:
    assert render(1005.0, INT) == 1005 and render(np.float32(7.0), INT) == 7
    assert render(1005.5, INT) == 1005.5 and render(float("inf"), INT) == float("inf")
    assert render(1005, DECIMAL) == "1005.0" and render(np.int64(3), DECIMAL) == "3.0"
    assert render(True, DECIMAL) is True and render("1005", INT) == "1005" and render(1005.0, None) == 1005.0


def test_columns_are_rendered_in_their_fields_style() -> None:
    whole = np.array([1005.0, 1002.0])
    assert render_column(whole, INT).dtype == np.int64 and render_column(whole, INT).tolist() == [1005, 1002]
    for kept in (np.array([1005.0, 0.5]), np.array([1005.0, np.inf]), np.array([2.0**60])):
        assert render_column(kept, INT) is kept  # not all whole (or past float's exact integers): as it was
    # pandas' integer column with a missing value: the value missing, the others as integers
    assert render_column(np.array([1005.0, np.nan, -3.0]), INT).tolist() == ["1005", "", "-3"]
    assert render_column(np.array([[0.5, np.nan]]), DECIMAL).tolist() == [["0.5", ""]]
    assert render_column(np.array([1.0, 2.0]), None).dtype.kind == "f"
    assert render_column(np.array([[1, 2], [3, 4]]), DECIMAL).tolist() == [["1.0", "2.0"], ["3.0", "4.0"]]
    ints = np.array([1, 2])
    assert render_column(ints, INT) is ints and render_column(ints, None) is ints


def test_the_schema_carries_the_styles_and_refuses_others() -> None:
    schema = FeatureSchema(format="csv", label="click", number_text=(("hour", INT),))
    assert FeatureSchema.from_dict(schema.to_dict()) == schema
    assert "number_text" not in FeatureSchema(format="csv").to_dict()  # versions before it stay as they were
    with pytest.raises(ValueError, match="'hex' is not 'int' or 'decimal'"):
        FeatureSchema.from_dict({"format": "csv", "number_text": {"hour": "hex"}})


def test_lines_that_do_not_parse_are_left_out_by_parse_file() -> None:
    schema = FeatureSchema(format="csv", label="click")
    lines = ["click,a,b", '1,"x,3', '0,5,"q"z', "1,7,8", "x,9,9"]
    index = resolve_fields(schema, lines, freeze=False)
    samples = parse_file(lines[1:], make_parser(schema, index, lines[0]), "f.csv", 2).samples
    assert detect(samples, index) == (("a", INT), ("b", INT))
