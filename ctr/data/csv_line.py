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
    """A line whose quoting is malformed: an unclosed quote, or text after a closing one."""


def split_csv(line: str, delimiter: str) -> list[str]:
    """The fields of one line (its line break dropped): str.split where the line holds no
    quote, else csv's strict reader. Raises CsvQuoteError naming what is wrong."""
    text = line.rstrip("\r\n")
    if QUOTE not in text:
        return text.split(delimiter)
    try:
        return next(csv.reader([text], delimiter=delimiter, quotechar=QUOTE, strict=True), [""])
    except csv.Error as e:
        raise CsvQuoteError(f"bad quoting ({e})") from e


def header_names(header: str, delimiter: str) -> tuple[str, ...]:
    """A header line's column names: a leading byte order mark dropped, quotes undone,
    surrounding spaces stripped."""
    return tuple(c.strip() for c in split_csv(header.removeprefix(BOM), delimiter))
