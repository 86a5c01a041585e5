"""The numba kernels of :mod:`.parquet_pages`: a column chunk's page headers walked in one call, and the longest
entry of a dictionary page.

Imported lazily (inside functions): ``import explorer`` does not pay for numba. The kernel reads the same
Thrift compact-protocol fields as the Python parser of :mod:`.parquet_pages` (``_Thrift``,
``_page_header``), which stays the reference: the kernel never raises and never words an error. Where
the Python parser would refuse a header, and wherever the two could differ at all (a value past 32 bits,
a field id past the sizes a chunk can hold, a page running past the chunk, a negative size), it stops
with :data:`DEFER` and the caller walks the chunk again with the Python parser, which raises (or accepts)
as it always has. So a chunk the kernel accepts is one the Python parser accepts with the very same fields,
and a chunk either refuses is refused with the Python parser's words (``tests/format/test_page_kernels.py``
compares the two on damaged copies of real files).

One row of ``out`` per page, in the chunk's order: the columns below, :data:`ABSENT` where the header
lacks the field (the Python parser's missing dictionary key). The walk releases the GIL.
"""

from __future__ import annotations

import numba
import numpy as np

from .. import numba_cache  # noqa: F401 - a damaged numba cache file is a miss, not an error

_jit = numba.njit(cache=True, nogil=True)

#: result codes: every page walked to ``end``; ``out`` full (call again from the position returned); the
#: Python parser must judge this chunk
OK, FULL, DEFER = 0, 1, 2

#: the columns of ``out``: where the page's header starts and its body starts (absolute positions in the
#: buffer), then the header's fields as the Python parser names them
(HEADER, BODY, TYPE, UNCOMPRESSED, COMPRESSED, CRC, NUM_VALUES, ENCODING, DEF_ENCODING, REP_ENCODING, NUM_NULLS,
 NUM_ROWS, DEF_BYTES, REP_BYTES, IS_COMPRESSED, DICT_VALUES) = range(16)
COLUMNS = 16
#: what :func:`page_headers` adds up in ``sums`` over the pages it reads, as ``parquet_pages._pages_python`` does:
#: their uncompressed bytes, the largest page's, the data pages' values (none below 0) and those of them indexing a
#: dictionary (PLAIN_DICTIONARY, RLE_DICTIONARY), then the first dictionary page (found, body, size, uncompressed,
#: entries: none below 0)
(S_BYTES, S_LARGEST, S_VALUES, S_INDEXED, S_DICTIONARY, S_DICT_BODY, S_DICT_SIZE, S_DICT_BYTES, S_DICT_ENTRIES) = range(9)
SUMS = 9
#: the Python parser's field names of columns TYPE.. (``_page_header``'s dictionary keys)
NAMES = ("type", "uncompressed", "compressed", "crc", "num_values", "encoding", "def_encoding", "rep_encoding",
         "num_nulls", "num_rows", "def_bytes", "rep_bytes", "is_compressed", "dict_values")
#: a field the header does not hold (outside every value the kernel accepts: those are 32-bit)
ABSENT = -(1 << 40)

# the structs whose fields are read: the PageHeader, its data page header (v1, v2), its dictionary page header;
# NONE: a struct skipped
_PAGE, _V1, _V2, _DICT, _NONE = 0, 1, 2, 3, 4
# stack frames: a struct being read, a list's or set's elements, a map's keys and values
_STRUCT, _LIST, _MAP = 0, 1, 2
#: field ids beyond this are all alike (no field id read here is near it, and no chunk's bytes reach it by deltas)
_FAR = 1 << 50
_I32 = 1 << 31


@_jit
def _varint(buf, pos, end):
    """``(value, pos after it, status)``: status 0 read, 1 a value of 2**64 or more (the Python parser's ints
    are unbounded), 2 what the Python parser refuses (truncated, or more than 10 bytes)."""
    v = np.uint64(0)
    shift = 0
    over = 0
    while True:
        if pos >= end:
            return v, pos, 2
        b = buf[pos]
        pos += 1
        part = np.uint64(b & 0x7F)
        if shift == 63 and part > 1:
            over = 1
        v |= part << np.uint64(shift)
        if b < 0x80:
            return v, pos, over
        shift += 7
        if shift > 63:
            return v, pos, 2


@_jit
def _zigzag(v):
    return np.int64(v >> np.uint64(1)) ^ -np.int64(v & np.uint64(1))


@_jit
def _element(t):
    """A list's, set's or map's element type as the Python parser skips it (booleans: a byte each)."""
    return 3 if t == 1 or t == 2 else t


@_jit
def _skip(buf, pos, end, ttype, depth, stack, sp):
    """Skip a value of ``ttype`` at ``depth`` (``_Thrift.skip``): scalars here, containers pushed on ``stack``.
    ``(pos, sp, ok)``."""
    if depth > 32:
        return pos, sp, False
    if ttype == 1 or ttype == 2:
        return pos, sp, True
    if ttype == 3:
        if pos >= end:
            return pos, sp, False
        return pos + 1, sp, True
    if ttype == 4 or ttype == 5 or ttype == 6:
        v, pos, st = _varint(buf, pos, end)
        return pos, sp, st != 2
    if ttype == 7:
        return pos + 8, sp, pos + 8 <= end
    if ttype == 8:
        v, pos, st = _varint(buf, pos, end)
        if st != 0 or v > np.uint64(end - pos):
            return pos, sp, False
        return pos + np.int64(v), sp, True
    if sp >= stack.shape[0]:
        return pos, sp, False
    if ttype == 9 or ttype == 10:
        if pos >= end:
            return pos, sp, False
        h = buf[pos]
        pos += 1
        size = np.uint64(h >> 4)
        if h >> 4 == 15:
            size, pos, st = _varint(buf, pos, end)
            if st != 0:
                return pos, sp, False
        if size > np.uint64(end - pos):  # every element takes a byte at least: the Python parser runs out
            return pos, sp, False
        stack[sp, 0] = _LIST
        stack[sp, 1] = depth + 1
        stack[sp, 2] = np.int64(size)
        stack[sp, 3] = _element(h & 0x0F)
        return pos, sp + 1, True
    if ttype == 11:
        size, pos, st = _varint(buf, pos, end)
        if st != 0:
            return pos, sp, False
        if size == 0:
            return pos, sp, True
        if pos >= end or size > np.uint64(end - pos):  # a key and a value take two bytes at least
            return pos, sp, False
        kv = buf[pos]
        pos += 1
        stack[sp, 0] = _MAP
        stack[sp, 1] = depth + 1
        stack[sp, 2] = 2 * np.int64(size)
        stack[sp, 3] = _element(kv >> 4)
        stack[sp, 4] = _element(kv & 0x0F)
        return pos, sp + 1, True
    if ttype == 12:
        stack[sp, 0] = _STRUCT
        stack[sp, 1] = depth + 1
        stack[sp, 2] = 0
        stack[sp, 3] = _NONE
        return pos, sp + 1, True
    return pos, sp, False


@_jit
def page_headers(buf, pos, end, out, sums):
    """The page headers of ``buf[pos:end]`` (a column chunk, or its pages from ``pos``), one row of ``out`` each,
    each page's body skipped by its compressed size, and added up in ``sums`` (:data:`SUMS` zeros before the first
    call; see :data:`S_BYTES`). ``(status, pages, pos)``: :data:`OK` with every page in the
    range, :data:`FULL` when ``out`` filled first (``pos``: the next header), :data:`DEFER` when the Python parser
    must judge the chunk (a header it refuses, a value past 32 bits, a page running past ``end``, a negative
    size)."""
    n = 0
    stack = np.empty((40, 5), dtype=np.int64)
    while pos < end:
        if n == out.shape[0]:
            return FULL, n, pos
        for k in range(COLUMNS):
            out[n, k] = ABSENT
        out[n, HEADER] = pos
        stack[0, 0] = _STRUCT
        stack[0, 1] = 0
        stack[0, 2] = 0
        stack[0, 3] = _PAGE
        sp = 1
        while sp > 0:
            top = sp - 1
            kind = stack[top, 0]
            depth = stack[top, 1]
            if kind == _LIST or kind == _MAP:
                left = stack[top, 2]
                if left == 0:
                    sp -= 1
                    continue
                stack[top, 2] = left - 1
                ttype = stack[top, 3] if kind == _LIST or left % 2 == 0 else stack[top, 4]
                pos, sp, ok = _skip(buf, pos, end, ttype, depth, stack, sp)
                if not ok:
                    return DEFER, n, pos
                continue
            if pos >= end:
                return DEFER, n, pos
            h = buf[pos]
            pos += 1
            if h == 0:
                sp -= 1
                continue
            delta = np.int64(h >> 4)
            ttype = np.int64(h & 0x0F)
            if delta:
                fid = stack[top, 2] + delta
            else:
                v, pos, st = _varint(buf, pos, end)
                if st == 2:
                    return DEFER, n, pos
                fid = _zigzag(v) if st == 0 else np.int64(_FAR)
            if fid > _FAR or fid < -_FAR:
                fid = np.int64(_FAR)
            stack[top, 2] = fid
            handler = stack[top, 3]
            col = -1
            sub = -1
            if handler == _PAGE:
                if ttype == 5 and 1 <= fid <= 4:
                    col = TYPE + fid - 1
                elif ttype == 12 and fid == 5:
                    sub = _V1
                elif ttype == 12 and fid == 7:
                    sub = _DICT
                elif ttype == 12 and fid == 8:
                    sub = _V2
            elif handler == _V1:
                if ttype == 5 and 1 <= fid <= 4:
                    col = (NUM_VALUES, ENCODING, DEF_ENCODING, REP_ENCODING)[fid - 1]
            elif handler == _V2:
                if ttype == 5 and 1 <= fid <= 6:
                    col = (NUM_VALUES, NUM_NULLS, NUM_ROWS, ENCODING, DEF_BYTES, REP_BYTES)[fid - 1]
                elif fid == 7 and (ttype == 1 or ttype == 2):
                    out[n, IS_COMPRESSED] = 1 if ttype == 1 else 0
                    continue
            elif handler == _DICT:
                if ttype == 5 and fid == 1:
                    col = DICT_VALUES
            if col >= 0:
                v, pos, st = _varint(buf, pos, end)
                if st != 0:
                    return DEFER, n, pos
                value = _zigzag(v)
                if value < -_I32 or value >= _I32:
                    return DEFER, n, pos
                out[n, col] = value
            elif sub >= 0:
                stack[sp, 0] = _STRUCT
                stack[sp, 1] = 1
                stack[sp, 2] = 0
                stack[sp, 3] = sub
                sp += 1
            else:
                pos, sp, ok = _skip(buf, pos, end, ttype, depth, stack, sp)
                if not ok:
                    return DEFER, n, pos
        body = pos
        out[n, BODY] = body
        size = out[n, COMPRESSED]
        if out[n, TYPE] == ABSENT or out[n, UNCOMPRESSED] == ABSENT or size == ABSENT:
            return DEFER, n, pos
        if size < 0 or out[n, UNCOMPRESSED] < 0 or size > end - body:
            return DEFER, n, pos
        pos = body + size
        unc = out[n, UNCOMPRESSED]
        sums[S_BYTES] += unc
        if unc > sums[S_LARGEST]:
            sums[S_LARGEST] = unc
        kind = out[n, TYPE]
        if kind == 2 and sums[S_DICTIONARY] == 0:
            sums[S_DICTIONARY] = 1
            sums[S_DICT_BODY] = body
            sums[S_DICT_SIZE] = size
            sums[S_DICT_BYTES] = unc
            sums[S_DICT_ENTRIES] = max(0, out[n, DICT_VALUES])  # (ABSENT is below 0)
        elif kind == 0 or kind == 3:
            values = max(0, out[n, NUM_VALUES])
            sums[S_VALUES] += values
            if out[n, ENCODING] == 2 or out[n, ENCODING] == 8:
                sums[S_INDEXED] += values
        n += 1
    return OK, n, pos


@_jit
def longest_entry(buf, count):
    """The longest of the ``count`` PLAIN byte arrays (a 4-byte little-endian length, then the bytes) that fill ``buf``
    (a dictionary page, decompressed) exactly; -1 when they do not (an entry running past the end, or bytes left
    over: the caller's Python walk says which)."""
    p = 0
    stop = len(buf)
    longest = 0
    for _ in range(count):
        if p + 4 > stop:
            return -1
        n = np.int64(buf[p]) | (np.int64(buf[p + 1]) << 8) | (np.int64(buf[p + 2]) << 16) | (np.int64(buf[p + 3]) << 24)
        p += 4
        if n > stop - p:
            return -1
        if n > longest:
            longest = n
        p += n
    return longest if p == stop else -1


def warm() -> None:
    """Load the kernel from numba's cache (compiling it where the cache lacks it) for the buffers the reads pass:
    read-only bytes (a memory map's or a pyarrow buffer's)."""
    buf = np.frombuffer(bytes([0x15, 0x00, 0x15, 0x02, 0x15, 0x02, 0x00, 0x07]), dtype=np.uint8)
    page_headers(buf, 0, len(buf), np.empty((4, COLUMNS), dtype=np.int64), np.zeros(SUMS, dtype=np.int64))
    longest_entry(buf[1:], 1)
