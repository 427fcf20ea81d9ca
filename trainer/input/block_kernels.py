"""numba kernels that parse a block of sample lines straight into batch arrays.

One call parses up to max_lines lines of a block (complete lines, and the unterminated last
line of a finished file when `final`): it splits, buckets and hashes every feature with no
Python per line or per feature. A line the kernel cannot settle on its own is *deferred*:
malformed lines, invalid UTF-8, over-long lines, numbers outside the exactly-rounded fast
path, fields new to a growing field index. The caller (trainer.input.block_parser) runs the reference
parser (ctr.data.formats) on those lines alone, which reports the error or grows the index, so
both always agree. The tests check that batches are identical on every real file and on
generated nasty lines.

Layout (Python side builds it, trainer.input.block_parser.Layout):
- MODE_COLUMNS (criteo, csv): col_role[c] is a field index or LABEL_COLUMN, SKIPPED,
  DROPPED; col_numeric[c] buckets the column's number; col_sep[c] (when col_sep is not
  empty), a multi-valued column's separator byte, splits its value into a feature a piece
  (0: one value); `ragged` lets lines have fewer
  columns (criteo); csv needs exactly ncols. `quoted` (csv): a column that starts with a
  double quote is the value up to the next one (ctr.data.csv_line); a doubled quote inside,
  an unclosed one or text after the closing one defers the line.
- MODE_LIBSVM / MODE_LIBFFM / MODE_KV / MODE_VW: named fields go through an open-addressed
  table (name_keys, name_role, name_numeric) keyed by token_key(name, 0); numbered fields
  (libsvm positions, libffm field numbers) are n itself below nfields. MODE_VW (Vowpal
  Wabbit's text format, reference ctr.data.formats._vw): a namespace is a field, a bare '|'
  the default namespace's; the kernel takes an importance weight of 1 and a tag before the
  first '|' and defers anything else there.
- MODE_JSON (one JSON object a line, reference ctr.data.json_lines): the kv table's names
  are the object's keys ("key.inner" for a nested object's), the label's name is in it as
  LABEL_COLUMN; a string's text, a number's JSON text, true and false as True and False,
  null as nothing, a list's scalars as several values. A line with an escape, a key given
  twice, a container in a list or a constant (NaN, Infinity) is deferred: the reference
  settles those.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np
import numpy.typing as npt

from ctr.data.formats import MISSING_NUMBERS, VW_DEFAULT_NAMESPACE
from ctr.data.hashing import FNV64_OFFSET, FNV64_PRIME, finish_key, fnv_bytes

MODE_COLUMNS = 0
MODE_LIBSVM = 1
MODE_LIBFFM = 2
MODE_KV = 3
MODE_VW = 4
MODE_JSON = 5
JSON_MAX_DEPTH = 8  # objects nested deeper than this defer their line
JSON_MAX_NESTED = 64  # a line of more nested objects defers (each key is checked against them all)

LABEL_COLUMN = -3
SKIPPED = -2
DROPPED = -1
_DEFER = -4  # a field the reference parser must settle (it grows the index or errs)

_P10 = np.array([10.0**i for i in range(23)], dtype=np.float64)  # exact up to 1e22
_FLOAT32_MAX = 3.4028234663852886e38
# ctr.data.formats.MISSING_NUMBERS, joined, with each marker's end
_MISSING_BYTES = np.frombuffer("".join(MISSING_NUMBERS).encode(), dtype=np.uint8)
_MISSING_ENDS = np.cumsum([len(m) for m in MISSING_NUMBERS]).astype(np.int64)
_MISSING_NUMBER = -2  # _bucket's answer for a missing-number marker: no feature
_TRUE = np.frombuffer(b"true", dtype=np.uint8)  # a label's words, compared with the bytes lowercased
_FALSE = np.frombuffer(b"false", dtype=np.uint8)
_VW_DEFAULT = np.frombuffer(VW_DEFAULT_NAMESPACE.encode(), dtype=np.uint8)  # a bare '|''s field name
# a JSON line's null, and the tokens its true and false train as (ctr.data.json_lines.value_text:
# as Python, Parquet and pandas write a boolean); the words are matched as _TRUE and _FALSE
_JSON_NULL = np.frombuffer(b"null", dtype=np.uint8)
_TOKEN_TRUE = np.frombuffer(b"True", dtype=np.uint8)
_TOKEN_FALSE = np.frombuffer(b"False", dtype=np.uint8)
_JSON_STRING, _JSON_NUMBER, _JSON_TRUE_VALUE, _JSON_FALSE_VALUE, _JSON_NULL_VALUE = 0, 1, 2, 3, 4
# parse_block's features as _emitted writes them: keys, fields, values, and each token's
# start, end and whether it sits in the scratch buffer (for crosses)
FeatureArrays = tuple[
    npt.NDArray[np.uint64],
    npt.NDArray[np.int32],
    npt.NDArray[np.float32],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.bool_],
]
_NUM_OK = 0
_NUM_BAD = 1
_NUM_SLOW = 2  # a valid number outside the fast path: deferred to float()


@nb.njit(cache=True, nogil=True, inline="always")
def _is_space(c: int) -> bool:
    return c == 32 or c == 9 or c == 10 or c == 13 or c == 11 or c == 12


@nb.njit(cache=True, nogil=True, inline="always")
def _is_qid(buf: npt.NDArray[np.uint8], ts: int, te: int) -> bool:
    """Whether buf[ts:te] starts with 'qid:' (SVMlight's query id, not a feature)."""
    return te - ts >= 4 and buf[ts] == 113 and buf[ts + 1] == 105 and buf[ts + 2] == 100 and buf[ts + 3] == 58


@nb.njit(cache=True, nogil=True, inline="always")
def _is_digit(c: int) -> bool:
    return 48 <= c <= 57


@nb.njit(cache=True, nogil=True)
def utf8_valid(buf: npt.NDArray[np.uint8], s: int, e: int) -> bool:
    """Whether buf[s:e] is valid UTF-8 as Python's strict decoder reads it (no overlong
    forms, no surrogates, nothing above U+10FFFF)."""
    acc = 0
    for j in range(s, e):  # a branch-free OR that LLVM vectorizes: most lines are ASCII
        acc |= buf[j]
    if acc < 0x80:
        return True
    i = s
    while i < e:
        c = buf[i]
        if c < 0x80:
            i += 1
            continue
        if c < 0xC2 or c > 0xF4:
            return False
        if c < 0xE0:
            n = 1
        elif c < 0xF0:
            n = 2
        else:
            n = 3
        if i + n >= e:
            return False
        c1 = buf[i + 1]
        lo, hi = 0x80, 0xBF
        if c == 0xE0:
            lo = 0xA0
        elif c == 0xED:
            hi = 0x9F
        elif c == 0xF0:
            lo = 0x90
        elif c == 0xF4:
            hi = 0x8F
        if c1 < lo or c1 > hi:
            return False
        for j in range(2, n + 1):
            if buf[i + j] < 0x80 or buf[i + j] > 0xBF:
                return False
        i += n + 1
    return True


@nb.njit(cache=True, nogil=True)
def parse_number(buf: npt.NDArray[np.uint8], s: int, e: int) -> tuple[int, float]:
    """(status, value) of buf[s:e] under ctr.data.formats.NUMBER. The value is exact (equal to
    Python's float()) when status is _NUM_OK: at most 19 significant digits forming an
    integer below 2^53, scaled by a power of ten within 1e22 (Clinger's fast path)."""
    i = s
    neg = False
    if i < e and (buf[i] == 43 or buf[i] == 45):
        neg = buf[i] == 45
        i += 1
    m = np.uint64(0)
    sig = 0
    digits = 0
    exp10 = 0
    slow = False
    while i < e and _is_digit(buf[i]):
        d = buf[i] - 48
        digits += 1
        if m != 0 or d != 0:
            if sig < 19:
                m = m * np.uint64(10) + np.uint64(d)
                sig += 1
            else:
                slow = True
        i += 1
    if i < e and buf[i] == 46:
        i += 1
        while i < e and _is_digit(buf[i]):
            d = buf[i] - 48
            digits += 1
            if m != 0 or d != 0:
                if sig < 19:
                    m = m * np.uint64(10) + np.uint64(d)
                    sig += 1
                else:
                    slow = True
            exp10 -= 1
            i += 1
    if digits == 0:
        return _NUM_BAD, 0.0
    if i < e and (buf[i] == 101 or buf[i] == 69):
        i += 1
        eneg = False
        if i < e and (buf[i] == 43 or buf[i] == 45):
            eneg = buf[i] == 45
            i += 1
        if i == e or not _is_digit(buf[i]):
            return _NUM_BAD, 0.0
        ev = 0
        while i < e and _is_digit(buf[i]):
            if ev < 100000:
                ev = ev * 10 + (buf[i] - 48)
            i += 1
        exp10 += -ev if eneg else ev
    if i != e:
        return _NUM_BAD, 0.0
    if m == 0:  # no significant digit, so none was dropped
        return _NUM_OK, -0.0 if neg else 0.0
    if slow or m > np.uint64(1 << 53) or exp10 < -22 or exp10 > 22:
        return _NUM_SLOW, 0.0
    v = float(m)
    v = v * _P10[exp10] if exp10 >= 0 else v / _P10[-exp10]
    return _NUM_OK, -v if neg else v


@nb.njit(cache=True, nogil=True)
def bool_label(buf: npt.NDArray[np.uint8], s: int, e: int) -> int:
    """1 when buf[s:e] is "true", 0 when "false" (ASCII, any case), -1 otherwise."""
    if e - s == 4:
        word, truth = _TRUE, 1
    elif e - s == 5:
        word, truth = _FALSE, 0
    else:
        return -1
    for j in range(e - s):
        if buf[s + j] | 0x20 != word[j]:
            return -1
    return truth


@nb.njit(cache=True, nogil=True)
def _write_int(out: npt.NDArray[np.uint8], at: int, v: int) -> int:
    """Writes v in decimal at out[at:]; returns the end."""
    if v < 0:
        out[at] = 45
        at += 1
        v = -v
    n = 1
    t = v
    while t >= 10:
        t //= 10
        n += 1
    for j in range(n - 1, -1, -1):
        out[at + j] = 48 + v % 10
        v //= 10
    return at + n


@nb.njit(cache=True, nogil=True)
def missing_number(buf: npt.NDArray[np.uint8], s: int, e: int) -> bool:
    """Whether buf[s:e] is one of ctr.data.formats.MISSING_NUMBERS (NA, NaN, NULL, \\N...)."""
    start = 0
    for i in range(_MISSING_ENDS.shape[0]):
        end = _MISSING_ENDS[i]
        if end - start == e - s:
            same = True
            for j in range(e - s):
                if buf[s + j] != _MISSING_BYTES[start + j]:
                    same = False
                    break
            if same:
                return True
        start = end
    return False


@nb.njit(cache=True, nogil=True)
def _bucket(buf: npt.NDArray[np.uint8], s: int, e: int, scratch: npt.NDArray[np.uint8], at: int) -> int:
    """Writes the bucket token of the number buf[s:e] (ctr.data.formats.bucket_numeric) at
    scratch[at:]; returns its end, _MISSING_NUMBER for a missing-number marker (no
    feature), or -1 to defer the line."""
    status, v = parse_number(buf, s, e)
    if status != _NUM_OK:
        return _MISSING_NUMBER if status == _NUM_BAD and missing_number(buf, s, e) else -1
    if v > 2:
        scratch[at] = 98  # b
        return _write_int(scratch, at + 1, int(math.log(v) ** 2))
    f = np.floor(v)
    if f < -9.2e18:
        return -1
    scratch[at] = 118  # v
    return _write_int(scratch, at + 1, int(f))


@nb.njit(cache=True, nogil=True)
def _lookup(keys: npt.NDArray[np.uint64], key: np.uint64) -> int:
    """Slot of key in the open-addressed name table, -1 when absent."""
    mask = np.uint64(keys.shape[0] - 1)
    i = key & mask
    while True:
        k = keys[i]
        if k == key:
            return np.int64(i)  # type: ignore[return-value]
        if k == np.uint64(0):
            return -1
        i = (i + np.uint64(1)) & mask


@nb.njit(cache=True, nogil=True, inline="always")
def _numbered(n: int, nfields: int, frozen: bool, cap: int, strict: bool) -> int:
    """Field index of numbered field n (ctr.data.fields.FieldIndex.number)."""
    if n < nfields:
        return n
    if frozen and strict:  # libffm: a field beyond a frozen list is an error
        return _DEFER
    if frozen or n >= cap:
        return DROPPED
    return _DEFER


@nb.njit(cache=True, nogil=True, inline="always")
def _past_json_space(buf: npt.NDArray[np.uint8], i: int, e: int) -> int:
    """The first position from i on (up to e) that is not JSON whitespace (space, tab, CR, LF)."""
    while i < e and (buf[i] == 32 or buf[i] == 9 or buf[i] == 13 or buf[i] == 10):
        i += 1
    return i


@nb.njit(cache=True, nogil=True)
def json_number_end(buf: npt.NDArray[np.uint8], s: int, e: int) -> int:
    """The end of the JSON number that starts at buf[s] (-?(0|[1-9]\\d*)(.\\d+)?([eE][+-]?\\d+)?,
    the grammar of Python's json scanner), or -1 when none starts there whole."""
    j = s
    if j < e and buf[j] == 45:  # '-'
        j += 1
    if j >= e or not _is_digit(buf[j]):
        return -1
    if buf[j] == 48:  # a leading 0 stands alone
        j += 1
    else:
        while j < e and _is_digit(buf[j]):
            j += 1
    if j < e and buf[j] == 46:  # '.'
        j += 1
        if j >= e or not _is_digit(buf[j]):
            return -1
        while j < e and _is_digit(buf[j]):
            j += 1
    if j < e and buf[j] | 0x20 == 101:  # 'e' or 'E'
        j += 1
        if j < e and (buf[j] == 43 or buf[j] == 45):
            j += 1
        if j >= e or not _is_digit(buf[j]):
            return -1
        while j < e and _is_digit(buf[j]):
            j += 1
    return j


@nb.njit(cache=True, nogil=True, inline="always")
def _json_word(buf: npt.NDArray[np.uint8], s: int, e: int, word: npt.NDArray[np.uint8]) -> bool:
    """Whether buf[s:] starts with `word` (true, false, null)."""
    same = e - s >= word.shape[0]
    j = 0
    while same and j < word.shape[0]:
        same = buf[s + j] == word[j]
        j += 1
    return same


@nb.njit(cache=True, nogil=True, inline="always")
def _json_bool(kind: int) -> bool:
    return _JSON_TRUE_VALUE <= kind <= _JSON_FALSE_VALUE


@nb.njit(cache=True, nogil=True)
def json_string_end(buf: npt.NDArray[np.uint8], s: int, e: int) -> int:
    """The position of the quote that closes the JSON string whose text starts at buf[s],
    or -1 when the string holds an escape or a control character (the reference parser
    decodes those, or refuses them) or is not closed before e."""
    j = s
    while j < e:
        c = buf[j]
        if c == 34:
            return j
        if c == 92 or c < 32:
            return -1
        j += 1
    return -1


@nb.njit(cache=True, nogil=True, inline="always")
def _emitted(
    out: FeatureArrays,
    nf: int,
    first: int,
    src: npt.NDArray[np.uint8],
    ts: int,
    te: int,
    in_scratch: bool,
    role: int,
    fid: np.uint32,
) -> int:
    """Writes feature nf, the token src[ts:te] of field `role` (its hash id fid), into `out`
    (keys, fields, values, and the token's place for crosses: starts, ends, in scratch);
    returns nf + 1. Inlined into parse_block's loops (a call that was not inlined measured
    3x slower there)."""
    keys, fields, values, tok_start, tok_end, tok_scratch = out
    keys[nf] = finish_key(fnv_bytes(FNV64_OFFSET, src, ts, te), fid)
    fields[nf] = role
    values[nf] = 1.0
    tok_start[nf - first] = ts
    tok_end[nf - first] = te
    tok_scratch[nf - first] = in_scratch
    return nf + 1


@nb.njit(cache=True, nogil=True)
def parse_block(
    buf: npt.NDArray[np.uint8],
    final: bool,
    ascii_only: bool,
    max_lines: int,
    max_line_bytes: int,
    mode: int,
    delim: int,
    ragged: bool,
    quoted: bool,
    col_role: npt.NDArray[np.int32],
    col_numeric: npt.NDArray[np.bool_],
    col_sep: npt.NDArray[np.int32],
    name_keys: npt.NDArray[np.uint64],
    name_role: npt.NDArray[np.int32],
    name_numeric: npt.NDArray[np.bool_],
    nfields: int,
    frozen: bool,
    cap: int,
    single_field: bool,
    field_ids: npt.NDArray[np.uint32],
    crosses: npt.NDArray[np.int32],
) -> tuple[
    npt.NDArray[np.float32],
    npt.NDArray[np.int64],
    npt.NDArray[np.uint64],
    npt.NDArray[np.int32],
    npt.NDArray[np.float32],
    npt.NDArray[np.int32],
    npt.NDArray[np.int32],
    npt.NDArray[np.int64],
    int,
]:
    """Parses up to max_lines lines of buf. Returns labels, offsets, keys, fields, values
    (the batch of the lines parsed here), sample_line (line number within the block of each
    sample), deferred (line numbers left to the reference parser), line_ends (byte offset
    after each line) and the count of features dropped for fields outside the index."""
    n = buf.shape[0]
    # pass 1: line boundaries, to size the outputs
    line_ends = np.empty(max_lines, dtype=np.int64)
    lines = 0
    pos = 0
    longest = 0
    while lines < max_lines and pos < n:
        j = pos
        while j < n and buf[j] != 10:
            j += 1
        if j == n and not final:
            break
        end = j + 1 if j < n else n
        longest = max(longest, end - pos)
        line_ends[lines] = end
        lines += 1
        pos = end
    line_ends = line_ends[:lines]
    ncross = crosses.shape[0]
    width = col_role.shape[0]
    cap_features = pos + lines * (ncross + 1) + 1
    labels = np.empty(lines, dtype=np.float32)
    offsets = np.zeros(lines + 1, dtype=np.int64)
    keys = np.empty(cap_features, dtype=np.uint64)
    fields = np.empty(cap_features, dtype=np.int32)
    values = np.empty(cap_features, dtype=np.float32)
    sample_line = np.empty(lines, dtype=np.int32)
    deferred = np.empty(lines, dtype=np.int32)
    # per line: each feature's token (in buf, or in scratch for bucketed numbers), for crosses
    tok_start = np.empty(longest + 2, dtype=np.int64)
    tok_end = np.empty(longest + 2, dtype=np.int64)
    tok_scratch = np.empty(longest + 2, dtype=np.bool_)
    scratch = np.empty(24 * (longest + 2), dtype=np.uint8)
    feats = (keys, fields, values, tok_start, tok_end, tok_scratch)  # what _emitted writes
    seen = np.zeros(name_keys.shape[0], dtype=np.int64)  # MODE_JSON: the line that last gave a name
    prefix = np.empty(JSON_MAX_DEPTH, dtype=np.uint64)  # MODE_JSON: each open object's names' FNV state
    nested = np.empty(JSON_MAX_NESTED, dtype=np.uint64)  # MODE_JSON: a line's nested objects' names
    n_samples = 0
    n_deferred = 0
    nf = 0
    dropped = 0
    start = 0
    for li in range(lines):
        ls = start
        le = int(line_ends[li])
        start = le
        if le > ls and buf[le - 1] == 10:
            le -= 1
        first = nf
        line_dropped = 0
        ok = le - ls <= max_line_bytes and (ascii_only or utf8_valid(buf, ls, le))
        label = 0.0
        sp = 0  # scratch position of this line
        if ok and mode == MODE_COLUMNS:
            e = le
            while e > ls and (buf[e - 1] == 13 or buf[e - 1] == 10):
                e -= 1
            c = 0
            cs = ls
            while ok:  # the column count is checked at the end, not by a pass of its own
                if c >= width:
                    ok = False
                    break
                if quoted and cs < e and buf[cs] == 34:  # "...": the value between the quotes
                    q = cs + 1
                    while q < e and buf[q] != 34:
                        q += 1
                    if q >= e or (q + 1 < e and buf[q + 1] != delim):
                        ok = False  # unclosed, a doubled quote inside, or text after: the reference settles it
                        break
                    vs, ve, ce = cs + 1, q, q + 1
                else:
                    ce = cs
                    while ce < e and buf[ce] != delim:
                        ce += 1
                    vs, ve = cs, ce
                role = col_role[c]
                if role == LABEL_COLUMN:
                    st, v = parse_number(buf, vs, ve)
                    ok = st == _NUM_OK and not 0.0 < v < 1.0  # a fraction: the reference names it
                    label = 1.0 if v > 0 else 0.0
                    if not ok:  # pandas' boolean label column: True/False
                        truth = bool_label(buf, vs, ve)
                        ok = truth >= 0
                        label = float(truth)
                elif ve > vs and role != SKIPPED and col_sep.shape[0] > 0 and col_sep[c] > 0:
                    # a multi-valued column: each non-empty piece between separators a feature
                    ps = vs
                    while ps <= ve:
                        pe = ps
                        while pe < ve and buf[pe] != col_sep[c]:
                            pe += 1
                        if pe > ps:
                            if role == DROPPED:
                                line_dropped += 1
                            else:
                                keys[nf] = finish_key(fnv_bytes(FNV64_OFFSET, buf, ps, pe), field_ids[role])
                                fields[nf] = role
                                values[nf] = 1.0
                                tok_start[nf - first] = ps
                                tok_end[nf - first] = pe
                                tok_scratch[nf - first] = False
                                nf += 1
                        ps = pe + 1
                elif ve > vs and role != SKIPPED:
                    ts, te, in_scratch = vs, ve, False
                    if col_numeric[c]:
                        end = _bucket(buf, vs, ve, scratch, sp)
                        if end == _MISSING_NUMBER:
                            role = SKIPPED  # no feature, and none dropped
                        elif end < 0:
                            ok = False
                            break
                        else:
                            ts, te, in_scratch = sp, end, True
                            sp = end
                    if role == DROPPED:
                        line_dropped += 1
                    elif role != SKIPPED:  # SKIPPED here: a missing number
                        src = scratch if in_scratch else buf
                        nf = _emitted(feats, nf, first, src, ts, te, in_scratch, role, field_ids[role])
                c += 1
                if ce >= e:
                    break
                cs = ce + 1
            if ok:
                ok = 2 <= c <= width if ragged else c == width
        elif ok and mode in (MODE_LIBSVM, MODE_LIBFFM):
            i = ls
            tok = 0
            qid = 0  # 1 once a libsvm line's first feature token was SVMlight's qid:N
            while ok:
                while i < le and _is_space(buf[i]):
                    i += 1
                if i >= le:
                    break
                ts = i
                while i < le and not _is_space(buf[i]):
                    i += 1
                te = i
                if tok == 0:
                    st, v = parse_number(buf, ts, te)
                    ok = st == _NUM_OK and not 0.0 < v < 1.0  # a fraction: the reference names it
                    label = 1.0 if v > 0 else 0.0
                    tok += 1
                    continue
                if mode == MODE_LIBSVM and buf[ts] == 35:  # '#': SVMlight's comment, to the line's end
                    break
                if mode == MODE_LIBSVM and tok == 1 and _is_qid(buf, ts, te):
                    if te == ts + 4:
                        ok = False  # qid: without a number
                    for j in range(ts + 4, te):
                        if not _is_digit(buf[j]):
                            ok = False
                    qid = 1
                    tok += 1
                    continue
                fpos = tok - 1 - qid
                tok += 1
                c1 = ts
                while c1 < te and buf[c1] != 58:
                    c1 += 1
                if c1 in (te, ts):
                    ok = False
                    break
                if mode == MODE_LIBSVM:
                    ks, ke, vs = ts, c1, c1 + 1
                    f = _numbered(0 if single_field else fpos, nfields, frozen, cap, False)
                else:
                    c2 = c1 + 1
                    while c2 < te and buf[c2] != 58:
                        c2 += 1
                    if c2 == te or c2 == c1 + 1:
                        ok = False
                        break
                    for j in range(c2 + 1, te):
                        if buf[j] == 58:
                            ok = False
                    if not ok:
                        break
                    ks, ke, vs = c1 + 1, c2, c2 + 1
                    numbered = True
                    num = 0
                    for j in range(ts, c1):
                        if not _is_digit(buf[j]):
                            numbered = False
                        elif num < 1 << 40:
                            num = num * 10 + (buf[j] - 48)
                    if numbered:
                        f = _numbered(num, nfields, frozen, cap, True)
                    else:
                        slot = _lookup(name_keys, finish_key(fnv_bytes(FNV64_OFFSET, buf, ts, c1), np.uint32(0)))
                        f = name_role[slot] if slot >= 0 else _DEFER
                st, v = parse_number(buf, vs, te)
                if st != _NUM_OK or abs(v) > _FLOAT32_MAX or f == _DEFER:
                    ok = False
                    break
                if f == DROPPED:
                    line_dropped += 1
                    continue
                keys[nf] = finish_key(fnv_bytes(FNV64_OFFSET, buf, ks, ke), field_ids[f])
                fields[nf] = f
                values[nf] = v
                tok_start[nf - first] = ks
                tok_end[nf - first] = ke
                tok_scratch[nf - first] = False
                nf += 1
            if tok == 0:
                ok = False  # an empty line
        elif ok and mode == MODE_VW:
            bar = ls
            while bar < le and buf[bar] != 124:
                bar += 1
            i = ls
            while i < bar and _is_space(buf[i]):
                i += 1
            ts = i
            while i < bar and not _is_space(buf[i]):
                i += 1
            st, v = parse_number(buf, ts, i)
            # no '|', no label, a label that is a word or a fraction: the reference names it
            ok = bar < le and i > ts and st == _NUM_OK and not 0.0 < v < 1.0
            label = 1.0 if v > 0 else 0.0
            weight_seen = False
            while ok:  # before the first '|': an importance weight of 1, a tag
                while i < bar and _is_space(buf[i]):
                    i += 1
                if i >= bar:
                    break
                ts = i
                while i < bar and not _is_space(buf[i]):
                    i += 1
                if buf[ts] == 39:  # 'tag
                    continue
                st, v = parse_number(buf, ts, i)
                if st == _NUM_OK and not weight_seen and v == 1.0:
                    weight_seen = True
                elif st == _NUM_BAD and i == bar:
                    continue  # a tag against the '|'
                else:
                    ok = False
            role = SKIPPED
            scale = 1.0
            i = bar
            while ok and i < le:
                c = buf[i]
                if c == 124:  # a namespace: its name up to a space, ':' (its scale) or '|'
                    i += 1
                    scale = 1.0
                    if i >= le or _is_space(buf[i]) or buf[i] == 124:
                        h = fnv_bytes(FNV64_OFFSET, _VW_DEFAULT, 0, _VW_DEFAULT.shape[0])
                    else:
                        ns = i
                        while i < le and not _is_space(buf[i]) and buf[i] != 58 and buf[i] != 124:
                            i += 1
                        if i == ns:  # a scale with no name: the reference names it
                            ok = False
                            break
                        h = fnv_bytes(FNV64_OFFSET, buf, ns, i)
                        if i < le and buf[i] == 58:
                            i += 1
                            vs = i
                            while i < le and not _is_space(buf[i]) and buf[i] != 124:
                                i += 1
                            st, v = parse_number(buf, vs, i)
                            if st != _NUM_OK or abs(v) > _FLOAT32_MAX:
                                ok = False
                                break
                            scale = v
                    slot = _lookup(name_keys, finish_key(h, np.uint32(0)))
                    role = name_role[slot] if slot >= 0 else _DEFER
                    if role == _DEFER:  # a namespace new to a growing index: the reference adds it
                        ok = False
                    continue
                if _is_space(c):
                    i += 1
                    continue
                ts = i  # a feature: name[:value]
                while i < le and not _is_space(buf[i]) and buf[i] != 124:
                    i += 1
                c1 = ts
                while c1 < i and buf[c1] != 58:
                    c1 += 1
                if c1 == ts:
                    ok = False
                    break
                v = 1.0
                if c1 < i:
                    st, v = parse_number(buf, c1 + 1, i)
                    if st != _NUM_OK:
                        ok = False
                        break
                v = v * scale
                if abs(v) > _FLOAT32_MAX:
                    ok = False
                    break
                if role == SKIPPED:
                    continue
                if role == DROPPED:
                    line_dropped += 1
                    continue
                keys[nf] = finish_key(fnv_bytes(FNV64_OFFSET, buf, ts, c1), field_ids[role])
                fields[nf] = role
                values[nf] = v
                tok_start[nf - first] = ts
                tok_end[nf - first] = c1
                tok_scratch[nf - first] = False
                nf += 1
        elif ok and mode == MODE_JSON:
            e = le
            i = ls
            i = _past_json_space(buf, i, e)
            ok = i < e and buf[i] == 123  # '{'
            i += 1
            stamp = li + 1  # this line's mark in `seen`: a name given twice defers the line
            n_nested = 0  # the nested objects' names (their keys' hashes), for the same check
            depth = 0  # of the object whose members come next; `prefix[depth]`: its names' FNV state
            prefix[0] = FNV64_OFFSET
            in_list = False  # reading the scalars of a list: several values of one field
            has_label = False
            done = False
            slot = -1
            while ok and not done:
                i = _past_json_space(buf, i, e)
                if i >= e:
                    ok = False
                    break
                scalar = True  # what comes is a scalar (not an empty object or list just read)
                if not in_list:  # a member: "key": value
                    if buf[i] != 34:
                        ok = False
                        break
                    ks = i + 1
                    ke = json_string_end(buf, ks, e)
                    if ke <= ks:  # escaped, unclosed or empty
                        ok = False
                        break
                    for j in range(ks, ke):
                        if buf[j] == 61:  # '=': not a field's name (the reference names the key)
                            ok = False
                    i = ke + 1
                    i = _past_json_space(buf, i, e)
                    if not ok or i >= e or buf[i] != 58:  # ':'
                        ok = False
                        break
                    i += 1
                    i = _past_json_space(buf, i, e)
                    if i >= e:
                        ok = False
                        break
                    h = fnv_bytes(prefix[depth], buf, ks, ke)  # "parent.key", as the reference names it
                    name = finish_key(h, np.uint32(0))
                    slot = _lookup(name_keys, name)
                    for j in range(n_nested):  # the name of a nested object already given
                        if nested[j] == name:
                            ok = False
                    if not ok or (slot >= 0 and seen[slot] == stamp):  # a key twice: json keeps the last
                        ok = False
                        break
                    if slot >= 0:
                        seen[slot] = stamp
                    if slot >= 0 and name_role[slot] == LABEL_COLUMN and (depth > 0 or buf[i] == 123 or buf[i] == 91):
                        ok = False  # the label as an object or a list, or a nested key named as the label
                        break
                    if buf[i] == 123:  # '{': its keys are fields named "key.inner"
                        if depth + 1 >= prefix.shape[0] or n_nested >= JSON_MAX_NESTED:
                            ok = False
                            break
                        nested[n_nested] = name
                        n_nested += 1
                        depth += 1
                        prefix[depth] = (h ^ np.uint64(46)) * FNV64_PRIME  # '.'
                        i += 1
                        i = _past_json_space(buf, i, e)
                        if i < e and buf[i] == 125:  # an empty object: no features
                            i += 1
                            depth -= 1
                            scalar = False
                        else:
                            continue
                    elif slot < 0:  # a name new to the index: the reference adds it, or drops it
                        ok = False
                        break
                    elif buf[i] == 91:  # '[': each scalar in it a value of the field
                        i += 1
                        i = _past_json_space(buf, i, e)
                        if i < e and buf[i] == 93:  # an empty list: no features
                            i += 1
                            scalar = False
                        else:
                            in_list = True
                            continue
                if scalar:  # a member's value, or a list's next
                    c = buf[i]
                    vs = i
                    if c == 34:
                        vs = i + 1
                        ve = json_string_end(buf, vs, e)
                        if ve < 0:
                            ok = False
                            break
                        kind = _JSON_STRING
                        i = ve + 1
                    elif c == 45 or _is_digit(c):
                        ve = json_number_end(buf, i, e)
                        if ve < 0:
                            ok = False
                            break
                        kind = _JSON_NUMBER
                        i = ve
                    elif _json_word(buf, i, e, _TRUE):
                        kind = _JSON_TRUE_VALUE
                        i += 4
                        ve = i
                    elif _json_word(buf, i, e, _FALSE):
                        kind = _JSON_FALSE_VALUE
                        i += 5
                        ve = i
                    elif _json_word(buf, i, e, _JSON_NULL):
                        kind = _JSON_NULL_VALUE
                        i += 4
                        ve = i
                    else:  # an object or a list in a list, NaN or Infinity: the reference reads them
                        ok = False
                        break
                    role = name_role[slot]
                    if role == LABEL_COLUMN:
                        has_label = True
                        if _json_bool(kind):
                            label = 1.0 if kind == _JSON_TRUE_VALUE else 0.0
                        elif kind == _JSON_NULL_VALUE:
                            ok = False
                        else:
                            st, v = parse_number(buf, vs, ve)
                            ok = st == _NUM_OK and not 0.0 < v < 1.0  # a fraction: the reference names it
                            label = 1.0 if v > 0 else 0.0
                            if not ok and kind == _JSON_STRING:  # "true" as a string: parse_label's words
                                truth = bool_label(buf, vs, ve)
                                ok = truth >= 0
                                label = float(truth)
                    elif role != SKIPPED and kind != _JSON_NULL_VALUE and ve > vs:  # null and "": missing
                        ts, te, in_scratch = vs, ve, False
                        if _json_bool(kind):
                            word = _TOKEN_TRUE if kind == _JSON_TRUE_VALUE else _TOKEN_FALSE
                            if name_numeric[slot]:
                                ok = False  # a boolean in a numeric field: the reference says why
                            else:
                                for j in range(word.shape[0]):
                                    scratch[sp + j] = word[j]
                                ts, te, in_scratch = sp, sp + word.shape[0], True
                                sp += word.shape[0]
                        elif name_numeric[slot]:
                            end = _bucket(buf, vs, ve, scratch, sp)
                            if end == _MISSING_NUMBER:
                                role = SKIPPED  # no feature, and none dropped
                            elif end < 0:
                                ok = False
                            else:
                                ts, te, in_scratch = sp, end, True
                                sp = end
                        if not ok:
                            break
                        if role == DROPPED:
                            line_dropped += 1
                        elif role != SKIPPED:  # SKIPPED here: a missing number
                            src = scratch if in_scratch else buf
                            nf = _emitted(feats, nf, first, src, ts, te, in_scratch, role, field_ids[role])
                    if not ok:
                        break
                    if in_list:
                        i = _past_json_space(buf, i, e)
                        if i < e and buf[i] == 44:  # ','
                            i += 1
                            continue
                        if i >= e or buf[i] != 93:  # ']'
                            ok = False
                            break
                        i += 1
                        in_list = False
                # after a value: ',' and the next member, or '}' closing objects up to the line's
                while True:
                    i = _past_json_space(buf, i, e)
                    if i < e and buf[i] == 44:
                        i += 1
                        break
                    if i >= e or buf[i] != 125:
                        ok = False
                        break
                    i += 1
                    if depth == 0:
                        done = True
                        break
                    depth -= 1
            if ok:
                i = _past_json_space(buf, i, e)
                ok = i == e and has_label
        elif ok:  # MODE_KV
            e = le
            while e > ls and (buf[e - 1] == 13 or buf[e - 1] == 10):
                e -= 1
            cs = ls
            c = 0
            while ok:
                ce = cs
                while ce < e and buf[ce] != 9:
                    ce += 1
                if c == 0:
                    st, v = parse_number(buf, cs, ce)
                    ok = st == _NUM_OK and not 0.0 < v < 1.0  # a fraction: the reference names it
                    label = 1.0 if v > 0 else 0.0
                else:
                    k = cs
                    while k < ce and buf[k] != 61:
                        k += 1
                    if k in (ce, cs):
                        ok = False
                        break
                    if ce > k + 1:
                        slot = _lookup(name_keys, finish_key(fnv_bytes(FNV64_OFFSET, buf, cs, k), np.uint32(0)))
                        if slot < 0:
                            ok = False
                            break
                        role = name_role[slot]
                        if role != SKIPPED:
                            ts, te, in_scratch = k + 1, ce, False
                            if name_numeric[slot]:
                                end = _bucket(buf, k + 1, ce, scratch, sp)
                                if end == _MISSING_NUMBER:
                                    role = SKIPPED  # no feature, and none dropped
                                elif end < 0:
                                    ok = False
                                    break
                                else:
                                    ts, te, in_scratch = sp, end, True
                                    sp = end
                            if role == DROPPED:
                                line_dropped += 1
                            elif role != SKIPPED:  # SKIPPED here: a missing number
                                src = scratch if in_scratch else buf
                                nf = _emitted(feats, nf, first, src, ts, te, in_scratch, role, field_ids[role])
                if ce >= e:
                    break
                cs = ce + 1
                c += 1
        if not ok:
            nf = first
            deferred[n_deferred] = li
            n_deferred += 1
            continue
        base_end = nf  # crosses pair the line's own features, never other crosses
        for x in range(ncross):
            a, b, fc = crosses[x, 0], crosses[x, 1], crosses[x, 2]
            ia = -1
            ib = -1
            for j in range(first, base_end):
                if ia < 0 and fields[j] == a:
                    ia = j - first
                if ib < 0 and fields[j] == b:
                    ib = j - first
            if ia < 0 or ib < 0:
                continue
            h = fnv_bytes(FNV64_OFFSET, scratch if tok_scratch[ia] else buf, tok_start[ia], tok_end[ia])
            h = (h ^ np.uint64(0x1F)) * FNV64_PRIME
            h = fnv_bytes(h, scratch if tok_scratch[ib] else buf, tok_start[ib], tok_end[ib])
            keys[nf] = finish_key(h, field_ids[fc])
            fields[nf] = fc
            values[nf] = 1.0
            nf += 1
        labels[n_samples] = label
        sample_line[n_samples] = li
        n_samples += 1
        offsets[n_samples] = nf
        dropped += line_dropped
    return (
        labels[:n_samples],
        offsets[: n_samples + 1],
        keys[:nf],
        fields[:nf],
        values[:nf],
        sample_line[:n_samples],
        deferred[:n_deferred],
        line_ends,
        dropped,
    )
