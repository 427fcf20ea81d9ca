"""Filling a fresh bucketized cuckoo table (ctr.format.bucket_kernels) so that as many keys
as possible sit in their first bucket: an image is built once and read by every request,
and a lookup whose key is in its first bucket reads one bucket, not two (the two-pass
lookups, `bucket_kernels._lookup_line`).

`put_rows`'s random walk leaves about half the keys of a line table filled to 0.98 in their
second bucket: each displacement along a long walk moves a key out of its first bucket. Here
every key first takes its first bucket while it has room (about 83% of keys at that load,
which is what five slots a bucket allow); each key left over then takes the cheapest way to
a free slot found by a breadth-first search over displacements, where the cost is the count
of keys that end in their second bucket. With 10M keys at 0.98 this leaves 7 in 10 keys in
their first bucket (bench/bench_lookups.py). A key the search cannot place within its node
budget falls back to the random walk; one the walk cannot place is returned, and the caller
takes a larger table.

`place_reference` is the plain-Python version the tests compare against.
"""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.format.bucket_kernels import (
    FILL_KICKS,
    _free_in,
    _key_at,
    _place,
    first_bucket,
    mix,
    mix_reference,
    put_rows,
    second_bucket,
    slots_of,
)

U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]

NODES = 2048  # buckets a search visits at most before it gives the key to the random walk


@nb.njit(cache=True, inline="always")
def _other(key: np.uint64, b: int, buckets: int) -> tuple[int, int]:
    """The bucket a resident of b moves to when displaced, and the change in the count of
    keys out of their first bucket (+1 leaving its first, -1 going back to it)."""
    m = mix(key)
    b1 = first_bucket(m, buckets)
    if b == b1:
        return second_bucket(m, buckets), 1
    return b1, -1


@nb.njit(cache=True, inline="always")
def _on_path(node_bucket: I64, node_parent: I64, n: int, b: int) -> bool:
    """Whether bucket b is node n's or one of its ancestors' (a path through a bucket twice
    would move two keys into its one free slot)."""
    while n >= 0:
        if node_bucket[n] == b:
            return True
        n = node_parent[n]
    return False


@nb.njit(cache=True)
def _search(table: U32, key: np.uint64, node_bucket: I64, node_parent: I64, node_slot: I64, node_cost: I64) -> int:
    """Breadth-first over displacements from key's two buckets; returns the node of the
    cheapest path that ends at a bucket with a free slot, among the shallowest level that
    has one (ties: the first found), or -1 within NODES. Node 0 is the key in its first
    bucket (cost 0), node 1 in its second (cost 1); a child moves the resident of its
    parent's slot node_slot into the child's bucket."""
    buckets = table.shape[0]
    slots = slots_of(table)
    m = mix(key)
    node_bucket[0], node_parent[0], node_slot[0], node_cost[0] = first_bucket(m, buckets), -1, -1, 0
    node_bucket[1], node_parent[1], node_slot[1], node_cost[1] = second_bucket(m, buckets), -1, -1, 1
    level_start, level_end, n_nodes = 0, 2, 2
    while level_start < level_end:
        best = -1
        for n in range(level_start, level_end):
            if _free_in(table, node_bucket[n]) >= 0 and (best < 0 or node_cost[n] < node_cost[best]):
                best = n
        if best >= 0:
            return best
        for n in range(level_start, level_end):
            b = node_bucket[n]
            for j in range(slots):
                if n_nodes == NODES:
                    return -1
                alt, dc = _other(_key_at(table, b, j), b, buckets)
                if _on_path(node_bucket, node_parent, n, alt):
                    continue
                node_bucket[n_nodes], node_parent[n_nodes] = alt, n
                node_slot[n_nodes], node_cost[n_nodes] = j, node_cost[n] + dc
                n_nodes += 1
        level_start, level_end = level_end, n_nodes
    return -1


@nb.njit(cache=True)
def _move_along(table: U32, key: np.uint64, row: U32, end: int, node_bucket: I64, node_parent: I64, node_slot: I64) -> None:
    """Frees a slot at the root of the path ending at node `end` by moving each resident on
    it one bucket down the path, then puts key there."""
    slots = slots_of(table)
    width = row.shape[0]
    n = end
    j = _free_in(table, node_bucket[n])
    while node_parent[n] >= 0:
        p, s = node_parent[n], node_slot[n]
        src, dst = node_bucket[p], node_bucket[n]
        table[dst, 2 * j] = table[src, 2 * s]
        table[dst, 2 * j + 1] = table[src, 2 * s + 1]
        for w in range(width):
            table[dst, 2 * slots + j * width + w] = table[src, 2 * slots + s * width + w]
        j, n = s, p
    _place(table, node_bucket[n], j, key, row)


@nb.njit(cache=True, nogil=True)
def place_first_preferring(table: U32, keys: U64, rows: U32, seed: int) -> np.uint64:
    """Fills an empty table with keys[i] -> rows[i] (keys unique and non-zero). Returns the
    homeless key: 0 when every key has a slot; otherwise the table cannot hold them (the
    caller takes a larger one)."""
    buckets = table.shape[0]
    left = np.zeros(keys.shape[0], dtype=np.bool_)
    for i in range(keys.shape[0]):
        b1 = first_bucket(mix(keys[i]), buckets)
        j = _free_in(table, b1)
        if j >= 0:
            _place(table, b1, j, keys[i], rows[i])
        else:
            left[i] = True
    node_bucket = np.empty(NODES, dtype=np.int64)
    node_parent = np.empty(NODES, dtype=np.int64)
    node_slot = np.empty(NODES, dtype=np.int64)
    node_cost = np.empty(NODES, dtype=np.int64)
    homeless = np.empty(rows.shape[1], dtype=np.uint32)
    for i in range(keys.shape[0]):
        if not left[i]:
            continue
        end = _search(table, keys[i], node_bucket, node_parent, node_slot, node_cost)
        if end >= 0:
            _move_along(table, keys[i], rows[i], end, node_bucket, node_parent, node_slot)
            continue
        _, _, lost = put_rows(table, keys[i : i + 1], rows[i : i + 1], seed, homeless, FILL_KICKS)
        if lost != np.uint64(0):
            return lost
    return np.uint64(0)


def place_reference(table: U32, keys: U64, rows: U32) -> bool:
    """Plain-Python place_first_preferring for small tables that never need the random
    walk: the same first pass and the same search. Returns False where the search fails."""
    buckets = table.shape[0]
    slots = 5 if table.shape[1] == 16 else 8
    width = rows.shape[1]

    def buckets_of(key: int) -> tuple[int, int]:
        m = mix_reference(key)
        b1 = ((m >> 32) * buckets) >> 32
        b2 = ((m & 0xFFFFFFFF) * buckets) >> 32
        return b1, (b1 + 1) % buckets if b2 == b1 else b2

    def key_at(b: int, j: int) -> int:
        return int(table[b, 2 * j]) | (int(table[b, 2 * j + 1]) << 32)

    def free_in(b: int) -> int:
        return next((j for j in range(slots) if key_at(b, j) == 0), -1)

    def put(b: int, j: int, key: int, row: list[int]) -> None:
        table[b, 2 * j], table[b, 2 * j + 1] = key & 0xFFFFFFFF, key >> 32
        table[b, 2 * slots + j * width : 2 * slots + (j + 1) * width] = row

    def row_at(b: int, j: int) -> list[int]:
        return [int(w) for w in table[b, 2 * slots + j * width : 2 * slots + (j + 1) * width]]

    left = []
    for key, row in zip(keys.tolist(), rows.tolist(), strict=True):
        b1 = buckets_of(key)[0]
        j = free_in(b1)
        if j >= 0:
            put(b1, j, key, row)
        else:
            left.append((key, row))
    for key, row in left:
        b1, b2 = buckets_of(key)
        nodes: list[tuple[int, int, int, int]] = [(b1, -1, -1, 0), (b2, -1, -1, 1)]  # bucket, parent, slot, cost
        start, end, found = 0, 2, -1
        while start < end and found < 0:
            for n in range(start, end):
                if free_in(nodes[n][0]) >= 0 and (found < 0 or nodes[n][3] < nodes[found][3]):
                    found = n
            if found >= 0:
                break
            for n in range(start, end):
                b = nodes[n][0]
                for j in range(slots):
                    if len(nodes) == NODES:
                        return False
                    r1, r2 = buckets_of(key_at(b, j))
                    alt, dc = (r2, 1) if b == r1 else (r1, -1)
                    path, a = set(), n
                    while a >= 0:
                        path.add(nodes[a][0])
                        a = nodes[a][1]
                    if alt not in path:
                        nodes.append((alt, n, j, nodes[n][3] + dc))
            start, end = end, len(nodes)
        if found < 0:
            return False
        n = found
        j = free_in(nodes[n][0])
        while nodes[n][1] >= 0:
            p, s = nodes[n][1], nodes[n][2]
            put(nodes[n][0], j, key_at(nodes[p][0], s), row_at(nodes[p][0], s))
            j, n = s, p
        put(nodes[n][0], j, key, row)
    return True
