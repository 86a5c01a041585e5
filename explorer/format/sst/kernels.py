"""numba kernels of :mod:`.columns`: the entry walk of RocksDB data blocks and the merge of sorted files.

Imported lazily (inside functions): ``import explorer`` does not pay for numba.
The kernels take and return NumPy arrays only and release the GIL, so the
reader's threads run them side by side. They never read outside the arrays
they are given: every varint, key and value is checked against the end of its
block's entries before it is read, and a bad one stops the walk with an error
code (and the block and the entry's offset in it) that the caller turns into
:class:`.file.SstError` naming the file.

A data block is a run of entries, then ``uint32`` restart offsets and a
``uint32`` count (top bit: a hash index follows the restarts). An entry is
``varint32 shared``, ``varint32 non_shared``, ``varint32 value_length``, the
key's last ``non_shared`` bytes, the value: its key is the previous entry's
first ``shared`` bytes followed by those. Walking the entries one after the
other needs no restart points; the first entry of a block shares nothing.
Keys are *internal keys*: the user key and an 8-byte little-endian trailer
``(sequence << 8) | type``.
"""

from __future__ import annotations

import numba
import numpy as np

from ... import numba_cache  # noqa: F401 - a damaged numba cache file is a miss, not an error
from .codes import (  # noqa: F401 - the kernels' result codes, importable without numba
    ARGS, DISORDER, ENTRY_OVER, FIRST, GREATER, HASH_INDEX, OK, OLDER, RESTARTS, SAME_SEQ, SHARED, SHORT_BLOCK,
    SHORT_KEY, TOO_MANY, VARINT,
)

_jit = numba.njit(cache=True, nogil=True)
_U = np.uint64

# Array indices are made unsigned (np.uint64) in the inner loops: numba wraps negative signed indices
# around (a select per access, and no vectorised copies), which made the walk ~2x slower. Every index is
# checked non-negative and in range before it is used.


@_jit
def _copy(dst, d, src, s, n):
    """``dst[d : d + n] = src[s : s + n]``, eight bytes at a time: it may read up to 7 bytes more of ``src``
    and overwrite up to 7 bytes more of ``dst`` (the caller checks all of these are in range). A word is
    read and written as eight bytes (LLVM makes them one load and one store)."""
    d = _U(d)
    s = _U(s)
    j = _U(0)
    while j < _U(n):
        _put64(dst, d + j, _le64(src, s + j))
        j += _U(8)


@_jit
def gather_segments(src, starts, lengths, out, offsets):
    """``out[offsets[i] : offsets[i] + lengths[i]] = src[starts[i] : starts[i] + lengths[i]]`` for every i:
    segments of a buffer (values in joined data blocks) made one contiguous Arrow data buffer (the caller
    checks the bounds)."""
    for i in range(len(starts)):
        copy_bytes(out, offsets[i], src, starts[i], lengths[i])


@_jit
def copy_bytes(dst, d, src, s, n):
    """``dst[d : d + n] = src[s : s + n]`` (the caller checks the bounds) as a byte loop over unsigned
    indices, which LLVM turns into vector copies: 4x the speed of numba's slice assignment (its
    views and index wrap-around per call cost more than the copy of a 1 KB value)."""
    d = _U(d)
    s = _U(s)
    j = _U(0)
    while j < _U(n):
        dst[d + j] = src[s + j]
        j += _U(1)


@_jit
def _put64(dst, d, w):
    """``dst[d : d + 8]`` = the little-endian bytes of ``w``."""
    dst[d] = w & _U(0xFF)
    dst[d + _U(1)] = (w >> _U(8)) & _U(0xFF)
    dst[d + _U(2)] = (w >> _U(16)) & _U(0xFF)
    dst[d + _U(3)] = (w >> _U(24)) & _U(0xFF)
    dst[d + _U(4)] = (w >> _U(32)) & _U(0xFF)
    dst[d + _U(5)] = (w >> _U(40)) & _U(0xFF)
    dst[d + _U(6)] = (w >> _U(48)) & _U(0xFF)
    dst[d + _U(7)] = w >> _U(56)


@_jit
def _row(keys, row, width, key, u):
    """``keys[row : row + width]`` = the first ``u`` bytes of ``key``, then zeros; a word at a time (``key``
    holds ``width`` bytes at least)."""
    row = _U(row)
    u = _U(u)
    for w in range(_U(0), _U(width), _U(8)):
        if w + _U(8) <= u:
            word = _le64(key, w)
        elif w < u:
            word = _le64(key, w) & ((_U(1) << (_U(8) * (u - w))) - _U(1))
        else:
            word = _U(0)
        _put64(keys, row + w, word)


@_jit
def _le64(src, s):
    """The 8 bytes ``src[s : s + 8]`` as a little-endian word."""
    s = _U(s)
    return (_U(src[s]) | (_U(src[s + _U(1)]) << _U(8)) | (_U(src[s + _U(2)]) << _U(16))
            | (_U(src[s + _U(3)]) << _U(24)) | (_U(src[s + _U(4)]) << _U(32)) | (_U(src[s + _U(5)]) << _U(40))
            | (_U(src[s + _U(6)]) << _U(48)) | (_U(src[s + _U(7)]) << _U(56)))


@_jit
def _be64(src, s):
    """The 8 bytes ``src[s : s + 8]`` as a big-endian word (compares like the bytes)."""
    s = _U(s)
    return ((_U(src[s]) << _U(56)) | (_U(src[s + _U(1)]) << _U(48)) | (_U(src[s + _U(2)]) << _U(40))
            | (_U(src[s + _U(3)]) << _U(32)) | (_U(src[s + _U(4)]) << _U(24)) | (_U(src[s + _U(5)]) << _U(16))
            | (_U(src[s + _U(6)]) << _U(8)) | _U(src[s + _U(7)]))


@_jit
def varint(buf, p, end, most):
    """The variable-length int at ``buf[p]`` (7-bit groups, low group first: RocksDB's varint32
    with ``most`` = 5, Flink's variable-length int) of at most ``most`` bytes, not reading at or
    past ``end``; returns the value and the position after it (-1: runs past ``end`` or over
    ``most`` bytes)."""
    result = np.int64(0)
    for k in range(most):
        if p >= end:
            return np.int64(0), np.int64(-1)
        b = np.int64(buf[_U(p)])
        p += 1
        result |= (b & 0x7F) << (7 * k)
        if b < 0x80:
            return result, p
    return np.int64(0), np.int64(-1)


@_jit
def _block_limit(buf, s, length):
    """End of the entries of the block ``buf[s : s + length]``, or a negative error code. At least 8
    bytes must follow the block in ``buf`` (keys are copied 8 bytes at a time)."""
    if length < 4 or s < 0 or s + length + 8 > len(buf):
        return -SHORT_BLOCK
    t = s + length - 4
    packed = (np.int64(buf[t]) | (np.int64(buf[t + 1]) << 8) | (np.int64(buf[t + 2]) << 16)
              | (np.int64(buf[t + 3]) << 24))
    if packed >> 31:
        return -HASH_INDEX
    nr = packed & 0x7FFFFFFF
    limit = length - 4 - 4 * nr
    if nr < 1 or limit < 0:
        return -RESTARTS
    return s + limit


@_jit
def first_key_groups(buf, bstart, blen, prefix, out):
    """The key group of the first key of every block (its first ``prefix`` bytes, big-endian) into ``out``;
    False where a block's first entry is not a whole key with no shared prefix and at least ``prefix``
    bytes before its 8-byte trailer, within the block's entries."""
    for b in range(len(bstart)):
        s = bstart[b]
        end = _block_limit(buf, s, blen[b])
        if end < 0:
            return False
        shared, p = varint(buf, s, end, 5)
        if p < 0 or shared != 0:
            return False
        nonshared, p = varint(buf, p, end, 5)
        if p < 0 or nonshared < 8 + prefix:
            return False
        _, p = varint(buf, p, end, 5)
        if p < 0 or p + nonshared > end:
            return False
        kg = np.int64(0)
        for j in range(prefix):
            kg = kg * 256 + np.int64(buf[p + j])
        out[b] = kg
    return True


@_jit
def scan_blocks(buf, bstart, blen, counts):
    """Count the entries of every block (into ``counts``) and check them all.

    Returns ``(code, block, offset in the block, longest internal key)``.
    """
    longest = np.int64(0)
    for b in range(len(bstart)):
        s = bstart[b]
        end = _block_limit(buf, s, blen[b])
        if end < 0:
            return -end, b, np.int64(0), longest
        p = s
        prev = np.int64(0)
        c = np.int64(0)
        while p < end:
            at = p
            shared, p = varint(buf, p, end, 5)
            if p < 0:
                return VARINT, b, at - s, longest
            nonshared, p = varint(buf, p, end, 5)
            if p < 0:
                return VARINT, b, at - s, longest
            vlen, p = varint(buf, p, end, 5)
            if p < 0:
                return VARINT, b, at - s, longest
            if shared > prev:
                return SHARED, b, at - s, longest
            if nonshared > end - p or vlen > end - p - nonshared:
                return ENTRY_OVER, b, at - s, longest
            k = shared + nonshared
            if k < 8:
                return SHORT_KEY, b, at - s, longest
            if k > longest:
                longest = k
            prev = k
            p += nonshared + vlen
            c += 1
        counts[b] = c
    return OK, np.int64(-1), np.int64(0), longest


@_jit
def fill_entries(buf, bstart, blen, bfile, keys, base, width, ulen, vpos, vlen, seq, typ, rel):
    """Walk the blocks ``scan_blocks`` checked: every entry's user key as a ``width``-byte row of ``keys``
    (from ``base`` on, zero past the key; ``width``: a multiple of 8), its value's place in ``buf``, its
    sequence number and type, and its relation to the previous entry of the same file (``rel``:
    :data:`FIRST` ... :data:`DISORDER`).

    Returns ``(code, block, offset in the block)``; the checks are those of ``scan_blocks``.
    """
    n = len(ulen)
    if (width < 8 or width % 8 or base < 0 or len(keys) < base + n * width or len(vpos) != n or len(vlen) != n
            or len(seq) != n or len(typ) != n or len(rel) != n or len(blen) != len(bstart)
            or len(bfile) != len(bstart)):
        return ARGS, np.int64(-1), np.int64(0)
    longest = width + 8
    scratch = np.zeros(longest + 8, dtype=np.uint8)  # the current internal key (8 bytes more: see _copy)
    i = np.int64(0)
    prev_file = np.int64(-1)
    for b in range(len(bstart)):
        s = bstart[b]
        end = _block_limit(buf, s, blen[b])
        if end < 0:
            return -end, b, np.int64(0)
        p = s
        prev = np.int64(0)
        first_in_block = True
        while p < end:
            at = p
            shared, p = varint(buf, p, end, 5)
            if p < 0:
                return VARINT, b, at - s
            nonshared, p = varint(buf, p, end, 5)
            if p < 0:
                return VARINT, b, at - s
            vl, p = varint(buf, p, end, 5)
            if p < 0:
                return VARINT, b, at - s
            if shared > prev:
                return SHARED, b, at - s
            if nonshared > end - p or vl > end - p - nonshared:
                return ENTRY_OVER, b, at - s
            k = shared + nonshared
            if k < 8:
                return SHORT_KEY, b, at - s
            if k > longest or i >= n:
                return TOO_MANY, b, at - s
            _copy(scratch, shared, buf, p, nonshared)
            u = k - 8
            row = base + i * width
            _row(keys, row, width, scratch, u)
            trailer = _le64(scratch, u)
            seq[i] = np.int64(trailer >> np.uint64(8))
            typ[i] = np.uint8(trailer & np.uint64(0xFF))
            ulen[i] = u
            vpos[i] = p + nonshared
            vlen[i] = vl
            f = bfile[b]
            if f != prev_file:
                rel[i] = FIRST
            else:
                # the rows agree on the bytes the key shares with the previous one (within a block)
                pu = ulen[i - 1]
                start = min(shared, u, pu) if not first_in_block else 0
                c = _compare(keys, base + (i - 1) * width, row, start, min(u, pu))
                if c == 0:
                    c = -1 if pu < u else (1 if pu > u else 0)
                if c < 0:
                    rel[i] = GREATER
                elif c > 0:
                    rel[i] = DISORDER
                elif seq[i] < seq[i - 1]:
                    rel[i] = OLDER
                elif seq[i] == seq[i - 1]:
                    rel[i] = SAME_SEQ
                else:
                    rel[i] = DISORDER
            prev_file = f
            prev = k
            first_in_block = False
            p += nonshared + vl
            i += 1
    if i != n:
        return TOO_MANY, np.int64(len(bstart) - 1), np.int64(0)
    return OK, np.int64(-1), np.int64(0)


@_jit
def _compare(keys, a, b, start, stop):
    """Sign of the bytes ``keys[a + start : a + stop]`` against ``keys[b + start : b + stop]``."""
    a = _U(a)
    b = _U(b)
    for j in range(_U(start), _U(stop)):
        x = keys[a + j]
        y = keys[b + j]
        if x != y:
            return -1 if x < y else 1
    return 0


@_jit
def _compare_rows(rows, width, a, b, ua, ub):
    """Sign of user key ``a`` against user key ``b`` (bytewise, a key before its extensions): rows of
    ``width`` bytes, zero past each key, compared a big-endian word at a time."""
    pa = _U(a) * _U(width)
    pb = _U(b) * _U(width)
    stop = _U((max(ua, ub) + 7) // 8 * 8)
    for j in range(_U(0), stop, _U(8)):
        x = _be64(rows, pa + j)
        y = _be64(rows, pb + j)
        if x != y:
            return -1 if x < y else 1
    return -1 if ua < ub else (1 if ua > ub else 0)


@_jit
def _before(rows, width, ulen, seq, a, b):
    """Whether entry ``a`` comes strictly before entry ``b``: a smaller user key, or the same one with a
    higher sequence number (newer first)."""
    c = _compare_rows(rows, width, a, b, ulen[a], ulen[b])
    if c != 0:
        return c < 0
    return seq[a] > seq[b]


@_jit
def _rows_ok(keys, base, width, ulen, seq):
    """Whether ``len(ulen)`` rows of ``width`` bytes from ``base`` fit ``keys`` and hold their keys."""
    n = len(ulen)
    if width < 8 or width % 8 or base < 0 or len(keys) < base + n * width or len(seq) != n:
        return False
    for i in range(n):
        if ulen[i] < 0 or ulen[i] > width:
            return False
    return True


@_jit
def merge_runs(keys, base, width, ulen, seq, run_starts):
    """The entries in key order, newest version first: the sorted runs ``[run_starts[r], run_starts[r + 1])``
    merged pairwise, stably (of two versions with one sequence number, the earlier run's first); and
    False (with no order) when the arguments do not fit together."""
    n = len(ulen)
    if not _rows_ok(keys, base, width, ulen, seq) or len(run_starts) < 2 or run_starts[0] != 0 \
            or run_starts[len(run_starts) - 1] != n:
        return np.empty(0, dtype=np.int64), False
    for r in range(len(run_starts) - 1):
        if run_starts[r] > run_starts[r + 1]:
            return np.empty(0, dtype=np.int64), False
    order = np.arange(n)
    other = np.empty(n, dtype=np.int64)
    bounds = run_starts.copy()
    rows = keys[base:]
    while len(bounds) > 2:
        nb = (len(bounds) - 1 + 1) // 2 + 1
        new_bounds = np.empty(nb, dtype=np.int64)
        r = 0
        out = 0
        while r + 1 < len(bounds):
            lo = bounds[r]
            if r + 2 < len(bounds):
                mid = bounds[r + 1]
                hi = bounds[r + 2]
            else:
                mid = bounds[r + 1]
                hi = mid
            new_bounds[out] = lo
            out += 1
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if _before(rows, width, ulen, seq, order[j], order[i]):
                    other[k] = order[j]
                    j += 1
                else:
                    other[k] = order[i]
                    i += 1
                k += 1
            while i < mid:
                other[k] = order[i]
                i += 1
                k += 1
            while j < hi:
                other[k] = order[j]
                j += 1
                k += 1
            r += 2
        new_bounds[out] = bounds[len(bounds) - 1]
        bounds = new_bounds[: out + 1]
        order, other = other, order
    return order, True


@_jit
def visible_entries(keys, base, width, ulen, seq, typ, vpos, vlen, order, out, out_base):
    """The visible version of every user key, in key order: each key's versions are a run of ``order`` (key
    order, newest first), of which the newest decides as in :func:`.instance.resolve` (a value or merge operand
    shows the key, a deletion hides it).

    Copies each visible key's row into ``out`` (from ``out_base`` on, in output order) and returns
    ``(rows, value starts, value ends, run starts, run ends, tie, ok)``: the visible entries, their values'
    ranges, where their runs of versions start and end in ``order`` (for merge operands); ``tie``: whether
    the two newest versions of any key have the same sequence number; ``ok`` False (and nothing else
    meaningful) when the arguments do not fit together.
    """
    n = len(order)
    keep = np.empty(n, dtype=np.int64)
    vs = np.empty(n, dtype=np.int64)
    ve = np.empty(n, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    last = np.empty(n, dtype=np.int64)
    m = len(ulen)
    if (not _rows_ok(keys, base, width, ulen, seq) or len(typ) != m or len(vpos) != m or len(vlen) != m
            or out_base < 0 or len(out) < out_base + n * width):
        return keep[:0], vs[:0], ve[:0], first[:0], last[:0], False, False
    for j in range(n):
        if order[j] < 0 or order[j] >= m:
            return keep[:0], vs[:0], ve[:0], first[:0], last[:0], False, False
    rows = keys[base:]
    tie = False
    count = 0
    j = 0
    while j < n:
        a = order[j]
        k = j + 1
        while k < n:
            b = order[k]
            if ulen[a] != ulen[b] or _compare_rows(rows, width, a, b, ulen[a], ulen[b]) != 0:
                break
            k += 1
        if k - j > 1 and seq[order[j + 1]] == seq[a]:
            tie = True
        t = typ[a]
        if t == 1 or t == 2:  # a value or a merge operand
            keep[count] = a
            vs[count] = vpos[a]
            ve[count] = vpos[a] + vlen[a]
            first[count] = j
            last[count] = k
            src = _U(a) * _U(width)
            dst = _U(out_base) + _U(count) * _U(width)
            for w in range(_U(0), _U(width), _U(8)):
                _put64(out, dst + w, _le64(rows, src + w))
            count += 1
        j = k
    return keep[:count], vs[:count], ve[:count], first[:count], last[:count], tie, True


_PAD_WARM = 16  # bytes of the arrays warm() passes


def warm() -> None:
    """Load this module's kernels from numba's cache (compile them if it has none) by calling each
    once on empty arrays of the types the readers pass: the first real call then runs at once
    instead of spending 0.1-0.3 s loading (see :func:`explorer.format.sst.writer.warm_kernels`)."""
    i64 = np.zeros(0, dtype=np.int64)
    ro = np.zeros(_PAD_WARM, dtype=np.uint8)
    ro.flags.writeable = False  # the joined blocks are a read-only mapping
    rw = np.zeros(_PAD_WARM, dtype=np.uint8)
    z = np.int64(0)
    gather_segments(ro, i64, i64, rw, np.zeros(1, dtype=np.int64))
    gather_segments(rw, i64, i64, rw.copy(), np.zeros(1, dtype=np.int64))  # (key rows: a writable buffer)
    scan_blocks(ro, i64, i64, i64.copy())
    scan_blocks(rw, i64, i64, i64.copy())
    first_key_groups(ro, i64, i64, z, i64.copy())
    for blocks in (ro, rw):  # (the Flink reader's joined blocks: a writable buffer)
        fill_entries(blocks, i64, i64, i64, rw.copy(), z, np.int64(8), i64, i64.copy(), i64.copy(), i64.copy(),
                     np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.int8))
    merge_runs(rw, z, np.int64(8), i64, i64.copy(), np.zeros(2, dtype=np.int64))
    visible_entries(rw, z, np.int64(8), i64, i64.copy(), np.zeros(0, dtype=np.uint8), i64.copy(), i64.copy(),
                    i64.copy(), rw.copy(), z)

