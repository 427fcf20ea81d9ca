"""JSON Lines (`--format json`): one JSON object a line, as a Kafka topic of JSON records or
a `.jsonl` file holds them (`df.to_json(orient="records", lines=True)`). The label is one
key (`--label`, else the first of the usual label names found); every other key is a field
whose value is its token, written as the JSON wrote it:

- a string as it is; a number as its JSON text (1005 stays "1005" and 1.50 "1.50", as a csv
  field's text does, so the trainer's number styles, ctr.data.number_text, apply);
- true and false as True and False, as Parquet and pandas write a boolean and as the client
  library sends Python's (serving.client.predict_client._text);
- null: a missing feature; a list: several values of the field (kv's repeated name=value);
- a nested object: its keys as fields of their own, `user.age` for {"user": {"age": 31}}
  (send them so named to serving).

This is the reference parser: the numba block parser (trainer.input.block_kernels,
MODE_JSON) reads objects itself, nested ones and lists of scalars included, and hands it
every line it cannot settle (escapes, a key twice, NaN; docs/design/json-lines.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from ctr.data.formats import ParseError

NESTED = "."  # the separator of a nested object's keys in its fields' names
# one decoder for every line (json.loads with these arguments made one a call: a third of
# a line's time); numbers come back as their JSON text
_DECODER = json.JSONDecoder(parse_int=str, parse_float=str, parse_constant=str)


def json_object(line: str) -> dict[str, Any]:
    """The object a line holds, its numbers kept as their text. ParseError: not one object."""
    try:
        obj = _DECODER.decode(line)
    except json.JSONDecodeError as e:
        raise ParseError(f"not JSON: {e.msg} at column {e.colno}") from None
    if not isinstance(obj, dict):
        raise ParseError(f"expected one JSON object a line, got a {type(obj).__name__}")
    return obj


def value_text(value: Any, where: str) -> str | None:
    """A scalar's token text (None: null, a missing value)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, str):
        return value
    raise ParseError(f"{where}: expected a string, number, true/false or null, got a {type(value).__name__}")


def json_features(obj: dict[str, Any], label: str, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(field name, token) of every value of the object but its label, nested objects
    flattened; lists give one per value."""
    for key, value in obj.items():
        name = prefix + key
        if not key or any(c in key for c in "\t\n\r="):
            raise ParseError(f"key {name!r}: a field's name is not empty and holds no tab, line break or '='")
        if not prefix and key == label:
            continue
        if isinstance(value, dict):
            yield from json_features(value, label, name + NESTED)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                text = value_text(v, f"{name}[{i}]")
                if text is not None:
                    yield name, text
        else:
            text = value_text(value, name)
            if text is not None:
                yield name, text


def json_label(obj: dict[str, Any], label: str) -> str:
    """The label's text: ParseError when the object has none."""
    if label not in obj or obj[label] is None:
        keys = ", ".join(list(obj)[:20])
        raise ParseError(f"no label {label!r} in the object (its keys: {keys})")
    text = value_text(obj[label], label)
    assert text is not None
    return text


def json_keys(line: str) -> list[str] | None:
    """The top-level keys of a line that holds a JSON object (None: it does not)."""
    if not line.lstrip().startswith("{"):
        return None
    try:
        return list(json_object(line))
    except ParseError:
        return None


def flattened(features: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A request's features with nested objects' keys as fields of their own (`user.age`),
    as a JSON line's train; true and false as the text the trainer read (True, False)."""
    out: dict[str, Any] = {}
    for key, value in features.items():
        name = prefix + key
        if isinstance(value, Mapping):
            out.update(flattened(value, name + NESTED))
        elif isinstance(value, bool):
            out[name] = value_text(value, name)
        elif isinstance(value, list):
            out[name] = [value_text(v, name) if isinstance(v, bool) else v for v in value]
        else:
            out[name] = value
    return out
