"""A holdout: samples an exported model has not trained on, already parsed and hashed,
stored beside the export (`holdout.npz`), on which the model manager judges the export."""

from __future__ import annotations

import time
import zipfile
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ctr.data.batch import SampleBatch

HOLDOUT_FILE = "holdout.npz"
JUDGED_FROM = 1000  # holdout samples the model manager's gate needs to judge an export, by default
_ARRAYS = {"labels": np.float32, "offsets": np.int64, "keys": np.uint64, "fields": np.int32, "values": np.float32}


class HoldoutError(ValueError):
    """A holdout file that cannot be read as samples."""


def concat(batches: list[SampleBatch]) -> SampleBatch:
    if not batches:
        return SampleBatch(*(np.zeros(1 if k == "offsets" else 0, dtype=t) for k, t in _ARRAYS.items()))  # type: ignore[arg-type]
    offsets = [np.zeros(1, np.int64)]
    at = 0
    for b in batches:
        offsets.append(b.offsets[1:] - b.offsets[0] + at)
        at += int(b.offsets[-1] - b.offsets[0])
    return SampleBatch(
        np.concatenate([b.labels for b in batches]),
        np.concatenate(offsets),
        np.concatenate([b.keys[b.offsets[0] : b.offsets[-1]] for b in batches]),
        np.concatenate([b.fields[b.offsets[0] : b.offsets[-1]] for b in batches]),
        np.concatenate([b.values[b.offsets[0] : b.offsets[-1]] for b in batches]),
    )


def head(batch: SampleBatch, n: int) -> SampleBatch:
    """The first n samples."""
    end = int(batch.offsets[n])
    return SampleBatch(batch.labels[:n], batch.offsets[: n + 1], batch.keys[:end], batch.fields[:end], batch.values[:end])


def tail(batch: SampleBatch, start: int) -> SampleBatch:
    """The samples from `start` on."""
    a = int(batch.offsets[start])
    return SampleBatch(batch.labels[start:], batch.offsets[start:] - a, batch.keys[a:], batch.fields[a:], batch.values[a:])


class RecentBatches:
    """The latest batches read, `size` samples at most (whole batches), each with the wall
    time it was added: what holdouts are filled from."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.timed: deque[tuple[float, SampleBatch]] = deque()
        self.count = 0

    def add(self, batch: SampleBatch) -> None:
        if not self.size or not len(batch):
            return
        self.timed.append((time.time(), batch))
        self.count += len(batch)
        while self.count - len(self.timed[0][1]) >= self.size:
            self.count -= len(self.timed.popleft()[1])

    def batches(self) -> list[SampleBatch]:
        return [b for _, b in self.timed]

    def drain(self) -> list[tuple[float, SampleBatch]]:
        out = list(self.timed)
        self.timed.clear()
        self.count = 0
        return out


def write_batches(path: Path, batches: list[SampleBatch]) -> None:
    """The batches' samples, in order, as one holdout file (np.savez's layout: a stored zip
    of one .npy a column), each column written batch by batch. Concatenating first cost a
    second copy of every sample: a 250k-sample Criteo holdout is 136 MB, and the copy and
    its page faults took the training thread longer than writing it."""
    samples = sum(len(b) for b in batches)
    features = sum(int(b.offsets[-1] - b.offsets[0]) for b in batches)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, dtype in _ARRAYS.items():
            count = {"labels": samples, "offsets": samples + 1}.get(name, features)
            header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": (count,)}
            with z.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array_header_1_0(f, header)
                for chunk in _column(name, batches):
                    f.write(np.ascontiguousarray(chunk, dtype=dtype).data)


def _column(name: str, batches: list[SampleBatch]) -> Iterator[npt.NDArray[np.generic]]:
    """One column of the batches' samples, a piece a batch; offsets counted from the first."""
    if name == "labels":
        yield from (b.labels for b in batches)
    elif name == "offsets":
        yield np.zeros(1, dtype=np.int64)
        at = 0
        for b in batches:
            yield b.offsets[1:] - b.offsets[0] + at
            at += int(b.offsets[-1] - b.offsets[0])
    else:
        yield from (getattr(b, name)[b.offsets[0] : b.offsets[-1]] for b in batches)


def read(path: Path) -> SampleBatch:
    """The samples, checked for shape and consistency (HoldoutError names what is wrong)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: np.asarray(z[k]) for k in _ARRAYS}
    except (OSError, ValueError, KeyError, EOFError) as e:
        raise HoldoutError(f"{path.name}: not a holdout file: {e}") from None
    for k, t in _ARRAYS.items():
        if arrays[k].ndim != 1 or arrays[k].dtype != t:
            raise HoldoutError(f"{path.name}: {k} is {arrays[k].dtype}{list(arrays[k].shape)}, expected 1-d {np.dtype(t)}")
    n, off = arrays["labels"].shape[0], arrays["offsets"]
    if off.shape[0] != n + 1 or off[0] != 0 or (np.diff(off) < 0).any():
        raise HoldoutError(f"{path.name}: offsets do not delimit {n} samples")
    nnz = int(off[-1])
    if any(arrays[k].shape[0] != nnz for k in ("keys", "fields", "values")):
        raise HoldoutError(f"{path.name}: keys, fields and values must hold {nnz} features")
    if not np.isfinite(arrays["values"]).all() or not np.isin(arrays["labels"], (0.0, 1.0)).all():
        raise HoldoutError(f"{path.name}: labels must be 0 or 1 and values finite")
    if (arrays["fields"] < 0).any():
        raise HoldoutError(f"{path.name}: a field index is negative")
    return SampleBatch(arrays["labels"], off, arrays["keys"], arrays["fields"], arrays["values"])
