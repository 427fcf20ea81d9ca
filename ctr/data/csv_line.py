"""One CSV line split into its fields as RFC 4180 (and Python's `csv` module, pandas, R and
Arrow's writers) quote them: a field that starts with a double quote ends at the next lone
double quote, holds the delimiter freely, and writes a double quote inside as two.

A field quoted or not names the same token (`"x"` and `x` are one feature), so a file
written by any of those tools trains on the values a client sends raw. Line breaks inside a
quoted field are not taken: the stream's unit is a line (trainer.input.reader), so such a
record's pieces are bad lines, each named. The numba kernel (trainer.input.block_kernels)
reads the common quoted field itself and leaves the rest to `split_csv`.
"""

from __future__ import annotations

import csv

QUOTE = '"'
BOM = "\ufeff"  # a UTF-8 byte order mark, as spreadsheet programs start their CSV files


class CsvQuoteError(ValueError):
    """A line whose quoting is malformed (an unclosed quote, text after a closing one), or
    a header that names a column twice."""


def split_csv(line: str, delimiter: str) -> list[str]:
    """The fields of one line (its line break dropped): str.split where the line holds no
    quote, else csv's strict reader. Raises CsvQuoteError naming what is wrong."""
    text = line.rstrip("\r\n")
    if QUOTE not in text:
        return text.split(delimiter)
    # a carriage return inside the line is data, as str.split above and the kernel keep it;
    # csv's reader would call it a line break in an unquoted field: it reads a stand-in
    mark = next(chr(c) for c in range(0xE000, 0xF900) if chr(c) not in text) if "\r" in text else ""
    try:
        fields = next(
            csv.reader([text.replace("\r", mark) if mark else text], delimiter=delimiter, quotechar=QUOTE, strict=True), [""]
        )
        return [f.replace(mark, "\r") for f in fields] if mark else fields
    except csv.Error as e:
        if "unexpected end of data" in str(e):  # a quote opened and never closed on this line
            raise CsvQuoteError(
                "bad quoting (a quoted field is not closed on this line: a line break inside quotes? such a record is"
                " not read, the stream's unit being a line; write its values without line breaks)"
            ) from e
        raise CsvQuoteError(f"bad quoting ({e})") from e


def split_header(line: str, delimiter: str) -> tuple[str, ...]:
    """A line read as a header: a leading byte order mark dropped, quotes undone,
    surrounding spaces stripped (names given twice not checked: see header_names)."""
    return tuple(c.strip() for c in split_csv(line.removeprefix(BOM), delimiter))


def header_names(header: str, delimiter: str) -> tuple[str, ...]:
    """A header line's column names (split_header). Raises CsvQuoteError for a name given
    twice: which of the two a client's value stands for cannot be told."""
    names = split_header(header, delimiter)
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name and name in seen:
            raise CsvQuoteError(f"the header names column {name!r} twice (columns {seen[name] + 1} and {i + 1}); rename one")
        seen[name] = i
    return names


def unnamed_columns(names: tuple[str, ...]) -> list[int]:
    """The columns (from 1) a header leaves without a name, as pandas writes a DataFrame's
    index (`to_csv` without index=False): not trained, since no client can send them."""
    return [i + 1 for i, name in enumerate(names) if not name]
