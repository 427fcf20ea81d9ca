"""Hierarchical push (`--local-aggregate`): the worker processes of one host sum their
sparse pushes for the same keys in shared memory, and one of them (the leader, worker 0)
sends the sums, compressed once, to the shards.

Every worker runs a round thread. Rounds are lockstep over a barrier: each worker writes
the oldest push it has queued (or nothing) into its shared-memory slot; all meet; the
leader sums the slots by table and pushes the sums through its own client (its compressor
and error feedback) and waits for the shards' answers; all meet again, and the pushes of
the round are done. A push therefore returns only once the shards hold it, as without
aggregation, so a worker's next pull sees its own push. The sum names the contributors'
pull sessions, so keys do not travel: each shard takes the union of the sessions' keys.

A worker with nothing queued waits up to `wait_s` for a push before it joins a round, so
workers that push at about the same pace fall into step and their pushes share rounds. A
push larger than a slot goes in several rounds. A worker that ends keeps joining rounds
with nothing until every worker has ended.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.data.unique import sorted_unique_inverse
from ctr.routing import shard_of
from ps.client.push_path import PushBatch
from ps.compression.residuals import ResidualStore

Keys = npt.NDArray[np.uint64]
F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
# the host's summed batch (targets: per shard the sessions whose union is its keys) ->
# (keys whose residual left the leader's memory, sent exactly; the residual of the pushed
# keys after the push, None when the table keeps no error feedback)
SendMerged = Callable[[PushBatch], tuple[Keys, F64 | None]]

HEADER_WORDS = 8  # rows (-1: nothing), cols, kind, more, ended, name length, failed, samples
NAME_BYTES = 120
KINDS = ("gradient", "delta", "momentum")
ROWS, COLS, KIND, MORE, ENDED, NAME_LEN, FAILED, SAMPLES = range(8)
BARRIER_TIMEOUT_S = 600.0


@nb.njit(cache=True, nogil=True)
def sum_rows(inverse: I64, rows: F64, count: int) -> F64:
    """out[inverse[i]] += rows[i]: the rows of repeated keys summed, in unique-key order."""
    out = np.zeros((count, rows.shape[1]))
    for i in range(inverse.shape[0]):
        u = inverse[i]
        for c in range(rows.shape[1]):
            out[u, c] += rows[i, c]
    return out


@dataclass
class AggregationPlan:
    """The shared parts, made by the process that starts the workers (picklable to them)."""

    workers: int
    shards: int
    slot_bytes: int
    names: list[str]  # a slot per worker, then the leader's news (residuals after each round)
    barrier: Any  # a multiprocessing Barrier of `workers` parties
    wait_s: float = 0.05

    @classmethod
    def create(cls, ctx: Any, workers: int, shards: int, slot_bytes: int, wait_s: float = 0.05) -> AggregationPlan:
        size = max(slot_bytes, _data_offset(shards) + 4096)
        names = []
        for i in range(workers + 1):  # a round's sum has at most every slot's rows, and as many evictions
            shm = shared_memory.SharedMemory(create=True, size=size if i < workers else (workers + 1) * size + 4096)
            names.append(shm.name)
            shm.close()
        return cls(workers, shards, size, names, ctx.Barrier(workers), wait_s)

    def release(self) -> None:
        """Removes the shared memory (the process that made it, once the workers are gone)."""
        for name in self.names:
            try:
                shm = shared_memory.SharedMemory(name=name)
            except FileNotFoundError:
                continue
            shm.close()
            shm.unlink()


def _data_offset(shards: int) -> int:
    return 8 * HEADER_WORDS + NAME_BYTES + 8 * shards


@dataclass
class _Push:
    table: str
    keys: Keys
    rows: F64
    sessions: tuple[int, ...]  # this worker's pull session per shard (0: none)
    kind: str
    samples: int
    done: Future[None]


class LocalAggregator:
    """One worker's side. push() blocks until the round that carried it is acknowledged."""

    def __init__(self, plan: AggregationPlan, index: int, send: SendMerged, residual_rows: int) -> None:
        self.plan = plan
        self.index = index
        self.leader = index == 0
        self.send = send
        self._slots = [shared_memory.SharedMemory(name=n) for n in plan.names]
        self._news = plan.workers  # the slot of the leader's news
        # the leader's residual memory as of the last round, per table: every worker's view
        # (pulled state plus this) is then the state of uncompressed pushes
        self._mirrors: dict[str, ResidualStore] = {}
        self._mirror_lock = threading.Lock()
        self.residual_rows = residual_rows
        self._queue: queue.Queue[_Push] = queue.Queue()
        self._leaving = threading.Event()
        self.rows_in = 0  # rows this worker contributed
        self.rows_out = 0  # rows the leader sent for them all
        self.rounds = 0
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="local-aggregate", daemon=True)
        self._thread.start()

    def push(self, batch: PushBatch) -> None:
        """Queues one worker's batch (a session per shard at most) for the rounds; returns
        once the shards hold it."""
        table, keys, rows, kind, samples = batch.table, batch.keys, batch.rows, batch.kind, batch.samples
        sessions = tuple(t[0] if t else 0 for t in batch.targets)  # as the slots hold them: 0 for none
        if self._error is not None:
            raise RuntimeError(f"local aggregation failed: {self._error}")
        if self._leaving.is_set():
            raise RuntimeError("local aggregation: push after leave()")
        cols = rows.shape[1]
        fit = max(1, (self.plan.slot_bytes - _data_offset(self.plan.shards)) // (8 + 8 * cols))
        pieces = []
        for lo in range(0, keys.shape[0], fit):
            whole = lo == 0 and keys.shape[0] <= fit  # a piece is not what the session holds
            named = sessions if whole else (0,) * len(sessions)
            piece = _Push(table, keys[lo : lo + fit], rows[lo : lo + fit], named, kind, samples if lo == 0 else 0, Future())
            self._queue.put(piece)
            pieces.append(piece)
        for p in pieces:
            while True:  # a round thread that failed after the piece was queued never answers it
                try:
                    p.done.result(timeout=1.0)
                    break
                except FutureTimeout:
                    if self._error is not None:
                        raise RuntimeError(f"local aggregation failed: {self._error}") from None

    def leave(self, waiting: Callable[[], None] | None = None) -> None:
        """Ends this worker's pushes; returns once every worker has left (the rounds end).
        waiting: called about every 0.1 s meanwhile, so a worker that is done still obeys its
        coordinator (a cut pauses every worker; one that never answered would hang the run)."""
        self._leaving.set()
        while self._thread.is_alive():
            self._thread.join(timeout=0.1)
            if waiting is not None and self._thread.is_alive():
                waiting()
        for slot in self._slots:
            with contextlib.suppress(BufferError):  # a failed round's traceback may hold a view
                slot.close()
        if self._error is not None:
            raise RuntimeError(f"local aggregation failed: {self._error}")

    def unsent(self, table: str, keys: Keys, cols: int) -> F64 | None:
        """What the shards lack of these keys' rows (the leader's residuals, as of the last
        round), or None when the table keeps no error feedback."""
        with self._mirror_lock:
            mirror = self._mirrors.get(table)
            return None if mirror is None else mirror.take(keys, cols)

    def forget_residuals(self) -> None:
        """The leader sent its residuals exactly (a checkpoint): the mirror is empty too."""
        with self._mirror_lock:
            self._mirrors.clear()

    def stats(self) -> dict[str, float]:
        return {"aggregate_rows_in": float(self.rows_in), "aggregate_rows_out": float(self.rows_out)}

    def _run(self) -> None:
        try:
            while self._round():
                pass
        except BaseException as e:  # noqa: BLE001 - handed to every waiting push
            self._error = e
            while True:
                try:
                    self._queue.get_nowait().done.set_exception(e)
                except queue.Empty:
                    break

    def _round(self) -> bool:
        """One round; False once every worker has left."""
        item = self._next()
        head = self._header(self.index)
        if item is None:
            head[ROWS] = -1
        else:
            self._write(item)
        head[MORE] = int(not self._queue.empty())
        if item is None and self._leaving.is_set() and self._queue.empty():
            head[ENDED] = 1  # sticky: read between the barriers of this round and every later one
        barrier = self.plan.barrier
        barrier.wait(BARRIER_TIMEOUT_S)
        heads = [self._header(i) for i in range(self.plan.workers)]
        again = any(h[MORE] for h in heads) or not all(h[ENDED] for h in heads)
        failure: BaseException | None = None
        if self.leader:
            try:
                self._merge_and_send(heads)
            except BaseException as e:  # noqa: BLE001 - every worker learns of it below
                failure = e
                head[FAILED] = 1  # sticky, read after the second barrier
        barrier.wait(BARRIER_TIMEOUT_S)
        self.rounds += 1
        if failure is not None or self._header(0)[FAILED]:
            err = failure or RuntimeError("the leader's aggregated push failed; its log says why")
            if item is not None:
                item.done.set_exception(err)
            raise err
        if not self.leader:
            self._read_news()  # before the next round, in which the leader writes them again
        if item is not None:
            self.rows_in += int(item.keys.shape[0])
            item.done.set_result(None)
        return again

    def _next(self) -> _Push | None:
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            pass
        if self._leaving.is_set():
            return None
        try:
            return self._queue.get(timeout=self.plan.wait_s)
        except queue.Empty:
            return None

    def _buf(self, i: int) -> memoryview:
        buf = self._slots[i].buf
        assert buf is not None  # open until leave()
        return buf

    def _header(self, i: int) -> npt.NDArray[np.int64]:
        return np.ndarray((HEADER_WORDS,), dtype=np.int64, buffer=self._buf(i))

    def _write(self, item: _Push) -> None:
        buf = self._buf(self.index)
        head = self._header(self.index)
        n, cols = item.rows.shape
        name = item.table.encode()
        if len(name) > NAME_BYTES:
            raise ValueError(f"table name {item.table!r} is longer than {NAME_BYTES} bytes")
        off = 8 * HEADER_WORDS
        buf[off : off + len(name)] = name
        off += NAME_BYTES
        shards = self.plan.shards
        np.ndarray((shards,), dtype=np.uint64, buffer=buf, offset=off)[:] = item.sessions
        off += 8 * shards
        np.ndarray((n,), dtype=np.uint64, buffer=buf, offset=off)[:] = item.keys
        np.ndarray((n, cols), dtype=np.float64, buffer=buf, offset=off + 8 * n)[:] = item.rows
        head[COLS], head[KIND], head[NAME_LEN], head[SAMPLES] = cols, KINDS.index(item.kind), len(name), item.samples
        head[ROWS] = n

    def _read(self, i: int) -> tuple[tuple[str, str, int], Keys, F64, npt.NDArray[np.uint64]]:
        buf = self._buf(i)
        head = self._header(i)
        n, cols = int(head[ROWS]), int(head[COLS])
        off = 8 * HEADER_WORDS
        table = bytes(buf[off : off + int(head[NAME_LEN])]).decode()
        off += NAME_BYTES
        shards = self.plan.shards
        sessions = np.ndarray((shards,), dtype=np.uint64, buffer=buf, offset=off).copy()
        off += 8 * shards
        keys = np.ndarray((n,), dtype=np.uint64, buffer=buf, offset=off).copy()
        rows = np.ndarray((n, cols), dtype=np.float64, buffer=buf, offset=off + 8 * n).copy()
        return (table, KINDS[int(head[KIND])], cols), keys, rows, sessions

    def _merge_and_send(self, heads: list[npt.NDArray[np.int64]]) -> None:
        groups: dict[tuple[str, str, int], list[tuple[Keys, F64, npt.NDArray[np.uint64]]]] = {}
        samples: dict[tuple[str, str, int], int] = {}
        for i, h in enumerate(heads):
            if h[ROWS] >= 0:
                what, keys, rows, sessions = self._read(i)
                groups.setdefault(what, []).append((keys, rows, sessions))
                samples[what] = samples.get(what, 0) + int(h[SAMPLES])
        news = _News(self._buf(self._news))
        for what, parts in groups.items():
            table, kind, _ = what
            keys, rows, targets = merge_pushes(parts, self.plan.shards)
            if keys.shape[0]:
                gone, residual = self.send(PushBatch(table, keys, rows, tuple(targets), kind, samples[what]))
                self.rows_out += int(keys.shape[0])
                if residual is not None:
                    news.add(table, keys, residual, gone)
        news.close()

    def _read_news(self) -> None:
        with self._mirror_lock:
            for table, keys, residual, gone in _News(self._buf(self._news)).records():
                mirror = self._mirrors.get(table)
                if mirror is None:
                    mirror = self._mirrors[table] = ResidualStore(self.residual_rows)
                mirror.drop(gone)
                mirror.put(keys, residual)


class _News:
    """The leader's news of a round in shared memory: per table pushed with error feedback,
    the pushed keys' residuals and the keys whose residual left (sent exactly).

        i64 records; per record: i64 name bytes, cols, rows, gone; the name (8-aligned);
        keys [rows]; residuals [rows, cols]; gone keys [gone]"""

    def __init__(self, buf: memoryview) -> None:
        self.buf = buf
        self.count = 0
        self.pos = 8

    def _words(self, n: int, dtype: Any = np.int64) -> npt.NDArray[Any]:
        """n 8-byte values at the cursor."""
        out = np.ndarray((n,), dtype=dtype, buffer=self.buf, offset=self.pos)
        self.pos += 8 * n
        return out

    def add(self, table: str, keys: Keys, residual: F64, gone: Keys) -> None:
        name = table.encode()
        n, cols = residual.shape
        if self.pos + 32 + _padded(len(name)) + 8 * (n * (1 + cols) + gone.shape[0]) > len(self.buf):
            raise RuntimeError("local aggregation: a round's residuals outgrew the shared memory")
        self._words(4)[:] = (len(name), cols, n, gone.shape[0])
        self.buf[self.pos : self.pos + len(name)] = name
        self.pos += _padded(len(name))
        self._words(n, np.uint64)[:] = keys
        self._words(n * cols, np.float64)[:] = residual.reshape(-1)
        self._words(gone.shape[0], np.uint64)[:] = gone
        self.count += 1

    def close(self) -> None:
        np.ndarray((1,), dtype=np.int64, buffer=self.buf)[0] = self.count

    def records(self) -> list[tuple[str, Keys, F64, Keys]]:
        out = []
        for _ in range(int(np.ndarray((1,), dtype=np.int64, buffer=self.buf)[0])):
            name_len, cols, n, gone = (int(v) for v in self._words(4))
            table = bytes(self.buf[self.pos : self.pos + name_len]).decode()
            self.pos += _padded(name_len)
            keys = self._words(n, np.uint64).copy()
            residual = self._words(n * cols, np.float64).reshape(n, cols).copy()
            out.append((table, keys, residual, self._words(gone, np.uint64).copy()))
        return out


def _padded(size: int) -> int:
    return -(-size // 8) * 8


def merge_pushes(parts: list[tuple[Keys, F64, npt.NDArray[np.uint64]]], shards: int) -> tuple[Keys, F64, list[tuple[int, ...]]]:
    """(the sorted union of the parts' keys, their rows summed, per shard the sessions whose
    keys' union is the union's keys on that shard, or () when a part with keys there has no
    session, so the keys travel)."""
    keys = np.concatenate([k for k, _, _ in parts])
    rows = np.concatenate([r for _, r, _ in parts])
    uniq, inverse = sorted_unique_inverse(keys)
    summed = sum_rows(inverse, rows, uniq.shape[0])
    targets: list[tuple[int, ...]] = []
    present = [np.bincount(shard_of(k, shards), minlength=shards) > 0 for k, _, _ in parts]
    for s in range(shards):
        named = [int(sessions[s]) for (_, _, sessions), has in zip(parts, present, strict=True) if has[s]]
        targets.append(() if 0 in named else tuple(named))
    return uniq, summed, targets
