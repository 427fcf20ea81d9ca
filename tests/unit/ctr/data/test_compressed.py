"""Compressed files read as the text they hold (gzip, bzip2, xz, zstd, told by their first
bytes): in a folder beside plain files, named as the source, taken up mid-file at a
checkpoint's offset, and, cut short, trained up to the damage with the damage logged."""

from __future__ import annotations

import bz2
import gzip
import logging
import lzma
from collections.abc import Callable

import pytest
import zstandard

from ctr.data.compressed import DecompressedText, compression_of
from ctr.data.fields import FieldIndex
from trainer.input.reader import BatchReader
from trainer.input.source import Block, Position, StreamSource

COMPRESS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "bzip2": bz2.compress,
    "xz": lzma.compress,
    "zstd": zstandard.ZstdCompressor().compress,
}
PLAIN = b"".join(f"{i % 2} {i}:1 {i + 7}:1\n".encode() for i in range(5000))


def _read(src: StreamSource) -> list[Block]:
    return [b for b in src.blocks(1 << 16, block_bytes=4096) if b is not None and b.data]


@pytest.mark.parametrize("kind", COMPRESS)
def test_a_compressed_file_reads_as_its_text_beside_plain_ones_and_from_any_offset(tmp_path, kind):
    packed = COMPRESS[kind](PLAIN)
    assert compression_of(packed[:6]) == kind and compression_of(PLAIN[:6]) is None
    (tmp_path / "part-0").write_bytes(PLAIN)
    (tmp_path / "part-1.data").write_bytes(packed)  # told by its bytes, not its name
    blocks = _read(StreamSource(str(tmp_path), follow=False))
    assert b"".join(b.data for b in blocks if b.file.endswith("part-0")) == PLAIN
    mine = [b for b in blocks if b.file.endswith("part-1.data")]
    assert b"".join(b.data for b in mine) == PLAIN and mine[0].offset == 0
    # a checkpoint taken at a block boundary inside it: the rest, from the same line on
    at = mine[len(mine) // 2]
    start = Position(at.file, at.offset, at.line)
    rest = _read(StreamSource(str(tmp_path / "part-1.data"), follow=False, start=start))
    assert rest[0].offset == at.offset and rest[0].line == at.line
    assert b"".join(b.data for b in rest) == PLAIN[at.offset :]
    assert StreamSource(str(tmp_path / "part-1.data"), follow=False).peek(3) == PLAIN.decode().splitlines()[:3]


# bzip2 and zstd decode whole blocks (900 and 128 KB): half of this file holds none
@pytest.mark.parametrize("kind", ["gzip", "xz"])
def test_a_stream_cut_short_trains_the_whole_lines_before_and_says_where(tmp_path, caplog, kind):
    packed = COMPRESS[kind](PLAIN)
    (tmp_path / "cut.z").write_bytes(packed[: len(packed) // 2])
    with caplog.at_level(logging.ERROR, logger="boundless.data"):
        # the reader's own block size: a buffered read() of 1 MB raised at the damage and
        # dropped every line before it (a cut .gz trained nothing)
        blocks = [b for b in StreamSource(str(tmp_path / "cut.z"), follow=False).blocks(1 << 16) if b is not None]
    text = b"".join(b.data for b in blocks)
    assert len(PLAIN) // 8 < len(text) < len(PLAIN) and PLAIN.startswith(text) and text.endswith(b"\n")
    assert not any(b.final for b in blocks)  # the piece of a line after the last whole one is not a sample
    assert f"cut.z: its {kind} stream is cut short or damaged after" in caplog.text


def test_the_piece_of_a_line_where_a_stream_breaks_is_a_bad_line_named_not_a_sample(tmp_path):
    packed = gzip.compress(PLAIN)
    (tmp_path / "cut.gz").write_bytes(packed[: len(packed) // 2])
    got = DecompressedText(tmp_path / "cut.gz", "gzip")
    text = b"".join(iter(lambda: got.read1(1 << 20), b""))
    if text.endswith(b"\n"):  # this compressor's cut fell on a line's end: nothing to name
        pytest.skip("the cut text ends with a whole line")
    blocks = [b for b in StreamSource(str(tmp_path / "cut.gz"), follow=False).blocks(1 << 16) if b is not None]
    cut = [b for b in blocks if b.cut_short]
    assert len(cut) == 1 and cut[0].line == text.count(b"\n") + 1 and not cut[0].data
    reader = BatchReader(StreamSource(str(tmp_path / "cut.gz"), follow=False), None, FieldIndex(), 4096, 1 << 16)
    samples = sum(len(r.batch.labels) for r in reader.batches() if r is not None)
    assert samples == text.count(b"\n") and reader.bad_lines == 1
    reason = "the file's compressed stream ends inside this line (damaged): not trained"
    assert reader.first_bad == [f"{tmp_path / 'cut.gz'}:{cut[0].line}: {reason}"]


def test_decompressed_text_reads_forward_only(tmp_path):
    (tmp_path / "a.xz").write_bytes(lzma.compress(PLAIN))
    with DecompressedText(tmp_path / "a.xz", "xz") as text:
        assert text.seek(100) == 100 and text.read(10) == PLAIN[100:110]
        with pytest.raises(OSError):
            text.seek(0)


def test_a_csv_resumed_inside_its_compressed_file_takes_its_header_from_the_text(data_dir, tmp_path):
    """A reader resumed mid-file reads the CSV's header from the file's first line: of a
    gzip'd file, that line is of its text, not of its compressed bytes."""
    from ctr.data.compressed import first_line
    from ctr.data.fields import FieldIndex
    from ctr.data.schema import PRESETS
    from trainer.input.reader import BatchReader

    text = b"".join((data_dir / "avazu_10k/train_rows1-9999.csv").read_bytes().splitlines(keepends=True)[:3001])
    (tmp_path / "plain").mkdir()
    (tmp_path / "packed").mkdir()
    (tmp_path / "plain" / "day.csv").write_bytes(text)
    (tmp_path / "packed" / "day.csv").write_bytes(gzip.compress(text))
    assert first_line(tmp_path / "packed" / "day.csv") == text.split(b"\n", 1)[0].decode()
    offset = len(b"".join(text.splitlines(keepends=True)[:2001]))  # after the header and 2,000 rows

    def batches(folder):
        start = Position(str(folder / "day.csv"), offset, 2001)
        reader = BatchReader(StreamSource(str(folder), follow=False, start=start), PRESETS["avazu"], FieldIndex(), 250, 1 << 20)
        return [r.batch for r in reader.batches() if r is not None], reader.bad_lines

    plain, plain_bad = batches(tmp_path / "plain")
    packed, packed_bad = batches(tmp_path / "packed")
    assert plain_bad == packed_bad == 0 and sum(len(b) for b in plain) == 1000
    for a, b in zip(plain, packed, strict=True):
        assert (a.keys == b.keys).all() and (a.labels == b.labels).all()


def test_a_followed_compressed_file_still_empty_is_read_once_its_bytes_land(tmp_path):
    """An empty `.gz` in a followed folder was read as a plain file that grows: its gzip
    bytes, once written, would have been parsed as text."""
    import threading
    import time

    (tmp_path / "a.gz").write_bytes(b"")
    got: list[bytes] = []
    deadline = time.monotonic() + 20  # a source that reads the wrong bytes never reaches the text's length
    src = StreamSource(
        str(tmp_path), follow=True, poll_s=0.02, stop=lambda: len(b"".join(got)) >= len(PLAIN) or time.monotonic() > deadline
    )

    def land() -> None:
        time.sleep(0.3)
        (tmp_path / "a.gz").write_bytes(gzip.compress(PLAIN))

    threading.Thread(target=land, daemon=True).start()
    for b in src.blocks(1 << 16, block_bytes=4096):
        if b is not None and b.data:
            got.append(b.data)
    assert b"".join(got) == PLAIN
    assert [b.data for b in StreamSource(str(tmp_path / "a.gz"), follow=False).blocks(1 << 16) if b is not None and b.data]
    (tmp_path / "empty.gz").write_bytes(b"")  # not followed: an empty file is simply empty, and the run ends
    assert [b for b in StreamSource(str(tmp_path / "empty.gz"), follow=False).blocks(1 << 16) if b is not None and b.data] == []


@pytest.mark.parametrize("kind", ["gzip", "parquet"])
def test_a_followed_file_read_whole_and_written_in_place_in_pieces_is_read_once_whole(tmp_path, kind):
    """gzip > folder/x.gz, or logrotate's compress, writes the file where it is read: one
    read as soon as it had bytes was read cut short (the lines after the cut lost), and a
    Parquet file without its footer was skipped as unreadable."""
    import io
    import threading
    import time

    if kind == "gzip":
        data, name, want = gzip.compress(PLAIN), "a.gz", PLAIN
    else:
        import pyarrow as pa  # make test installs [all]: a missing pyarrow fails, not skips
        import pyarrow.parquet as pq

        buf = io.BytesIO()
        pq.write_table(pa.table({"click": [i % 2 for i in range(3000)], "site": [f"s{i}" for i in range(3000)]}), buf)
        data, name = buf.getvalue(), "a.parquet"
        want = b"click,site\n" + b"".join(f"{i % 2},s{i}\n".encode() for i in range(3000))
    half = len(data) // 2
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    src = StreamSource(
        str(tmp_path), follow=True, poll_s=0.02, stop=lambda: len(b"".join(got)) >= len(want) or time.monotonic() > deadline
    )

    def write() -> None:  # the first piece lands, then the rest a moment later, in place
        with open(tmp_path / name, "wb") as f:
            f.write(data[:half])
            f.flush()
            time.sleep(0.3)
            f.write(data[half:])

    threading.Thread(target=write, daemon=True).start()
    for b in src.blocks(1 << 16, block_bytes=4096):
        if b is not None and b.data:
            got.append(b.data)
    assert b"".join(got) == want


def test_a_file_being_written_keeps_a_followed_stream_from_counting_as_idle(tmp_path):
    """--idle-exit-s counts from the source's idle_since: a file waiting out its last second
    of writes is bytes landing, not an idle stream that may end the run before reading it."""
    import time

    (tmp_path / "a.gz").write_bytes(gzip.compress(PLAIN))  # written just now: settling
    src = StreamSource(str(tmp_path), follow=True, poll_s=0.02)
    before = time.monotonic()
    assert next(src.blocks(1 << 16, block_bytes=4096)) is None  # nothing read yet
    assert src.idle_since >= before


def test_the_sample_files_of_predict_and_eval_may_be_compressed(tmp_path):
    from ctr.data.formats import read_lines

    (tmp_path / "s.zst").write_bytes(COMPRESS["zstd"](PLAIN))
    (tmp_path / "s.txt").write_bytes(PLAIN)
    assert read_lines(str(tmp_path / "s.zst")) == read_lines(str(tmp_path / "s.txt")) == PLAIN.decode().splitlines()
    # cut short: the whole lines before the damage, not the piece of one where it broke
    packed = gzip.compress(PLAIN)
    (tmp_path / "cut.gz").write_bytes(packed[: len(packed) // 2])
    lines = read_lines(str(tmp_path / "cut.gz"))
    assert 0 < len(lines) < 5000 and lines == PLAIN.decode().splitlines()[: len(lines)]


@pytest.mark.parametrize("kind", COMPRESS)
def test_a_compressed_file_is_read_in_whole_blocks_not_the_decompressors_pieces(tmp_path, kind):
    """gzip's read1 hands over ~23 KB at a time: the reader's 1 MiB blocks must not shrink
    to that (its held lines would be copied again with every piece)."""
    text = PLAIN * 40  # 3.1 MB
    (tmp_path / "big.z").write_bytes(COMPRESS[kind](text))
    blocks = _read_blocks(tmp_path / "big.z")
    assert b"".join(b.data for b in blocks) == text and len(blocks) <= 4  # not 135 pieces of 23 KB


def _read_blocks(path) -> list[Block]:
    return [b for b in StreamSource(str(path), follow=False).blocks(1 << 16) if b is not None and b.data]
