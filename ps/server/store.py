"""RocksDB persistence of a shard as a chain of checkpoint cuts.

A cut is what the shard held at one of the trainer's batch boundaries. Writing it
(`write_cut`, the prepare phase) stores the rows changed since the previous cut (or every
row, for a full cut) as packed blocks, the dense tables' state and the cut's metadata, in
one WriteBatch; `commit` then moves the committed pointer to it. Only committed cuts are
loaded at start-up; a cut that was written but not committed can still be committed by the
trainer (every shard has it) or dropped (`drop_cuts_after`).

    b"t" + table                           -> the table's spec (JSON)
    b"b" + table + 0 + cut (u64 BE) + block (u32 BE)
                                           -> u64 n, keys [n] (u64 LE), rows [n, words] (u32)
    b"x" + table + 0 + cut (u64 BE) + block (u32 BE)
                                           -> keys evicted since the previous cut (u64 LE)
    b"d" + table + 0 + cut (u64 BE)        -> dense state (float64 [n, width])
    b"f" + table + 0 + cut (u64 BE) + block (u32 BE)
                                           -> counters of the table's admission Bloom filter
                                              (u8), the blocks changed since the previous cut
    b"c" + cut (u64 BE)                    -> the cut's metadata (JSON)
    b"m:committed"                         -> the committed cut (u64 LE)

Loading a table at cut c reads the blocks from the newest full cut <= c up to c in order,
the last write of a key winning, and a key evicted after its last write gone. Committing a
full cut deletes everything older than the full cut before it, so the chain stays short
and a shard can still go back one full cut.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
from rocksdict import AccessType, Options, Rdict, WriteBatch

from ctr.model.spec import TableSpec

Keys = npt.NDArray[np.uint64]
Raw = npt.NDArray[np.uint32]
Counters = npt.NDArray[np.uint8]
BLOCK_ROWS = 1 << 16
BLOOM_BLOCK = 1 << 16  # counters per stored block of an admission Bloom filter
_COMMITTED = b"m:committed"
_MODEL = b"m:model"  # the identity of the model the store holds (ps.api)
_CREATED = b"m:created"  # written when the store is made: a store that lost it lost its contents
_PLACE = b"m:place"  # which shard of how many the store's rows are (a key's shard is its hash mod the count)
# the trainer generation that last restored the store's shard and the cut it went back to:
# a shard that restarts still refuses the calls of older trainers
_GENERATION = b"m:generation"


@dataclass(frozen=True)
class CutMeta:
    cut: int
    offsets: bytes  # the trainer's stream position (opaque here)
    seq: int  # the shard's update sequence at the cut
    full: bool  # every row, not only those changed since the previous cut
    samples: dict[str, int] = field(default_factory=dict)  # per table, samples applied
    lifecycle: dict[str, dict[str, float]] = field(default_factory=dict)  # per table, ps.server.shard's lifecycle clocks
    # per sparse table: rows this cut's blocks hold ("written") and rows at the cut ("rows"),
    # checked when the cut is read (a cut written before they were recorded has none)
    tables: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        d = {"cut": self.cut, "offsets": self.offsets.decode("latin-1"), "seq": self.seq, "full": self.full}
        return json.dumps({**d, "samples": self.samples, "lifecycle": self.lifecycle, "tables": self.tables}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> CutMeta:
        d = json.loads(raw)
        lifecycle = dict(d.get("lifecycle") or {})
        tables = {str(t): {str(k): int(v) for k, v in c.items()} for t, c in (d.get("tables") or {}).items()}
        return cls(
            int(d["cut"]), d["offsets"].encode("latin-1"), int(d["seq"]), bool(d["full"]), dict(d["samples"]), lifecycle, tables
        )


def _cut(cut: int) -> bytes:
    return int(cut).to_bytes(8, "big")


def _table(prefix: bytes, table: str) -> bytes:
    return prefix + table.encode() + b"\0"


class StoreCorrupted(ValueError):
    """The store cannot be read whole: a checksum failure, a missing block, a lost MANIFEST."""


class StoreMisplaced(ValueError):
    """The store holds another shard's rows, or a shard of another count."""


class StoreInUse(OSError):
    """Another process has the store open for writing (RocksDB's LOCK file is held)."""


class ShardStore:
    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        if (path / "CURRENT").exists():
            self._check_whole()
        self.db = self._open()
        self._failed = False  # a write failed: RocksDB refuses every write until it is opened again
        self._blooms_written: dict[str, tuple[int, Counters]] = {}  # per table: the last cut written, its counters
        if self.db.get(_CREATED) is None:
            self._commit_batch(key=_CREATED, value=b"1")

    def _check_whole(self) -> None:
        """An existing store opened read-only first: one whose MANIFEST lost its table files
        opens empty, and opening it for writing would delete those files for good."""
        tables = [f for f in self.path.iterdir() if f.suffix == ".sst" and f.stat().st_size > 0]
        opts = Options(raw_mode=True)
        try:
            ro = Rdict(str(self.path), opts, access_type=AccessType.read_only())
        except Exception as e:
            raise StoreCorrupted(f"{self.path}: the store cannot be opened: {e}") from None
        try:
            whole = ro.get(_CREATED) is not None or ro.get(_COMMITTED) is not None
        finally:
            ro.close()
        if not whole and tables:
            raise StoreCorrupted(
                f"{self.path}: the store opens empty but holds {len(tables)} table files: its MANIFEST or CURRENT is"
                " damaged. Restore the folder from a copy, or move it away to start this shard empty"
                " (the trainer then goes back to the cut the shards hold in common, or starts over)"
            )

    def _open(self) -> Rdict:
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        try:
            return Rdict(str(self.path), opts)
        except Exception as e:
            if "lock" in str(e).lower():  # "IO error: While lock file: DIR/LOCK: Resource temporarily unavailable"
                raise StoreInUse(
                    f"--data-dir {self.path}: another process has this store open (it holds {self.path / 'LOCK'}):"
                    " a shard still runs on it; stop that process first, or give this shard a folder of its own"
                ) from None
            raise

    def _commit_batch(self, batch: WriteBatch | None = None, key: bytes = b"", value: bytes = b"") -> None:
        """Writes a batch (or one key) durably. After a failed write (a full disk) RocksDB
        stays read-only until reopened: the next write reopens it first, which replays the
        log up to its last whole record, so a failure is never permanent once space returns."""
        if self._failed:
            with contextlib.suppress(Exception):  # closing flushes, which fails the same way
                self.db.close()
            self.db = self._open()
            self._failed = False
            self._blooms_written.clear()  # a bloom diff base may not have landed
        try:
            if batch is not None:
                self.db.write(batch)
            else:
                self.db.put(key, value)
            self.db.flush_wal(True)
        except Exception:
            self._failed = True
            raise

    def close(self) -> None:
        self.db.close()

    def _scan(self, from_key: bytes) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) from `from_key` on. rocksdict's items() ends quietly where a block
        fails its checksum; this raises StoreCorrupted instead, so that a damaged store is
        never read as a smaller one."""
        it = self.db.iter()
        it.seek(from_key)
        while it.valid():
            k, v = it.key(), it.value()
            assert isinstance(k, bytes) and isinstance(v, bytes)  # raw mode
            yield k, v
            it.next()
        try:
            it.status()
        except Exception as e:
            raise StoreCorrupted(f"{self.path}: {e}") from None

    def write_cut(
        self,
        meta: CutMeta,
        sparse: dict[str, tuple[Keys, Raw]],
        dense: dict[str, npt.NDArray[np.float64]],
        deleted: dict[str, Keys] | None = None,
        blooms: dict[str, Counters] | None = None,
    ) -> int:
        """Writes a cut (not yet committed) in one WriteBatch; returns the rows written."""
        batch = WriteBatch(raw_mode=True)
        for table, counters in (blooms or {}).items():
            before = None if meta.full else self._bloom_before(table, meta.cut)
            self._put_bloom(batch, table, meta.cut, counters, before)
        written = 0
        for table, (keys, rows) in sparse.items():
            self._put_blocks(batch, _table(b"b", table) + _cut(meta.cut), keys, rows)
            written += int(keys.shape[0])
        for table, keys in (deleted or {}).items():
            for b, lo in enumerate(range(0, keys.shape[0], BLOCK_ROWS)):
                gone = np.ascontiguousarray(keys[lo : lo + BLOCK_ROWS], dtype="<u8").tobytes()
                batch.put(_table(b"x", table) + _cut(meta.cut) + b.to_bytes(4, "big"), gone)
        for table, state in dense.items():
            batch.put(_table(b"d", table) + _cut(meta.cut), np.ascontiguousarray(state, dtype="<f8").tobytes())
        batch.put(b"c" + _cut(meta.cut), meta.to_json())
        self._commit_batch(batch)
        for table, counters in (blooms or {}).items():
            self._blooms_written[table] = (meta.cut, counters)
        return written

    def _bloom_before(self, table: str, cut: int) -> Counters | None:
        """The table's counters as of the cut before `cut` (what a new cut's blocks are
        compared with)."""
        previous = max((m.cut for m in self.metas() if m.cut < cut), default=0)
        written = self._blooms_written.get(table)
        if written is not None and written[0] == previous:
            return written[1]
        return self.bloom_at(table, previous) if previous else None

    @staticmethod
    def _put_bloom(batch: WriteBatch, table: str, cut: int, counters: Counters, before: Counters | None) -> None:
        """The blocks of `counters` that differ from `before` (all of them, without it)."""
        same_size = before is not None and before.shape == counters.shape
        for b, lo in enumerate(range(0, counters.shape[0], BLOOM_BLOCK)):
            block = counters[lo : lo + BLOOM_BLOCK]
            if same_size and before is not None and np.array_equal(block, before[lo : lo + BLOOM_BLOCK]):
                continue
            batch.put(_table(b"f", table) + _cut(cut) + b.to_bytes(4, "big"), block.tobytes())

    def bloom_at(self, table: str, cut: int) -> Counters | None:
        """The table's admission Bloom filter counters as of `cut` (None: it kept none)."""
        base = max((m.cut for m in self.metas() if m.cut <= cut and m.full), default=0)
        prefix = _table(b"f", table)
        blocks: dict[int, bytes] = {}
        for k, v in self._scan(prefix + _cut(base)):
            if not k.startswith(prefix) or int.from_bytes(k[len(prefix) : len(prefix) + 8], "big") > cut:
                break
            blocks[int.from_bytes(k[len(prefix) + 8 :], "big")] = v  # a later cut's block wins
        if not blocks:
            return None
        if sorted(blocks) != list(range(len(blocks))):
            raise ValueError(f"table {table}: the stored admission filter misses blocks at cut {cut}")
        return np.frombuffer(b"".join(blocks[b] for b in range(len(blocks))), dtype=np.uint8).copy()

    def make_full(self, cut: int, row_words: dict[str, int]) -> None:
        """Rewrites written cut `cut` as a full one: every table's rows as of the cut (read
        from the chain) replace its blocks, in one WriteBatch, and its metadata says full."""
        meta = self.meta(cut)
        if meta is None:
            raise ValueError(f"cut {cut} was never written on this shard")
        batch = WriteBatch(raw_mode=True)
        tables = {t: dict(c) for t, c in meta.tables.items()}
        for table, words in row_words.items():
            keys, rows = self.sparse_at(table, words, cut)
            if table in tables:
                tables[table]["written"] = int(keys.shape[0])
            prefix = _table(b"b", table) + _cut(cut)
            batch.delete_range(prefix, _table(b"b", table) + _cut(cut + 1))
            batch.delete_range(_table(b"x", table) + _cut(cut), _table(b"x", table) + _cut(cut + 1))
            self._put_blocks(batch, prefix, keys, rows)
            counters = self.bloom_at(table, cut)
            if counters is not None:
                batch.delete_range(_table(b"f", table) + _cut(cut), _table(b"f", table) + _cut(cut + 1))
                self._put_bloom(batch, table, cut, counters, None)
        full = CutMeta(meta.cut, meta.offsets, meta.seq, True, meta.samples, meta.lifecycle, tables)
        batch.put(b"c" + _cut(cut), full.to_json())
        self._commit_batch(batch)

    @staticmethod
    def _put_blocks(batch: WriteBatch, prefix: bytes, keys: Keys, rows: Raw) -> None:
        for b, lo in enumerate(range(0, keys.shape[0], BLOCK_ROWS)):  # a put per block, not per key
            k = np.ascontiguousarray(keys[lo : lo + BLOCK_ROWS], dtype="<u8")
            r = np.ascontiguousarray(rows[lo : lo + BLOCK_ROWS], dtype="<u4")
            batch.put(prefix + b.to_bytes(4, "big"), k.shape[0].to_bytes(8, "little") + k.tobytes() + r.tobytes())

    def commit(self, cut: int) -> None:
        """Makes `cut` (written) the committed one; after a full cut, drops what is older than
        the full cut before it."""
        metas = {m.cut: m for m in self.metas()}
        if cut not in metas:
            raise ValueError(f"cut {cut} was never written on this shard")
        batch = WriteBatch(raw_mode=True)
        batch.put(_COMMITTED, int(cut).to_bytes(8, "little"))
        fulls = sorted(c for c, m in metas.items() if m.full and c <= cut)
        if metas[cut].full and len(fulls) >= 2:
            self._delete_cuts(batch, 0, fulls[-2])
        self._commit_batch(batch)

    def model(self) -> bytes | None:
        """The held model's identity (ps.api.ModelIdentity.to_json), None if unknown."""
        raw = self.db.get(_MODEL)
        return raw if isinstance(raw, bytes) else None

    def put_model(self, identity: bytes) -> None:
        self._commit_batch(key=_MODEL, value=identity)

    def claim_place(self, index: int, count: int) -> None:
        """Records which shard of how many this store holds, or checks it against what it
        recorded: a key's rows live on shard hash(key) mod count, so a store opened as another
        shard, or under another count, would serve keys it does not hold and hold rows no
        trainer asks it for (StoreMisplaced). A store written before places were recorded
        takes this one."""
        raw = self.db.get(_PLACE)
        if isinstance(raw, bytes):
            held = json.loads(raw)
            if (int(held["index"]), int(held["count"])) != (index, count):
                raise StoreMisplaced(
                    f"--data-dir {self.path} holds the rows of shard {held['index']} of {held['count']}, and this process"
                    f" was started as shard {index} of {count} (--shard-index, --shard-count). A key's shard is its hash"
                    " mod the shard count, so a store keeps its place: give each shard its own folder, as before; a"
                    " model cannot be re-sharded in place (start empty stores, and the trainer with --from-start)"
                )
            return
        try:
            self._commit_batch(key=_PLACE, value=json.dumps({"index": index, "count": count}).encode())
        except Exception as e:  # noqa: BLE001 - a full disk: recorded at a later start, the shard starts all the same
            logging.getLogger("ps").warning("%s: cannot record which shard it holds yet (%s)", self.path, e)

    def generation(self) -> tuple[int, int]:
        """(the trainer generation that last restored this shard, the cut it went back to);
        (0, 0) when none has."""
        raw = self.db.get(_GENERATION)
        if not isinstance(raw, bytes) or len(raw) != 16:
            return 0, 0
        return int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")

    def put_generation(self, generation: int, cut: int) -> None:
        self._commit_batch(key=_GENERATION, value=int(generation).to_bytes(8, "little") + int(cut).to_bytes(8, "little"))

    def drop_everything(self) -> None:
        """Deletes every cut, table spec and the model identity: a store for another model."""
        batch = WriteBatch(raw_mode=True)
        batch.delete_range(b"", b"\xff")  # every key starts with an ASCII letter
        batch.put(_CREATED, b"1")
        self._commit_batch(batch)
        self._blooms_written.clear()

    def committed(self) -> int:
        """The committed cut; 0 when there is none."""
        raw = self.db.get(_COMMITTED)
        return int.from_bytes(raw, "little") if raw else 0

    def metas(self) -> list[CutMeta]:
        """Every cut written and not dropped, oldest first."""
        out = []
        for k, v in self._scan(b"c"):
            if not k.startswith(b"c"):
                break
            out.append(CutMeta.from_json(v))
        return out

    def meta(self, cut: int) -> CutMeta | None:
        raw = self.db.get(b"c" + _cut(cut))
        return None if raw is None else CutMeta.from_json(raw)

    def drop_cuts_after(self, cut: int) -> None:
        """Deletes every cut newer than `cut` (written, never to be committed)."""
        newer = [m.cut for m in self.metas() if m.cut > cut]
        # a dropped cut's number comes back with other contents: never diff against it
        self._blooms_written = {t: w for t, w in self._blooms_written.items() if w[0] <= cut}
        if newer:
            batch = WriteBatch(raw_mode=True)
            self._delete_cuts(batch, cut + 1, max(newer) + 1)
            self._commit_batch(batch)

    def _delete_cuts(self, batch: WriteBatch, lo: int, hi: int) -> None:
        """Deletes cuts lo <= cut < hi of every table."""
        for name in self.table_names():
            for prefix in (b"b", b"x", b"d", b"f"):
                batch.delete_range(_table(prefix, name) + _cut(lo), _table(prefix, name) + _cut(hi))
        batch.delete_range(b"c" + _cut(lo), b"c" + _cut(hi))

    def sparse_at(self, table: str, row_words: int, cut: int) -> tuple[Keys, Raw]:
        """Every stored row of the table as of `cut`: keys sorted, the last write of each."""
        metas = [m for m in self.metas() if m.cut <= cut]
        base = max((m.cut for m in metas if m.full), default=0)
        keys, rows, cuts = [], [], []
        read: dict[int, int] = {}
        for c, k, r in self._blocks(table, base, cut, row_words):
            keys.append(k)
            rows.append(r)
            cuts.append(np.full(k.shape[0], c, dtype=np.int64))
            read[c] = read.get(c, 0) + int(k.shape[0])
        for m in metas:  # every cut of the chain read whole
            written = m.tables.get(table, {}).get("written")
            if m.cut >= base and written is not None and read.get(m.cut, 0) != written:
                raise StoreCorrupted(
                    f"{self.path}: table {table}: cut {m.cut} holds {written} rows, {read.get(m.cut, 0)} could be read"
                )
        if not keys:
            return np.zeros(0, np.uint64), np.zeros((0, row_words), np.uint32)
        all_keys, all_rows = np.concatenate(keys), np.concatenate(rows)
        # the last write wins: unique over the reversed order keeps each key's last row
        uniq, first = np.unique(all_keys[::-1], return_index=True)
        wrote = np.concatenate(cuts)[::-1][first]
        gone_keys, gone_cuts = self._evictions(table, base, cut)
        if gone_keys.shape[0]:  # a key evicted in a cut after its last write is gone
            last_gone = np.full(uniq.shape[0], -1, dtype=np.int64)
            order = np.argsort(gone_cuts, kind="stable")
            pos = np.searchsorted(uniq, gone_keys[order])
            hit = (pos < uniq.shape[0]) & (uniq[np.minimum(pos, uniq.shape[0] - 1)] == gone_keys[order])
            last_gone[pos[hit]] = gone_cuts[order][hit]  # later cuts overwrite earlier ones
            alive = last_gone < wrote
            return uniq[alive], all_rows[::-1][first][alive]
        return uniq, all_rows[::-1][first]

    def _evictions(self, table: str, lo: int, hi: int) -> tuple[Keys, npt.NDArray[np.int64]]:
        """(keys, cut) of every eviction recorded in cuts lo..hi."""
        prefix = _table(b"x", table)
        keys, cuts = [], []
        for k, v in self._scan(prefix + _cut(lo)):
            c = int.from_bytes(k[len(prefix) : len(prefix) + 8], "big")
            if not k.startswith(prefix) or c > hi:
                break
            gone = np.frombuffer(v, dtype="<u8").astype(np.uint64)
            keys.append(gone)
            cuts.append(np.full(gone.shape[0], c, dtype=np.int64))
        if not keys:
            return np.zeros(0, np.uint64), np.zeros(0, np.int64)
        return np.concatenate(keys), np.concatenate(cuts)

    def _blocks(self, table: str, lo: int, hi: int, row_words: int) -> Iterator[tuple[int, Keys, Raw]]:
        prefix = _table(b"b", table)
        for k, v in self._scan(prefix + _cut(lo)):
            c = int.from_bytes(k[len(prefix) : len(prefix) + 8], "big")
            if not k.startswith(prefix) or c > hi:
                break
            n = int.from_bytes(v[:8], "little")
            keys = np.frombuffer(v, dtype="<u8", count=n, offset=8).astype(np.uint64)
            rows = np.frombuffer(v, dtype="<u4", offset=8 + 8 * n)
            if rows.shape[0] != n * row_words:
                raise ValueError(
                    f"table {table}: a stored block has {rows.shape[0]} row words, {n} rows of {row_words} need more"
                )
            yield c, keys, rows.reshape(n, row_words).astype(np.uint32)

    def dense_at(self, table: str, size: int, width: int, cut: int) -> npt.NDArray[np.float64] | None:
        raw = self.db.get(_table(b"d", table) + _cut(cut))
        if raw is None:
            return None
        a = np.frombuffer(raw, dtype="<f8")
        if a.shape[0] != size * width:
            raise ValueError(f"stored dense table {table} has {a.shape[0]} state values, its range needs {size} x {width}")
        return a.reshape(size, width).astype(np.float64)

    def table_names(self) -> list[str]:
        names = []
        for k, _ in self._scan(b"t"):
            if not k.startswith(b"t"):
                break
            names.append(k[1:].decode())
        return names

    def table_spec(self, table: str) -> TableSpec | None:
        raw = self.db.get(b"t" + table.encode())
        return None if raw is None else TableSpec.from_dict(json.loads(raw))

    def put_table_spec(self, spec: TableSpec) -> None:
        self._commit_batch(key=b"t" + spec.name.encode(), value=json.dumps(spec.to_dict()).encode())
