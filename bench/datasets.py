"""The benchmark's real datasets, read from ../shared/data (never copied into the project),
in stream order, and converted for the peers: libffm for xLearn, VW text for Vowpal
Wabbit, per-field integer ids for DeepCTR-Torch. Every peer sees the same rows and fields."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ctr.data.formats import make_parser, resolve_fields
from ctr.data.schema import PRESETS

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


@dataclass(frozen=True)
class Dataset:
    name: str
    files: tuple[str, ...]  # in stream order
    preset: str

    def lines(self) -> list[str]:
        out: list[str] = []
        for i, f in enumerate(self.files):
            text = (DATA / f).read_text().splitlines()
            out += text[1:] if i and PRESETS[self.preset].format == "csv" else text
        return out


DATASETS = {
    "frappe": Dataset("frappe", ("frappe/frappe.validation.libfm", "frappe/frappe.test.libfm"), "libsvm"),
    "criteo10k": Dataset("criteo10k", ("criteo_10k/train_rows1-10000.tsv",), "criteo"),
    "avazu10k": Dataset("avazu10k", ("avazu_10k/train_rows1-9999.csv",), "avazu"),
    # not tuned on: checks that what the three above show holds on other CTR data
    "ipinyou": Dataset("ipinyou", ("ipinyou/train.fm.txt", "ipinyou/test.fm.txt"), "libsvm"),
    "talkingdata": Dataset("talkingdata", ("talkingdata/train_sample.csv",), "talkingdata"),
}


def write_stream(ds: Dataset, folder: Path) -> Path:
    """The dataset as one file in stream order (the trainer reads it as a stream)."""
    path = folder / f"{ds.name}.{'csv' if PRESETS[ds.preset].format == 'csv' else 'txt'}"
    path.write_text("\n".join(ds.lines()) + "\n")
    return path


def encode_ids(ds: Dataset) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(labels [n], ids [n, F] with 0 for a missing field and ids unique across fields, field names)."""
    lines = ds.lines()
    schema = PRESETS[ds.preset]
    header = lines[0] if schema.format == "csv" else None
    index = resolve_fields(schema, lines[:2000], freeze=False)
    parse = make_parser(schema, index, header)
    body = lines[1:] if header else lines
    samples = [parse(line) for line in body]
    n_fields = len(index)
    ids = np.zeros((len(samples), n_fields), dtype=np.int64)
    vocab: dict[tuple[int, str], int] = {}
    for i, s in enumerate(samples):
        for f, tok in zip(s.fields, s.tokens, strict=True):
            ids[i, f] = vocab.setdefault((f, tok), len(vocab) + 1)
    labels = np.array([s.label for s in samples], dtype=np.float32)
    return labels, ids, list(index.names)


def write_libffm(labels: np.ndarray, ids: np.ndarray, path: Path) -> None:
    with open(path, "w") as out:
        for y, row in zip(labels.astype(int).tolist(), ids.tolist(), strict=True):
            out.write(f"{y} " + " ".join(f"{f}:{v}:1" for f, v in enumerate(row) if v) + "\n")


def write_vw(labels: np.ndarray, ids: np.ndarray, path: Path) -> None:
    with open(path, "w") as out:
        for y, row in zip(labels.astype(int).tolist(), ids.tolist(), strict=True):
            out.write(f"{1 if y else -1} |f " + " ".join(f"x{v}" for v in row if v) + "\n")
