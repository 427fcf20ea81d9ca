"""The likely cause a mostly bad stream is refused with (trainer.input.bad_input)."""

from __future__ import annotations

from ctr.data.schema import FeatureSchema
from trainer.input.bad_input import likely_cause

SCHEMA = FeatureSchema(format="csv", label="click")


def test_text_that_is_not_utf8_is_named_as_such_with_its_bytes(tmp_path):
    """A Latin-1 export: the cause was 'the format is not told by the first bad line (csv
    header has no label column ...)', which sent the user after the wrong thing."""
    path = tmp_path / "latin.csv"
    path.write_bytes("click,city\n1,Köln\n0,Bonn\n".encode("latin-1"))
    cause = likely_cause([f"{path}:2: line is not valid UTF-8"], SCHEMA)
    assert cause.startswith("the file is not UTF-8 text (its first such bytes: b'\\xf6ln") and "iconv" in cause
    assert likely_cause(["gone.csv:2: line is not valid UTF-8"], SCHEMA).startswith("the file is not UTF-8 text: write it")
