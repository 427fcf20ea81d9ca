"""Mini-batches of hashed samples in CSR form."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ctr.data.formats import ParsedSample
from ctr.data.hashing import hash_tokens, pack_tokens


@dataclass(frozen=True)
class SampleBatch:
    """n samples: sample i owns keys[offsets[i]:offsets[i+1]], with the field index and the
    value of each feature alongside."""

    labels: npt.NDArray[np.float32]
    offsets: npt.NDArray[np.int64]
    keys: npt.NDArray[np.uint64]
    fields: npt.NDArray[np.int32]
    values: npt.NDArray[np.float32]

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def build_batch(samples: list[ParsedSample], field_ids: npt.NDArray[np.uint32]) -> SampleBatch:
    """Hashes every sample's tokens in one kernel call; field_ids[i] is field i's hash id."""
    n = len(samples)
    counts = np.fromiter((len(s.tokens) for s in samples), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    tokens = [t for s in samples for t in s.tokens]
    fields = np.fromiter((f for s in samples for f in s.fields), dtype=np.int32, count=len(tokens))
    values = np.fromiter((v for s in samples for v in s.values), dtype=np.float32, count=len(tokens))
    buf, tok_offsets = pack_tokens(tokens)
    keys = hash_tokens(buf, tok_offsets, np.ascontiguousarray(field_ids[fields], dtype=np.uint32))
    labels = np.fromiter((s.label for s in samples), dtype=np.float32, count=n)
    return SampleBatch(labels, offsets, keys, fields, values)
