"""The numba block parser against the reference line parsers: identical batches, bad lines
and field indices, on every real file and on generated nasty lines."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctr.data.batch import SampleBatch, build_batch
from ctr.data.fields import FieldIndex
from ctr.data.formats import ParsedSample, ParseError, make_parser, parse_number, resolve_fields
from ctr.data.schema import FeatureSchema, detect_schema
from trainer.input import block_kernels as k
from trainer.input.block_parser import BlockParser

REAL_FILES = [
    "avazu_10k/train_rows1-9999.csv",
    "avazu_small/deepctr_avazu_sample.txt",
    "criteo_10k/train_rows1-10000.tsv",
    "criteo_small/deepctr_criteo_sample.txt",
    "criteo_small/pytorchfm_jqsl_train.txt",
    "criteo_small/xlearn_small_test.txt",
    "criteo_small/xlearn_small_train.txt",
    "frappe/frappe.test.libfm",
    "frappe/frappe.validation.libfm",
    "ipinyou/test.fm.txt",
    "ipinyou/train.fm.txt",
    "talkingdata/train_sample.csv",
]


def lines_of(body: bytes) -> list[bytes]:
    """The lines the stream reader hands over: split at \\n; a last unterminated piece only
    when it holds more than whitespace."""
    parts = body.split(b"\n")
    tail = parts.pop()
    return parts + ([tail] if tail.strip() else [])


def reference(
    schema: FeatureSchema,
    index: FieldIndex,
    header: str | None,
    lines: list[bytes],
    max_line_bytes: int,
    lists: tuple[str, ...] = (),
) -> tuple[SampleBatch, list[tuple[int, str]]]:
    parse = make_parser(schema, index, header, lists)
    samples: list[ParsedSample] = []
    bad: list[tuple[int, str]] = []
    for i, raw in enumerate(lines):
        if len(raw) > max_line_bytes:
            bad.append((i, f"line is longer than {max_line_bytes} bytes"))
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            bad.append((i, "line is not valid UTF-8"))
            continue
        try:
            samples.append(parse(text))
        except ParseError as e:
            bad.append((i, str(e)))
    return build_batch(samples, index.ids()), bad


def by_blocks(parser: BlockParser, body: bytes, block_lines: int) -> tuple[SampleBatch, list[tuple[int, str]]]:
    parts: list[SampleBatch] = []
    bad: list[tuple[int, str]] = []
    cut = body.rfind(b"\n") + 1
    if not body[cut:].strip():
        body = body[:cut]  # the reader never hands over a tail of whitespace
    pos = line = 0
    ascii_only = bool(body) and max(body) < 0x80  # as the reader checks each block
    while pos < len(body):
        got = parser.parse(body[pos:], True, block_lines, ascii_only)
        parts.append(got.batch)
        bad += [(line + b.line, b.reason) for b in got.bad]
        line += got.lines
        pos += got.consumed
    if not parts:
        parts.append(build_batch([], parser.index.ids()))
    sizes = np.cumsum([0] + [len(p.keys) for p in parts[:-1]])
    total = sum(len(p.keys) for p in parts)
    offsets = np.concatenate([p.offsets[:-1] + s for p, s in zip(parts, sizes, strict=True)] + [[total]])
    joined = SampleBatch(
        np.concatenate([p.labels for p in parts]),
        offsets.astype(np.int64),
        np.concatenate([p.keys for p in parts]),
        np.concatenate([p.fields for p in parts]),
        np.concatenate([p.values for p in parts]),
    )
    return joined, bad


def assert_same(a: SampleBatch, b: SampleBatch) -> None:
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.offsets, b.offsets)
    np.testing.assert_array_equal(a.keys, b.keys)
    np.testing.assert_array_equal(a.fields, b.fields)
    np.testing.assert_array_equal(a.values, b.values)


def check(
    schema: FeatureSchema,
    make_index,
    header: str | None,
    body: bytes,
    block_lines: int,
    max_line_bytes: int,
    lists: tuple[str, ...] = (),
) -> None:
    ref_index, blk_index = make_index(), make_index()
    want, want_bad = reference(schema, ref_index, header, lines_of(body), max_line_bytes, lists)
    got, got_bad = by_blocks(BlockParser(schema, blk_index, header, max_line_bytes, lists), body, block_lines)
    assert got_bad == want_bad
    assert_same(got, want)
    assert blk_index.names == ref_index.names
    assert blk_index.dropped == ref_index.dropped


@pytest.mark.slow
@pytest.mark.parametrize("path", REAL_FILES)
def test_real_files_give_identical_batches(data_dir, path):
    data = (data_dir / path).read_bytes()
    first = data.split(b"\n", 1)[0].decode()
    schema = detect_schema(first)
    header = first if schema.format == "csv" else None
    body = data.split(b"\n", 1)[1] if header else data
    head = data[:200_000].decode(errors="replace").splitlines()
    check(schema, lambda: resolve_fields(schema, head, freeze=False), header, body, 999, 1 << 20)


# --- generated lines -------------------------------------------------------------------

NUMBERS = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(
        ["", "nan", "inf", "-inf", "1e999", "-1e400", "1_0", " 5", "5 ", "٣", "0x10", ".", "1.", ".5", "+3", "-0", "2"]
        + ["2.0000000001", "1e-30", "123456789012345678901234", "0.1", "9007199254740993", "3.5e38", "-9.3e18"]
        + ["1e22", "1e23", "00", "NA", "NaN", "\\N", "NULL", "#N/A", "N/", "Na", "none"]
    ),
)
NAMES = st.sampled_from(["a", "b", "n", "s", "C1", "C2", "I1", "0", "1", "7", "٣", "é", "x y", ""])
TEXT = st.text(alphabet=st.sampled_from(list('ab01:=, \t.-é\x1f"')), max_size=6)
JUNK = st.sampled_from(
    [b"\xff", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\xe2\x82", b"\r", b"\x00", b"\xc3\xa9", b"\xef\xbb\xbf"]
)


def _csv_field(draw, text: str) -> str:
    """A csv field as writers quote it (the delimiter and doubled quotes inside), or not."""
    how = draw(st.integers(0, 3))
    if how == 1:
        return '"' + text.replace('"', '""') + '"'
    if how == 2:  # malformed: unclosed, or text after the closing quote
        return draw(st.sampled_from(['"' + text, '"' + text + '"x']))
    return text


ENDINGS = st.sampled_from([b"\n", b"\r\n", b"\r\r\n", b" \n"])


def _line(draw, fmt: str) -> bytes:
    label = draw(st.one_of(st.sampled_from(["0", "1", "-1", "2", "True", "false", "TRUE", "tru", "falsey"]), NUMBERS))
    n = draw(st.integers(0, 6))
    if fmt == "criteo":
        cols = [draw(NUMBERS) if i < 3 else draw(TEXT) for i in range(n * 7)]
        text = "\t".join([label, *cols])
    elif fmt == "csv":
        width = draw(st.sampled_from([4, 4, 4, 3, 5]))
        cols = [label, draw(TEXT), draw(TEXT), draw(NUMBERS)][:width] + ["x"] * (width - 4)
        text = ",".join(_csv_field(draw, c) for c in cols)
    elif fmt == "libsvm":  # with SVMlight's qid:N first and # comments, now and then
        toks = [f"{draw(TEXT)}:{draw(NUMBERS)}" if draw(st.booleans()) else draw(TEXT) for _ in range(n)]
        qid = draw(st.sampled_from(["", "", "", "qid:3", "qid:", "qid:x", "qid:12 qid:4", "#c"]))
        comment = draw(st.sampled_from(["", "", "", "# doc 7", "#x:1", " #", "#"]))
        text = " ".join([label, *([qid] if qid else []), *toks]) + comment
    elif fmt == "libffm":
        toks = [f"{draw(NAMES)}:{draw(TEXT)}:{draw(NUMBERS)}" if draw(st.integers(0, 4)) else draw(TEXT) for _ in range(n)]
        text = draw(st.sampled_from([" ", "  ", "\t"])).join([label, *toks])
    elif fmt == "vw":  # a weight and a tag before the first '|', namespaces with scales, nasty names
        head = [label, *([draw(st.sampled_from(["1", "2", "1.0", "'t", "0.5", "t"]))] if draw(st.integers(0, 2)) == 0 else [])]
        text = " ".join(head)
        for _ in range(n):
            feats = [
                f"{draw(TEXT)}:{draw(NUMBERS)}" if draw(st.booleans()) else draw(TEXT) for _ in range(draw(st.integers(0, 3)))
            ]
            ns = draw(st.sampled_from(["", "a", "n", "s", "b:2", "a:0.5", ":3", "é", "a:x"]))
            text += draw(st.sampled_from([" |", "|", " | "])) + ns + (" " if feats else "") + " ".join(feats)
    elif fmt == "json":  # objects with nested ones, lists, null and true/false; now and then cut short
        values = st.one_of(st.integers(-(10**20), 10**20), st.floats(), TEXT, st.none(), st.booleans())
        labels = st.sampled_from([0, 1, -1, 2, True, False, 0.5, "1", None])
        obj: dict = {"label": draw(labels)} if draw(st.integers(0, 5)) else {}
        for _ in range(n):
            obj[draw(NAMES)] = draw(st.one_of(values, st.lists(values, max_size=3), st.dictionaries(NAMES, values, max_size=2)))
        text = json.dumps(obj)
        if draw(st.integers(0, 9)) == 0:
            text = text[: draw(st.integers(0, len(text)))]
    else:
        cols = [
            f"{draw(NAMES)}={draw(NUMBERS) if draw(st.booleans()) else draw(TEXT)}" if draw(st.integers(0, 4)) else draw(TEXT)
            for _ in range(n)
        ]
        text = "\t".join([label, *cols])
    raw = text.encode()
    if draw(st.integers(0, 9)) == 0:
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(JUNK) + raw[at:]
    if draw(st.integers(0, 19)) == 0:
        raw += b"1" * 90  # over the test's 80-byte line limit
    return raw + draw(ENDINGS)


@st.composite
def streams(draw):
    fmt = draw(st.sampled_from(["criteo", "csv", "csv-multi", "libsvm", "libffm", "kv", "vw", "json"]))
    lines = [_line(draw, fmt.removesuffix("-multi")) for _ in range(draw(st.integers(0, 30)))]
    body = b"".join(lines)
    if body and draw(st.booleans()):
        body = body.rstrip(b"\n")  # no final newline
    return fmt, body


SCHEMAS = {
    "criteo": FeatureSchema(format="criteo", numeric=("I1", "I2", "I3"), cross=(("C1", "C2"),)),
    "csv": FeatureSchema(format="csv", label="label", numeric=("n",), skip=("b",)),
    # "a" multi-valued at ':', and "b" as a Parquet list column's (its values joined by \x1f)
    "csv-multi": FeatureSchema(format="csv", label="label", numeric=("n",), multi_valued=(("a", ":"),)),
    "libsvm": FeatureSchema(format="libsvm"),
    "libffm": FeatureSchema(format="libffm"),
    "kv": FeatureSchema(format="kv", numeric=("n",), skip=("s",)),
    "vw": FeatureSchema(format="vw", skip=("s",)),
    "json": FeatureSchema(format="json", numeric=("n",), skip=("s",)),
}


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.sampled_from(["grow", "cap", "frozen"]), st.integers(1, 7))
# a carriage return inside a line that also holds a quote: csv's reader called it bad quoting
@example(("csv", b'1.132693556027088e+16,\r,,"0"\n'), "grow", 1)
@example(("csv-multi", b'1,"a:b\rc",\r,5\n'), "grow", 1)
def test_generated_nasty_lines_give_identical_batches(stream, index_kind, block_lines):
    fmt, body = stream
    schema = SCHEMAS[fmt]
    header = "label,a,b,n" if fmt.startswith("csv") else None

    def make_index() -> FieldIndex:
        if fmt == "criteo":
            return resolve_fields(schema, [], freeze=index_kind == "frozen")
        base = ("a", "n") if index_kind != "grow" else schema.base_fields(header)
        index = FieldIndex(base, cap=3 if index_kind == "cap" else 256)
        if index_kind == "frozen":
            index.freeze()
        return index

    check(schema, make_index, header, body, block_lines, 80, ("b",) if fmt == "csv-multi" else ())


# --- the kernels' pieces against their references --------------------------------------


@pytest.mark.slow
@settings(max_examples=2000, deadline=None)
@given(st.one_of(NUMBERS, st.text(alphabet="0123456789.eE+-", max_size=25)))
def test_parse_number_equals_float_on_the_grammar(raw):
    buf = np.frombuffer(raw.encode(), dtype=np.uint8)
    status, value = k.parse_number(buf, 0, buf.shape[0])
    want = parse_number(raw) if raw.isascii() else None
    if want is None:
        assert status == k._NUM_BAD
    elif status == k._NUM_OK:
        assert value == want and math.copysign(1, value) == math.copysign(1, want)
    else:
        assert status == k._NUM_SLOW


@pytest.mark.slow
@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=12) | st.text(max_size=6).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_utf8_check_equals_pythons_decoder(raw):
    try:
        raw.decode("utf-8")
        want = True
    except UnicodeDecodeError:
        want = False
    assert k.utf8_valid(np.frombuffer(raw, dtype=np.uint8), 0, len(raw)) == want


# --- JSON lines, written by hand: what the kernel takes and what it leaves to json ----------

JSON_SPACE = st.sampled_from(["", "", " ", "  ", "\t", "\r", " \t"])
JSON_PLAIN_KEYS = st.sampled_from(["a", "b", "n", "s", "C1", "é", "x y", "a.b", "u"])
JSON_KEYS = st.one_of(JSON_PLAIN_KEYS, JSON_PLAIN_KEYS, st.sampled_from(["label", "", "a=b", 'q\\"', "\\u0061", "a\tb"]))
JSON_NUMBERS = st.one_of(
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: json.dumps(f)),
    st.sampled_from(["0", "-0", "1.50", "1e3", "1E+3", "2e-5", "-1.0e-2", "0.5", "01", "1.", "-", ".5", "+1", "1e", "-01"]),
)
JSON_STRINGS = st.one_of(
    st.text(alphabet=st.sampled_from(list("ab01.-é NA\x7f")), max_size=5).map(lambda t: f'"{t}"'),
    st.sampled_from(['""', '"NA"', '"1"', '"true"', '"TRUE"', '"0.5"', '"a\\"b"', '"\\u00e9"', '"a\tb"', '"x\x01"', '"open']),
)
JSON_PLAIN_VALUES = st.one_of(
    st.integers(-(10**6), 10**6).map(str), st.text(alphabet="ab01.é", max_size=4).map(lambda t: f'"{t}"'), st.just("true")
)
JSON_SCALARS = st.one_of(
    JSON_PLAIN_VALUES,
    JSON_PLAIN_VALUES,
    JSON_NUMBERS,
    JSON_STRINGS,
    st.sampled_from(["true", "false", "null", "True", "nul", "NaN", "Infinity", "-Infinity"]),
)


def _json_list(draw) -> str:
    items = [
        draw(JSON_SCALARS) if draw(st.integers(0, 6)) else draw(st.sampled_from(["[1]", '{"a": 1}', "[]"]))
        for _ in range(draw(st.integers(0, 3)))
    ]
    sp = draw(JSON_SPACE)
    return "[" + sp + ("," + sp).join(items) + draw(JSON_SPACE) + "]"


def _json_object(draw, depth: int) -> str:
    members = []
    keys = draw(st.lists(st.one_of(JSON_KEYS, st.just("label"), st.just("a.b")), max_size=4, unique=draw(st.integers(0, 5)) > 0))
    for key in keys:
        members.append(
            f'{draw(JSON_SPACE)}"{key}"{draw(JSON_SPACE)}:{draw(JSON_SPACE)}{_json_value(draw, depth + 1)}{draw(JSON_SPACE)}'
        )
    return "{" + ",".join(members) + draw(JSON_SPACE) + "}"


def _json_value(draw, depth: int) -> str:
    """A member's value: mostly scalars; lists of them (now and then with a container
    inside), and objects nested up to past the kernel's depth."""
    how = draw(st.integers(0, 9))
    if how == 0:
        return _json_list(draw)
    if how == 1 and depth < 10:
        return _json_object(draw, depth)
    return draw(JSON_SCALARS)


@st.composite
def json_streams(draw):
    lines = []
    for _ in range(draw(st.integers(0, 20))):
        members = []
        for key in draw(st.lists(JSON_KEYS, max_size=6, unique=draw(st.integers(0, 5)) > 0)):  # now and then a key twice
            sp = [draw(JSON_SPACE) for _ in range(3)]
            members.append(f'{sp[0]}"{key}"{sp[1]}:{sp[2]}{_json_value(draw, 1)}{draw(JSON_SPACE)}')
        if draw(st.integers(0, 4)):
            label = draw(st.sampled_from(["0", "1", "-1", "2", "true", "false", '"1"', '"true"', "0.5", "null", '"x"', "1e0"]))
            members.insert(draw(st.integers(0, len(members))), f'"label": {label}')
        text = draw(JSON_SPACE) + "{" + ",".join(members) + "}" + draw(JSON_SPACE)
        tweak = draw(st.integers(0, 14))
        if tweak == 0:
            text = text.replace("}", ",}", 1)  # a trailing comma
        elif tweak == 1:
            text += draw(st.sampled_from(["x", "}", ",", "{}"]))  # after the object
        elif tweak == 2:
            text = text[: draw(st.integers(0, len(text)))]  # cut short
        lines.append(text.encode() + draw(ENDINGS))
    return b"".join(lines)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_streams(), st.sampled_from(["grow", "cap", "frozen"]), st.integers(1, 7))
def test_json_lines_give_the_reference_batches(body, index_kind, block_lines):
    """The kernel's JSON mode against ctr.data.json_lines on hand-written lines: spacing,
    numbers in every spelling JSON allows and some it does not, strings with escapes and
    control characters, booleans, null, keys given twice (an object's too), nested objects
    (deeper than the kernel reads, a key named as the label inside, "a.b" beside
    {"a": {"b"...}}), lists (empty, of scalars, with containers), labels of every kind,
    trailing commas and text after the object."""
    schema = FeatureSchema(format="json", numeric=("n",), skip=("s",))

    def make_index() -> FieldIndex:
        index = FieldIndex(("a", "n") if index_kind != "grow" else (), cap=3 if index_kind == "cap" else 256)
        if index_kind == "frozen":
            index.freeze()
        return index

    check(schema, make_index, None, body, block_lines, 200)


def test_the_kernel_takes_plain_json_lines_itself(data_dir, monkeypatch):
    """Avazu's rows as JSON objects (numbers as numbers, a boolean, a null, nested objects, a
    list): once the index holds their names, no line goes to the reference parser, and the
    batches are its."""
    import csv

    with open(data_dir / "avazu_10k/train_rows1-9999.csv", newline="") as f:
        rows = list(csv.DictReader(f))[:500]
    lines = []
    for i, row in enumerate(rows):
        obj: dict = {k: (int(v) if v.isdigit() else v) for k, v in row.items()}
        obj["promoted"] = i % 3 == 0
        obj["coupon"] = None if i % 2 else "c7"
        obj["device"] = {"type": obj.pop("device_type"), "screen": {"w": 320 + i % 3, "h": 480}}  # "device.screen.w"
        obj["tags"] = [f"t{i % 5}", i % 7] if i % 4 else []
        lines.append(json.dumps(obj, separators=(",", ":") if i % 2 else (", ", ": ")))
    body = ("\n".join(lines) + "\n").encode()
    schema = FeatureSchema(format="json", label="click")
    index = FieldIndex(())
    parser = BlockParser(schema, index, None)
    parser.parse(body, True, 10_000)  # the first lines grow the index through the reference
    deferred: list[str] = []
    parse_one = make_parser(schema, index, None)

    def counted(text: str) -> ParsedSample:
        deferred.append(text)
        return parse_one(text)

    monkeypatch.setattr(parser, "reference", counted)
    got = parser.parse(body, True, 10_000)
    assert deferred == [] and got.lines == 500 and not got.bad
    ref_index = FieldIndex(())
    want, _ = reference(schema, ref_index, None, body.split(b"\n")[:-1], 1 << 20)
    assert_same(got.batch, want)


def test_a_json_line_of_many_nested_objects_goes_to_the_reference():
    """More nested objects than the kernel compares names against (k.JSON_MAX_NESTED) defer
    the line, so no line costs the kernel a square of its objects; the batch is the same."""
    objects = ", ".join(f'"o{i}": {{"x": {i}}}' for i in range(k.JSON_MAX_NESTED + 6))
    body = ('{"label": 1, ' + objects + "}\n" + '{"label": 0, "o1": {"x": 5}}\n').encode()
    schema = FeatureSchema(format="json")
    check(schema, lambda: FieldIndex(()), None, body, 2, 1 << 20)
