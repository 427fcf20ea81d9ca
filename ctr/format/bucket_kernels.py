"""numba kernels of the bucketized cuckoo map (ctr.format.bucket_map), each a pure function over
arrays with a plain-Python reference in the tests.

A table is `uint32[buckets, 2*S + S*R]`: bucket b holds S uint64 keys (the first 2*S words,
little-endian halves) and then their S rows of R words. Key 0 marks an empty slot. A key
lives in one of two buckets, `first_bucket` or `second_bucket`, both from one 64-bit mix;
inserts fill the first when it has room. A lookup reads at most two buckets, hit or miss.
Two layouts, told apart by the table's width (`slots_of`):

- wide (S = B = 8, any R): 8 keys fill one 64-byte line, the rows follow. Two choices of 8
  slots fill to 0.95 and more: within 1.06x the raw key and row bytes. A hit reads the
  keys' line and its row's.
- line (S = LINE_SLOTS = 5, R = 1, LR's rows): 5 keys, their 5 words and one spare word
  make one 64-byte bucket, so a hit in its first bucket reads one line instead of two.
  Two choices of 5 slots fill to 0.98: 1.09x the raw bytes. Random hits in a 10M-key
  table, the same kernel, alternating: 33.5 against 31.0 M/s for 80k (one thread), 36.9
  against 34.4 M/s for 2M, 73 against 67 on two threads. A table must start on a 64-byte
  boundary for a bucket to be one line (mapped files do; `bucket_map.aligned_zeros`).

Slots are numbered `b * S + j`. Lookups run as a software pipeline (`_lookup`), so many
cache misses are in flight together. In a line table both of a key's buckets are
prefetched LINE_AHEAD lookups before they are compared, without a branch on which holds
the key (`_lookup_line`). In a wide table keys' first buckets are probed in one pass, the
second buckets of the keys not there in the next, and the rows found copied in a third,
each pass prefetching WIDE_AHEAD lookups ahead, so few of a bucket's several lines are
fetched for nothing (`wide_hits`, the first two, which FFM's `locate` shares; `_lookup_wide`).
"""

from __future__ import annotations

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.data.grouping import group_order
from ctr.format.key_filter import may_contain
from ctr.routing import owner
from ctr.runtime.prefetch import LINE_WORDS, prefetch_span

U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
F32 = npt.NDArray[np.float32]
BOOL = npt.NDArray[np.bool_]

B = 8  # slots per bucket of the wide layout: 8 keys fill one 64-byte cache line
LINE_SLOTS = 5  # slots per bucket of the line layout: 5 keys and their 1-word rows
LINE_WIDTH = 16  # words per bucket of the line layout: 10 + 5 + 1 spare = one 64-byte line
assert LINE_WIDTH < B * 3  # narrower than any wide table (R >= 1), so the width tells the layout
AHEAD = 24  # lookups between a bucket's prefetch and its probe (80k hits: 8 -> 24 gave +13%)
RING = 128  # lookups in flight: a power of two > 2 * AHEAD (_lookup_narrow writes entry i - AHEAD, reads i - 2 * AHEAD)
assert RING & (RING - 1) == 0 and RING > 2 * AHEAD
# a line table's lookups between prefetch and compare (80k hits in 2 images of 5M keys, one
# thread: 16 -> 48 took 1.52-1.56 to 1.13-1.19 ms; 32 and 64 as 48; docs/design/line-lookups.md)
LINE_AHEAD = 48
# a wide table's lookups between a prefetch and its read, in each of _lookup_wide's passes
# (80k hits of 9-word rows, 10M keys, one thread: 16, 32, 48, 64 gave 3.49, 3.12, 3.02, 3.06 ms)
WIDE_AHEAD = 48
assert max(LINE_AHEAD, WIDE_AHEAD) < RING
MAX_KICKS = 500  # displacements before a mutable map grows instead
FILL_KICKS = 20_000  # before an image being filled to its load takes 1% more buckets
MAX_SHARDS = 1 << 16  # by_owner keeps owners as uint16

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_LO = np.uint64(0xFFFFFFFF)


def width_for(row_words: int) -> int:
    """Words per bucket of a table with rows of `row_words` (1-word rows: the line layout)."""
    return LINE_WIDTH if row_words == 1 else B * (2 + row_words)


@nb.njit(cache=True)
def row_words_of(width: int) -> int:
    """The row width of a table `width` words wide (0 when no layout has that width)."""
    if width == LINE_WIDTH:
        return 1
    return width // B - 2 if width % B == 0 and width >= 3 * B else 0


@nb.njit(cache=True, inline="always")
def slots_of(table: U32) -> int:
    """Slots per bucket of a table (its layout, from its width)."""
    return LINE_SLOTS if table.shape[1] == LINE_WIDTH else B


@nb.njit(cache=True, inline="always")
def mix(key: np.uint64) -> np.uint64:
    """splitmix64's finalizer: every key bit moves both bucket choices."""
    z = (key ^ (key >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@nb.njit(cache=True, inline="always")
def first_bucket(m: np.uint64, buckets: int) -> int:
    return int(np.int64(((m >> np.uint64(32)) * np.uint64(buckets)) >> np.uint64(32)))


@nb.njit(cache=True, inline="always")
def second_bucket(m: np.uint64, buckets: int) -> int:
    b = int(np.int64(((m & _LO) * np.uint64(buckets)) >> np.uint64(32)))
    if b == first_bucket(m, buckets):
        b += 1
        if b == buckets:
            b = 0
    return b


@nb.njit(cache=True, inline="always")
def _key_at(table: U32, b: int, j: int) -> np.uint64:
    return np.uint64(table[b, 2 * j]) | (np.uint64(table[b, 2 * j + 1]) << np.uint64(32))


@nb.njit(cache=True, inline="always")
def _index_in(keys64: U64, b: int, key: np.uint64, slots: int) -> int:
    """Where key sits in bucket b (0..slots-1; keys64: the table viewed as uint64), -1 when
    absent. Eight compares without an early exit (a line bucket's last three words are
    rows, never matched): they vectorize, and no branch can be missed."""
    found = -1
    for j in range(B):
        found = j if keys64[b, j] == key and j < slots else found
    return found


@nb.njit(cache=True, inline="always")
def _slot_in(keys64: U64, b: int, key: np.uint64, slots: int) -> int:
    """The slot of key in bucket b, -1 when absent."""
    j = _index_in(keys64, b, key, slots)
    return b * slots + j if j >= 0 else -1


@nb.njit(cache=True, inline="always")
def _probe(keys64: U64, buckets: int, key: np.uint64, slots: int) -> int:
    """find_one over the uint64 view of the table's keys (`buckets` its row count: a
    local, which the compiler keeps in a register)."""
    m = mix(key)
    s = _slot_in(keys64, first_bucket(m, buckets), key, slots)
    if s < 0:
        s = _slot_in(keys64, second_bucket(m, buckets), key, slots)
    return s


@nb.njit(cache=True, inline="always")
def find_one(table: U32, key: np.uint64) -> int:
    """The slot of key, -1 when absent."""
    return _probe(table.view(np.uint64), table.shape[0], key, slots_of(table))


@nb.njit(cache=True, inline="always")
def _copy_at(table: U32, b: int, j: int, slots: int, out: U32, q: int) -> None:
    """out[q] = the row of bucket b's j-th slot (`slots` a bucket)."""
    at = 2 * slots + j * out.shape[1]
    for c in range(out.shape[1]):
        out[q, c] = table[b, at + c]


@nb.njit(cache=True, inline="always")
def _narrow(table: U32) -> bool:
    """Whether a whole bucket spans at most three cache lines: then its rows are prefetched
    with its keys, and a row costs no miss of its own."""
    return table.shape[1] <= 3 * LINE_WORDS


@nb.njit(cache=True, inline="always")
def _prefetch_keys(table: U32, b: int) -> None:
    """The lines of bucket b's keys (and rows, when narrow)."""
    prefetch_span(table, b, 0, table.shape[1] - 1 if _narrow(table) else 2 * B - 1)


@nb.njit(cache=True, inline="always")
def _prefetch_row(table: U32, s: int, width: int) -> None:
    """The lines of the row in slot s (`width` words) of a wide table."""
    b = s // B
    at = 2 * B + (s - b * B) * width
    prefetch_span(table, b, at, at + width - 1)


@nb.njit(cache=True, nogil=True)
def _lookup_narrow(table: U32, keys: U64, at: I64, lo: int, hi: int, bits: U64, out: U32, found: BOOL) -> None:
    """_lookup for a narrow wide-layout table, whose rows come with its keys' lines: two
    stages, and no ring of slots to copy later; the whole bucket (up to its last word) is
    prefetched with its keys."""
    keys64 = table.view(np.uint64)
    last_word = table.shape[1] - 1
    buckets = table.shape[0]
    filtered = bits.shape[0] > 0
    indexed = at.shape[0] > 0
    mask = RING - 1
    second = np.empty(RING, dtype=np.int64)  # the bucket to probe next (-1: none)
    for i in range(lo, hi + 2 * AHEAD):
        if i < hi:
            q = at[i] if indexed else i
            if not found[q] and (not filtered or may_contain(bits, keys[q])):
                prefetch_span(table, first_bucket(mix(keys[q]), buckets), 0, last_word)
        j = i - AHEAD
        if lo <= j < hi:
            q = at[j] if indexed else j
            b2 = -1
            if not found[q] and (not filtered or may_contain(bits, keys[q])):
                m = mix(keys[q])
                b = first_bucket(m, buckets)
                x = _index_in(keys64, b, keys[q], B)
                if x >= 0:
                    _copy_at(table, b, x, B, out, q)
                    found[q] = True
                else:
                    b2 = second_bucket(m, buckets)
                    prefetch_span(table, b2, 0, last_word)
            second[j & mask] = b2
        k = i - 2 * AHEAD
        if lo <= k < hi and second[k & mask] >= 0:
            q = at[k] if indexed else k
            b = second[k & mask]
            x = _index_in(keys64, b, keys[q], B)
            if x >= 0:
                _copy_at(table, b, x, B, out, q)
                found[q] = True


@nb.njit(cache=True, inline="always")
def _compare_line(table: U32, keys64: U64, b: int, key: np.uint64, out: U32, q: int) -> bool:
    """out[q] = key's row where line bucket b holds it; whether it does. Five compares and
    selects, no branch on which slot matches."""
    value = out[q, 0]
    hit = False
    for s in range(LINE_SLOTS):  # a key sits in at most one slot
        here = keys64[b, s] == key
        value = table[b, 2 * LINE_SLOTS + s] if here else value
        hit |= here
    out[q, 0] = value
    return hit


@nb.njit(cache=True, nogil=True)
def _lookup_line(table: U32, keys: U64, at: I64, lo: int, hi: int, bits: U64, out: U32, found: BOOL) -> None:
    """_lookup for a line table, in two passes. The first prefetches each key's first
    bucket (one line) LINE_AHEAD lookups before comparing it, and lists the keys not there
    without a branch (the list's end moves by 0 or 1); the second does the same over the
    listed keys' second buckets. An image keeps about 3 keys in 4 in their first bucket
    (ctr.format.bucket_placement), so a lookup reads 1.25 lines instead of 2. A lazy
    second probe inside one pass mispredicted a branch on every key in its second bucket
    and emptied the pipeline of misses in flight with it (40k hits in a 5M-key table, one
    thread: 1.30 ms against 0.82 for reading both buckets of every key)."""
    keys64 = table.view(np.uint64)
    buckets = table.shape[0]
    filtered = bits.shape[0] > 0
    indexed = at.shape[0] > 0
    mask = RING - 1
    ring = np.empty(RING, dtype=np.int64)  # a lookup's bucket (-1: nothing to look up)
    left = np.empty(max(0, hi - lo), dtype=np.int64)  # positions not in their first bucket
    n_left = 0
    for i in range(lo, hi + LINE_AHEAD):
        if i < hi:
            q = at[i] if indexed else i
            b = -1
            if not found[q] and (not filtered or may_contain(bits, keys[q])):
                b = first_bucket(mix(keys[q]), buckets)
                prefetch_span(table, b, 0, LINE_WIDTH - 1)
            ring[i & mask] = b
        j = i - LINE_AHEAD
        if lo <= j < hi and ring[j & mask] >= 0:
            q = at[j] if indexed else j
            hit = _compare_line(table, keys64, ring[j & mask], keys[q], out, q)
            found[q] = hit
            left[n_left] = q
            n_left += 0 if hit else 1
    for i in range(n_left + LINE_AHEAD):
        if i < n_left:
            b = second_bucket(mix(keys[left[i]]), buckets)
            prefetch_span(table, b, 0, LINE_WIDTH - 1)
            ring[i & mask] = b
        j = i - LINE_AHEAD
        if j >= 0:
            q = left[j]
            found[q] = _compare_line(table, keys64, ring[j & mask], keys[q], out, q)


@nb.njit(cache=True, nogil=True)
def wide_hits(table: U32, keys: U64, at: I64, lo: int, hi: int, bits: U64, done: BOOL) -> tuple[I64, I64, int]:
    """For positions q = at[i] (q = i when `at` is empty), i in [lo, hi), not `done` yet
    whose key the filter `bits` may hold (every key when it is empty), in a wide-layout
    table: (positions found, their slots, how many), in two passes, each a pipeline with no
    branch on what a probe found. The first compares each key's first bucket (its keys'
    line, prefetched WIDE_AHEAD lookups before) and lists the hits and the keys not there;
    the second does the same over those keys' second buckets. One pass that branched on
    each probe (prefetch the second bucket, or the row) emptied the pipeline of misses in
    flight at every mispredicted key (docs/design/line-lookups.md)."""
    keys64 = table.view(np.uint64)
    buckets = table.shape[0]
    filtered = bits.shape[0] > 0
    indexed = at.shape[0] > 0
    mask = RING - 1
    ring = np.empty(RING, dtype=np.int64)  # a lookup's bucket (-1: nothing to look up)
    n = max(0, hi - lo)
    hit_at = np.empty(n, dtype=np.int64)  # positions found, and their slots
    hit_slot = np.empty(n, dtype=np.int64)
    left = np.empty(n, dtype=np.int64)  # positions not in their first bucket
    n_hit, n_left = 0, 0
    for i in range(lo, hi + WIDE_AHEAD):
        if i < hi:
            q = at[i] if indexed else i
            b = -1
            if not done[q] and (not filtered or may_contain(bits, keys[q])):
                b = first_bucket(mix(keys[q]), buckets)
                _prefetch_keys(table, b)
            ring[i & mask] = b
        j = i - WIDE_AHEAD
        if lo <= j < hi and ring[j & mask] >= 0:
            q = at[j] if indexed else j
            b = ring[j & mask]
            x = _index_in(keys64, b, keys[q], B)
            hit_at[n_hit], hit_slot[n_hit] = q, b * B + x
            n_hit += 1 if x >= 0 else 0
            left[n_left] = q
            n_left += 0 if x >= 0 else 1
    for i in range(n_left + WIDE_AHEAD):
        if i < n_left:
            b = second_bucket(mix(keys[left[i]]), buckets)
            _prefetch_keys(table, b)
            ring[i & mask] = b
        j = i - WIDE_AHEAD
        if j >= 0:
            q = left[j]
            b = ring[j & mask]
            x = _index_in(keys64, b, keys[q], B)
            hit_at[n_hit], hit_slot[n_hit] = q, b * B + x
            n_hit += 1 if x >= 0 else 0
    return hit_at, hit_slot, n_hit


@nb.njit(cache=True, nogil=True)
def _lookup_wide(table: U32, keys: U64, at: I64, lo: int, hi: int, bits: U64, out: U32, found: BOOL) -> None:
    """_lookup for a table of wide rows (the wide layout, rows not in their keys' lines): the
    keys found in wide_hits' two passes, then a third that prefetches each hit's row
    WIDE_AHEAD hits before copying it. 80k hits of 9-word rows in a 10M-key table, one
    thread: 3.02 ms, against 3.77 for one pipeline that branched on each probe."""
    hit_at, hit_slot, n_hit = wide_hits(table, keys, at, lo, hi, bits, found)
    width = out.shape[1]
    for i in range(n_hit + WIDE_AHEAD):
        if i < n_hit:
            _prefetch_row(table, hit_slot[i], width)
        j = i - WIDE_AHEAD
        if j >= 0:
            s = hit_slot[j]
            _copy_at(table, s // B, s % B, B, out, hit_at[j])
            found[hit_at[j]] = True


@nb.njit(cache=True, nogil=True)
def _lookup(table: U32, keys: U64, at: I64, lo: int, hi: int, bits: U64, out: U32, found: BOOL) -> None:
    """For positions q = at[i] (or q = i when `at` is empty), i in [lo, hi), whose key is
    not found yet and that the filter `bits` may hold (every key when it is empty):
    out[q] = the row and found[q] = True where the table holds keys[q].

    Software pipelines, so that many lookups' cache misses are in flight at once instead
    of one at a time: a bucket is prefetched some lookups before it is probed, and a key's
    second bucket only when it is not in its first (a fifth of hits at load 0.95, and
    every miss): prefetching both up front fetched 4 lines per LR hit instead of 2.4, and
    those fetches were the limit. One kernel a layout: line (_lookup_line), narrow wide
    rows that come with their keys' lines (_lookup_narrow), wide rows (_lookup_wide)."""
    if table.shape[1] == LINE_WIDTH:
        _lookup_line(table, keys, at, lo, hi, bits, out, found)
    elif _narrow(table):
        _lookup_narrow(table, keys, at, lo, hi, bits, out, found)
    else:
        _lookup_wide(table, keys, at, lo, hi, bits, out, found)


@nb.njit(cache=True, nogil=True)
def find_slots(table: U32, keys: U64) -> I64:
    """Slot of each key, -1 where absent: both buckets prefetched AHEAD keys before the
    probe (not _lookup's lazy second bucket: this serves writes and deltas, not requests)."""
    keys64 = table.view(np.uint64)
    buckets = table.shape[0]
    slots = slots_of(table)
    n = keys.shape[0]
    out = np.empty(n, dtype=np.int64)
    for i in range(n + AHEAD):
        if i < n:
            m = mix(keys[i])
            _prefetch_keys(table, first_bucket(m, buckets))
            _prefetch_keys(table, second_bucket(m, buckets))
        if i >= AHEAD:
            out[i - AHEAD] = _probe(keys64, buckets, keys[i - AHEAD], slots)
    return out


@nb.njit(cache=True, nogil=True)
def gather_into(table: U32, slots: I64, out: U32) -> None:
    """out[i] = the row of slots[i] (R = out.shape[1] words); leaves out[i] where slots[i] < 0."""
    per = slots_of(table)
    for i in range(slots.shape[0]):
        if slots[i] >= 0:
            b = slots[i] // per
            _copy_at(table, b, slots[i] - b * per, per, out, i)


@nb.njit(cache=True, nogil=True)
def lookup_rows(table: U32, keys: U64, lo: int, hi: int, bits: U64, out: U32, found: BOOL) -> None:
    """Looks up keys[lo:hi] not found yet that the filter `bits` may hold (every key when
    it is empty): out[q] = the row and found[q] = True where the table holds keys[q]."""
    _lookup(table, keys, np.empty(0, np.int64), lo, hi, bits, out, found)


@nb.njit(cache=True, nogil=True)
def lookup_at(table: U32, keys: U64, at: I64, out: U32, found: BOOL) -> None:
    """For each position q in `at` whose key is not found yet: out[q] = its row and
    found[q] = True where the table holds keys[q]."""
    _lookup(table, keys, at, 0, at.shape[0], np.empty(0, np.uint64), out, found)


@nb.njit(cache=True, nogil=True)
def zero_unfound(out: U32, found: BOOL) -> None:
    """out[q] = 0 where found[q] is False: what lookups into an uninitialized `out` leave
    for absent keys. Cheaper than zeroing all of `out` first, which for FM's 9-word rows of
    a 200 x 500 request is a 2.9 MB memset of rows the lookups overwrite (FM's lookups in
    process: 4.06 against 3.98 ms a request, medians of 60)."""
    for q in range(found.shape[0]):
        if not found[q]:
            for w in range(out.shape[1]):
                out[q, w] = 0


def zero_unfound_reference(out: U32, found: BOOL) -> None:
    """Plain numpy zero_unfound, for its tests."""
    out[~found] = 0


@nb.njit(cache=True, nogil=True)
def by_owner(keys: U64, lo: int, hi: int, shards: int) -> tuple[I64, I64]:
    """The positions lo..hi-1 grouped by the shard owning their key (ctr.routing.owner),
    in order within a shard, and each shard's start in that list (shards + 1 bounds).
    Owners are kept as uint16 (shards <= 65536): an int64 array of them, freshly
    allocated, page-faulted for most of this kernel's time."""
    if shards > MAX_SHARDS:
        raise ValueError("more shards than by_owner can group")
    owners = np.empty(hi - lo, dtype=np.uint16)
    for q in range(lo, hi):
        owners[q - lo] = owner(keys[q], shards) if shards > 1 else 0
    return group_order(owners, shards, lo)


@nb.njit(cache=True, inline="always")
def _free_in(table: U32, b: int) -> int:
    for j in range(slots_of(table)):
        if table[b, 2 * j] == 0 and table[b, 2 * j + 1] == 0:
            return j
    return -1


@nb.njit(cache=True, inline="always")
def _place(table: U32, b: int, j: int, key: np.uint64, row: U32) -> None:
    table[b, 2 * j] = np.uint32(key & _LO)
    table[b, 2 * j + 1] = np.uint32(key >> np.uint64(32))
    width = row.shape[0]
    at = 2 * slots_of(table) + j * width
    for w in range(width):
        table[b, at + w] = row[w]


@nb.njit(cache=True, nogil=True)
def put_rows(
    table: U32, keys: U64, rows: U32, seed: int, homeless: U32, max_kicks: int = MAX_KICKS
) -> tuple[int, int, np.uint64]:
    """Upserts keys[i] -> rows[i] in order (a later duplicate wins).

    Returns (done, added, homeless_key). When an insert finds no room within max_kicks
    displacements, the walk stops holding one entry that has no slot: its key is returned
    (its row is left in `homeless`), done is the count of keys handled, and the caller grows
    the table, puts the homeless entry back and then keys[done:]. Otherwise done is
    len(keys) and the homeless key 0. Key 0 is invalid (the caller rejects it)."""
    buckets = table.shape[0]
    slots = slots_of(table)
    width = rows.shape[1]
    added = 0
    state = np.uint64(seed) | np.uint64(1)
    evicted = np.empty(width, dtype=np.uint32)
    for i in range(keys.shape[0]):
        key = keys[i]
        s = find_one(table, key)
        if s >= 0:
            b = s // slots
            _place(table, b, s - b * slots, key, rows[i])
            continue
        added += 1
        m = mix(key)
        b1 = first_bucket(m, buckets)
        j = _free_in(table, b1)
        if j >= 0:
            _place(table, b1, j, key, rows[i])
            continue
        b2 = second_bucket(m, buckets)
        j = _free_in(table, b2)
        if j >= 0:
            _place(table, b2, j, key, rows[i])
            continue
        # random walk: displace a resident of b into its other bucket, until one fits
        for w in range(width):
            homeless[w] = rows[i, w]
        cur = key
        b = b2
        for _ in range(max_kicks):
            state ^= state << np.uint64(13)
            state ^= state >> np.uint64(7)
            state ^= state << np.uint64(17)
            j = int(state % np.uint64(slots))
            victim = _key_at(table, b, j)
            at = 2 * slots + j * width
            for w in range(width):
                evicted[w] = table[b, at + w]
            _place(table, b, j, cur, homeless)
            vm = mix(victim)
            vb = first_bucket(vm, buckets)
            if vb == b:
                vb = second_bucket(vm, buckets)
            cur = victim
            for w in range(width):
                homeless[w] = evicted[w]
            jj = _free_in(table, vb)
            if jj >= 0:
                _place(table, vb, jj, cur, homeless)
                cur = np.uint64(0)
                break
            b = vb
        if cur != np.uint64(0):
            return i + 1, added, cur
    return keys.shape[0], added, np.uint64(0)


@nb.njit(cache=True, nogil=True)
def delete_keys(table: U32, keys: U64) -> int:
    """Clears the slots of keys (absent ones are skipped); returns how many went."""
    removed = 0
    for q in range(keys.shape[0]):
        s = find_one(table, keys[q])
        if s < 0:
            continue
        slots = slots_of(table)
        b = s // slots
        j = s - b * slots
        table[b, 2 * j] = 0
        table[b, 2 * j + 1] = 0
        row_width = row_words_of(table.shape[1])
        at = 2 * slots + j * row_width
        for w in range(row_width):
            table[b, at + w] = 0
        removed += 1
    return removed


@nb.njit(cache=True, nogil=True)
def occupied_slots(table: U32) -> I64:
    """Slot numbers of every entry, in slot order."""
    slots = slots_of(table)
    n = 0
    for b in range(table.shape[0]):
        for j in range(slots):
            if table[b, 2 * j] != 0 or table[b, 2 * j + 1] != 0:
                n += 1
    out = np.empty(n, dtype=np.int64)
    n = 0
    for b in range(table.shape[0]):
        for j in range(slots):
            if table[b, 2 * j] != 0 or table[b, 2 * j + 1] != 0:
                out[n] = b * slots + j
                n += 1
    return out


@nb.njit(cache=True, nogil=True)
def keys_of(table: U32, slots: I64) -> U64:
    out = np.empty(slots.shape[0], dtype=np.uint64)
    per = slots_of(table)
    for i in range(slots.shape[0]):
        b = slots[i] // per
        out[i] = _key_at(table, b, slots[i] - b * per)
    return out


def mix_reference(key: int) -> int:
    z = ((key ^ (key >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def find_slot_reference(table: U32, key: int) -> int:
    """Plain-Python find_one: the key's two buckets, scanned in order."""
    buckets = table.shape[0]
    m = mix_reference(key)
    b1 = ((m >> 32) * buckets) >> 32
    b2 = ((m & 0xFFFFFFFF) * buckets) >> 32
    if b2 == b1:
        b2 = (b1 + 1) % buckets
    slots = LINE_SLOTS if table.shape[1] == LINE_WIDTH else B
    for b in (b1, b2):
        for j in range(slots):
            if int(table[b, 2 * j]) | (int(table[b, 2 * j + 1]) << 32) == key:
                return b * slots + j
    return -1
