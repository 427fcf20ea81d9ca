"""RocksDB persistence of a shard: table specs, rows, dense state and the checkpoint's
stream offsets.

Keys: b"t" + table -> the table's spec (JSON); b"s" + table + b"\\0" + key (8 bytes
big-endian) -> raw row words; b"d" + table -> dense optimizer state (float64 [n, width]);
b"c" + table -> samples applied (uint64); b"m:offsets", b"m:seq" -> checkpoint metadata.
One checkpoint is one WriteBatch, so rows and offsets land together or not at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
from rocksdict import Options, Rdict, WriteBatch

from ctr.modelspec import TableSpec

_OFFSETS = b"m:offsets"
_SEQ = b"m:seq"


class ShardStore:
    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        self.db = Rdict(str(path), opts)

    def close(self) -> None:
        self.db.close()

    def write_checkpoint(
        self,
        sparse: dict[str, tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint32]]],
        dense: dict[str, npt.NDArray[np.float64]],
        offsets: bytes,
        seq: int,
        samples: dict[str, int] | None = None,
    ) -> int:
        batch = WriteBatch(raw_mode=True)
        written = 0
        for table, (keys, rows) in sparse.items():
            prefix = b"s" + table.encode() + b"\0"
            be = keys.astype(">u8").tobytes()
            raw = np.ascontiguousarray(rows).tobytes()
            width = rows.shape[1] * 4 if rows.ndim == 2 else 0
            for i in range(keys.shape[0]):
                batch.put(prefix + be[8 * i : 8 * i + 8], raw[width * i : width * (i + 1)])
            written += keys.shape[0]
        for table, state in dense.items():
            batch.put(b"d" + table.encode(), np.ascontiguousarray(state, dtype=np.float64).tobytes())
        for table, count in (samples or {}).items():
            batch.put(b"c" + table.encode(), int(count).to_bytes(8, "little"))
        batch.put(_OFFSETS, offsets)
        batch.put(_SEQ, int(seq).to_bytes(8, "little"))
        self.db.write(batch)
        self.db.flush_wal(True)
        return written

    def checkpoint_meta(self) -> tuple[bytes, int]:
        """(stream offsets, sequence) of the last checkpoint; (b"", 0) when there is none."""
        seq = self.db.get(_SEQ)
        return (self.db.get(_OFFSETS) or b""), (int.from_bytes(seq, "little") if seq else 0)

    def sparse_rows(self, table: str, row_words: int) -> Iterator[tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint32]]]:
        """Stored rows of a table in chunks of (keys, rows)."""
        prefix = b"s" + table.encode() + b"\0"
        keys: list[bytes] = []
        rows: list[bytes] = []
        for k, v in self.db.items(from_key=prefix):
            assert isinstance(k, bytes) and isinstance(v, bytes)  # raw mode
            if not k.startswith(prefix):
                break
            keys.append(k[len(prefix) :])
            rows.append(v)
            if len(keys) == 65536:
                yield self._chunk(keys, rows, row_words)
                keys, rows = [], []
        if keys:
            yield self._chunk(keys, rows, row_words)

    @staticmethod
    def _chunk(keys: list[bytes], rows: list[bytes], row_words: int) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint32]]:
        k = np.frombuffer(b"".join(keys), dtype=">u8").astype(np.uint64)
        r = np.frombuffer(b"".join(rows), dtype=np.uint32).reshape(len(rows), row_words)
        return k, r.copy()

    def dense_state(self, table: str, size: int, width: int) -> npt.NDArray[np.float64] | None:
        raw = self.db.get(b"d" + table.encode())
        if raw is None:
            return None
        a = np.frombuffer(raw, dtype=np.float64)
        if a.shape[0] != size * width:
            raise ValueError(f"stored dense table {table} has {a.shape[0]} state values, its range needs {size} x {width}")
        return a.reshape(size, width).copy()

    def samples(self, table: str) -> int:
        """Samples applied to the table as of the last checkpoint."""
        raw = self.db.get(b"c" + table.encode())
        return int.from_bytes(raw, "little") if raw else 0

    def table_spec(self, table: str) -> TableSpec | None:
        raw = self.db.get(b"t" + table.encode())
        return None if raw is None else TableSpec.from_dict(json.loads(raw))

    def put_table_spec(self, spec: TableSpec) -> None:
        self.db.put(b"t" + spec.name.encode(), json.dumps(spec.to_dict()).encode())
        self.db.flush_wal(True)
