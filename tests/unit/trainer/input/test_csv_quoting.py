"""CSV files as spreadsheet programs, pandas, R and Python's csv module write them (quoted
fields, a delimiter inside quotes, doubled quotes, a byte order mark, CRLF) train on the
keys a client's raw values score with, and malformed quoting is a bad line that says so."""

from __future__ import annotations

import csv
import io
from dataclasses import replace
from typing import Literal

import numpy as np
import pytest

from ctr.data import formats
from ctr.data.csv_line import CsvQuoteError, header_names
from ctr.data.fields import FieldIndex
from ctr.data.formats import ParseError, make_parser
from ctr.data.schema import FeatureSchema, detect_schema
from serving.client import RequestEncoder
from serving.client.predict_client import Value
from serving.request.encoding import decode, field_hash_ids
from trainer.input.block_parser import BlockParser
from trainer.input.reader import BatchReader
from trainer.input.source import Position, StreamSource

SCHEMA = FeatureSchema(format="csv", label="clicked", numeric=("n",))
ROWS = [
    (1, "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko)", "x", 7.5),
    (0, 'the "best" ad', "y, z", 250.0),
    (1, "plain", "", 0.25),
]
NAMES = ("ua", "site", "n")


def _written(quoting: Literal[0, 1, 2, 3], bom: bool = False, crlf: bool = False) -> bytes:
    out = io.StringIO(newline="")
    w = csv.writer(out, quoting=quoting, lineterminator="\r\n" if crlf else "\n")
    w.writerow(["clicked", *NAMES])
    w.writerows(ROWS)
    return (("\ufeff" if bom else "") + out.getvalue()).encode()


def _keys_by_kernel(data: bytes) -> list[list[int]]:
    """Per sample, the sorted keys the trainer's block parser gives, failing if any line
    went to the reference parser (the kernel reads quoted fields itself)."""
    header, body = data.split(b"\n", 1)
    index = FieldIndex(SCHEMA.base_fields(header.decode()))
    parser = BlockParser(SCHEMA, index, header.decode())
    parser.reference = lambda text: pytest.fail(f"deferred: {text!r}")  # type: ignore[method-assign]
    got = parser.parse(body, True, 100)
    assert got.bad == [] and got.lines == len(ROWS)
    b = got.batch
    return [sorted(b.keys[b.offsets[i] : b.offsets[i + 1]].tolist()) for i in range(len(ROWS))]


def _keys_by_client(rows: list[tuple[int, str, str, float]]) -> list[list[int]]:
    """Per row, the sorted keys of the request a client sends with the row's raw values."""
    enc = RequestEncoder(SCHEMA, list(NAMES))
    out = []
    for _, ua, site, n in rows:
        item: dict[str, Value] = {"ua": ua, "n": n}
        if site:  # an empty field is a missing feature
            item["site"] = site
        d = decode(enc.encode([item]), len(NAMES), field_hash_ids(NAMES))
        out.append(sorted(d.keys.tolist()))
    return out


@pytest.mark.parametrize("quoting", [csv.QUOTE_MINIMAL, csv.QUOTE_ALL, csv.QUOTE_NONNUMERIC])
@pytest.mark.parametrize(("bom", "crlf"), [(False, False), (True, True)])
def test_written_csv_trains_on_the_keys_a_client_scores_with(quoting, bom, crlf):
    data = _written(quoting, bom, crlf).replace(b'"the ""best"" ad"', b'"the best ad"')  # doubled: the next test
    rows = [ROWS[0], (0, "the best ad", "y, z", 250.0), ROWS[2]]
    assert detect_schema(data.split(b"\n", 1)[0].decode()).label == "clicked"
    assert _keys_by_kernel(data) == _keys_by_client(rows)


def test_doubled_quotes_go_to_the_reference_parser_and_agree():
    data = _written(csv.QUOTE_MINIMAL)
    header, body = data.split(b"\n", 1)
    index = FieldIndex(SCHEMA.base_fields(header.decode()))
    got = BlockParser(SCHEMA, index, header.decode()).parse(body, True, 100)
    assert got.bad == []
    b = got.batch
    keys = [sorted(b.keys[b.offsets[i] : b.offsets[i + 1]].tolist()) for i in range(len(ROWS))]
    assert keys == _keys_by_client(ROWS)


def test_the_same_values_quoted_or_not_are_the_same_features():
    plain = b"clicked,ua,site,n\n1,a,x,7.5\n0,b,y,250\n"
    quoted = b'"clicked","ua","site","n"\n"1","a","x","7.5"\n0,"b",y,"250"\n'
    runs = []
    for data in (plain, quoted):
        header, body = data.split(b"\n", 1)
        got = BlockParser(SCHEMA, FieldIndex(SCHEMA.base_fields(header.decode())), header.decode()).parse(body, True, 10)
        runs.append((got.batch.labels.tolist(), got.batch.keys.tolist()))
    assert runs[0] == runs[1]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('1,"unclosed,x,2', "a quoted field is not closed on this line: a line break inside quotes?"),
        ('1,"a"b,x,2', "bad quoting"),
        ("1,a,x", "3 columns, header has 4"),
    ],
)
def test_malformed_quoting_is_a_bad_line_that_says_so(line, why):
    header = "clicked,ua,site,n"
    index = FieldIndex(SCHEMA.base_fields(header))
    got = BlockParser(SCHEMA, index, header).parse((line + "\n1,a,x,2\n").encode(), True, 10)
    assert [b.line for b in got.bad] == [0] and why in got.bad[0].reason
    assert got.batch.labels.tolist() == [1.0]  # the next line trains
    with pytest.raises(ParseError, match=why):
        make_parser(SCHEMA, FieldIndex(SCHEMA.base_fields(header)), header)(line)


def test_a_byte_order_mark_is_not_part_of_the_first_line_in_any_format():
    assert detect_schema("\ufeffclicked,a").label == "clicked"
    assert detect_schema('\ufeff"label","a"').label == "label"
    libsvm = FeatureSchema(format="libsvm")
    parse = make_parser(libsvm, FieldIndex(()))
    assert parse("\ufeff1 3:1 7:2").tokens == parse("1 3:1 7:2").tokens
    header = "\ufeffclicked,ua,site,n"
    parser = BlockParser(SCHEMA, FieldIndex(SCHEMA.base_fields(header)), header)
    assert parser.index.names[:3] == ["ua", "site", "n"]
    assert np.asarray(parser.parse(b"1,a,x,2\n", True, 10).batch.labels).tolist() == [1.0]


def test_a_name_given_twice_is_refused_and_an_unnamed_column_is_not_trained(caplog):
    with pytest.raises(CsvQuoteError, match="names column 'a' twice \\(columns 2 and 4\\)"):
        header_names("clicked,a,b,a", ",")
    assert header_names('"",clicked,a', ",") == ("", "clicked", "a")  # pandas' index column: no name
    formats._warned_unnamed.clear()  # warned once a process: this test's warning is its own
    keys = []
    for header, body in (("clicked,a,b", b"1,x,y\n0,z,y\n"), (",clicked,a,b", b"0,1,x,y\n1,0,z,y\n")):
        index = FieldIndex(SCHEMA.base_fields(header))
        got = BlockParser(SCHEMA, index, header).parse(body, True, 10)
        keys.append(got.batch.keys.tolist())
        assert index.names == ["a", "b"]
    assert keys[0] == keys[1]
    assert "column(s) 1 have no name" in caplog.text


def test_a_file_whose_header_cannot_be_read_is_named_and_the_next_trains(tmp_path, caplog):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text("clicked,ua,site,n\n1,a,x,2\n0,b,y,3\n")
    (folder / "b.csv").write_text("click,ua\n1,a\n0,b\n1,c\n")  # another label column
    (folder / "c.csv").write_text("clicked,ua,site,n\n1,c,z,4\n")
    reader = BatchReader(StreamSource(str(folder), follow=False), SCHEMA, FieldIndex(["ua", "site", "n"]), 2, 1 << 20)
    labels = [x for r in reader.batches() if r is not None for x in r.batch.labels.tolist()]
    assert labels == [1.0, 0.0, 1.0] and reader.bad_lines == 3
    assert reader.first_bad[0].endswith("b.csv:2: not trained: the file's header has no label column 'clicked'")
    assert "b.csv: header has no label column 'clicked'; its lines are not trained" in caplog.text


def test_files_split_from_one_csv_read_with_the_first_files_header(tmp_path):
    """split -l writes the header into part_aa only: part_ab's first line is a sample.
    Each such file was refused whole ("header has no label column"); it reads with the
    stream's header, also for a run taken up inside it."""
    rows = [f"{i % 2},u{i % 5},s{i % 3},{i}" for i in range(9)]
    whole = tmp_path / "whole.csv"
    whole.write_text("clicked,ua,site,n\n" + "\n".join(rows) + "\n")
    folder = tmp_path / "parts"
    folder.mkdir()
    (folder / "part_aa").write_text("clicked,ua,site,n\n" + "\n".join(rows[:3]) + "\n")
    (folder / "part_ab").write_text("\n".join(rows[3:6]) + "\n")
    (folder / "part_ac").write_text("\n".join(rows[6:]) + "\n")

    def read(source: StreamSource) -> tuple[list[float], list[int], int]:
        reader = BatchReader(source, SCHEMA, FieldIndex(["ua", "site", "n"]), 2, 1 << 20)
        got = [r.batch for r in reader.batches() if r is not None]
        return [x for b in got for x in b.labels.tolist()], [k for b in got for k in b.keys.tolist()], reader.bad_lines

    labels, keys, bad = read(StreamSource(str(whole), follow=False))
    assert read(StreamSource(str(folder), follow=False)) == (labels, keys, 0) and bad == 0
    # taken up inside part_ab (its second line): its header comes from part_aa
    inside = Position(str(folder / "part_ab"), len(rows[3]) + 1, 1)
    assert read(StreamSource(str(folder), follow=False, start=inside)) == (labels[4:], keys[4 * 3 :], 0)


def test_a_file_of_another_delimiter_is_named_as_such(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text("clicked,ua,site,n\n1,a,x,2\n")
    (folder / "b.csv").write_text("ua;clicked;site;n\na;1;x;2\n")  # another producer's file
    reader = BatchReader(StreamSource(str(folder), follow=False), SCHEMA, FieldIndex(["ua", "site", "n"]), 2, 1 << 20)
    assert [x for r in reader.batches() if r is not None for x in r.batch.labels.tolist()] == [1.0]
    assert reader.first_bad[0].endswith("b.csv:2: not trained: the file's header has no label column 'clicked' split at ',':"
                                        " it is delimited by ';', as the stream's first file is not")  # fmt: skip
    from trainer.input.bad_input import likely_cause

    assert likely_cause(reader.first_bad, SCHEMA).startswith("the stream's files are delimited differently")


def test_a_schemas_header_names_the_columns_of_lines_without_one(tmp_path):
    """--csv-header: every line is a sample's, and one repeating the header is skipped,
    neither trained nor counted bad (a producer's header message)."""
    (tmp_path / "rows.csv").write_text("1,a,x,2\nclicked,ua,site,n\n0,b,y,3\n")
    schema = replace(SCHEMA, header="clicked,ua,site,n")
    source = StreamSource(str(tmp_path / "rows.csv"), follow=False)
    reader = BatchReader(source, schema, FieldIndex(schema.base_fields()), 10, 1 << 20)
    labels = [x for r in reader.batches() if r is not None for x in r.batch.labels.tolist()]
    assert labels == [1.0, 0.0] and reader.bad_lines == 0
    assert FeatureSchema.from_dict(schema.to_dict()) == schema and "header" not in SCHEMA.to_dict()


def test_a_boolean_label_column_reads_as_pandas_writes_it():
    header = "clicked,ua,site,n"
    runs = []
    for body in (b"1,a,x,2\n0,b,y,3\n", b"True,a,x,2\nFalse,b,y,3\n", b'"true",a,x,2\nFALSE,b,y,3\n'):
        parser = BlockParser(SCHEMA, FieldIndex(SCHEMA.base_fields(header)), header)
        parser.reference = lambda text: pytest.fail(f"deferred: {text!r}")  # type: ignore[method-assign]
        got = parser.parse(body, True, 10)
        runs.append((got.batch.labels.tolist(), got.batch.keys.tolist()))
    assert runs[0] == runs[1] == runs[2] and runs[0][0] == [1.0, 0.0]
    with pytest.raises(ParseError, match="not a number or true/false"):
        make_parser(SCHEMA, FieldIndex(SCHEMA.base_fields(header)), header)("yes,a,x,2")


def test_a_fraction_as_a_label_is_a_bad_line_named_in_the_kernel_and_the_reference_alike():
    """A label of 0.3 is a probability or a rate: read as a click (positive) it trained a
    model on the wrong target without a word. Counts and -1/1 stay clicks and non-clicks."""
    header = "clicked,ua,site,n"
    parser = BlockParser(SCHEMA, FieldIndex(SCHEMA.base_fields(header)), header)
    got = parser.parse(b"2,a,x,2\n-1,b,y,3\n0.3,c,z,4\n1e-3,d,z,4\n1.0,e,z,5\n", True, 10)
    assert got.batch.labels.tolist() == [1.0, 0.0, 1.0]
    assert [(b.line, b.reason.split(";")[0]) for b in got.bad] == [
        (2, "label: '0.3' is a fraction"),
        (3, "label: '1e-3' is a fraction"),
    ]
    for schema, line in ((FeatureSchema(format="libsvm"), "0.5 1:1 2:1"), (FeatureSchema(format="kv"), "0.5\tua=a")):
        with pytest.raises(ParseError, match="is a fraction"):
            make_parser(schema, FieldIndex(), "")(line)
    from trainer.input.bad_input import likely_cause

    assert likely_cause(["f.csv:3: label: '0.3' is a fraction; ..."], SCHEMA).startswith("the label column holds")


@pytest.mark.parametrize("marker", ["NA", "NaN", "nan", "NULL", "null", "None", "\\N", "#N/A", "N/A", ""])
def test_a_missing_number_is_a_missing_feature_in_a_numeric_column(marker):
    """R writes NA, Hive \\N, SQL NULL: the sample trains without the feature, as with an
    empty field, in the kernel and the reference alike; in a categorical column NA is a
    value (North America)."""
    header = "clicked,ua,site,n"
    parser = BlockParser(SCHEMA, FieldIndex(SCHEMA.base_fields(header)), header)
    parser.reference = lambda text: pytest.fail(f"deferred: {text!r}")  # type: ignore[method-assign]
    got = parser.parse(f"1,a,x,{marker}\n1,a,x,\n".encode(), True, 10).batch
    assert got.offsets.tolist() == [0, 2, 4] and got.keys[:2].tolist() == got.keys[2:].tolist()
    sample = make_parser(SCHEMA, FieldIndex(SCHEMA.base_fields(header)), header)(f"1,a,{marker},{marker}")
    assert sample.tokens == (["a", marker] if marker else ["a"])
    enc = RequestEncoder(SCHEMA, list(NAMES))
    assert decode(enc.encode([{"ua": "a", "n": marker}]), 3, field_hash_ids(NAMES)).keys.shape == (1,)


def test_a_parquet_file_names_its_own_columns_under_a_schemas_header(tmp_path):
    """--csv-header is for lines without a header; a Parquet file beside them keeps its own
    column order (else its values would land in the header's columns)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text("1,a,x,2\n")
    pq.write_table(pa.table({"site": ["x"], "n": ["2"], "clicked": ["1"], "ua": ["a"]}), folder / "b.parquet")
    schema = replace(SCHEMA, header="clicked,ua,site,n")
    reader = BatchReader(StreamSource(str(folder), follow=False), schema, FieldIndex(schema.base_fields()), 10, 1 << 20)
    batches = [r.batch for r in reader.batches() if r is not None]
    keys = [sorted(b.keys[b.offsets[i] : b.offsets[i + 1]].tolist()) for b in batches for i in range(len(b.labels))]
    assert len(keys) == 2 and keys[0] == keys[1] and reader.bad_lines == 0


def test_a_file_with_its_own_header_in_another_order_is_read_by_it_under_a_schemas_header(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text("1,a,x,2\n")  # headerless: the flag's order
    (folder / "b.csv").write_text("site,n,clicked,ua\nx,2,1,a\n")  # its own order
    (folder / "c.csv").write_text("clicked,ua,site,n\n1,a,x,2\n")  # the flag's header repeated
    schema = replace(SCHEMA, header="clicked,ua,site,n")
    for start in (Position(), Position(str(folder / "b.csv"), 18, 1)):  # from the start, and resumed inside b.csv
        source = StreamSource(str(folder), follow=False, start=start)
        reader = BatchReader(source, schema, FieldIndex(schema.base_fields()), 10, 1 << 20)
        batches = [r.batch for r in reader.batches() if r is not None]
        keys = [sorted(b.keys[b.offsets[i] : b.offsets[i + 1]].tolist()) for b in batches for i in range(len(b.labels))]
        assert len(set(map(tuple, keys))) == 1 and reader.bad_lines == 0, keys
