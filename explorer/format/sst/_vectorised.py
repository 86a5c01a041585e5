"""NumPy forms of the SST walk and merge kernels (:mod:`.kernels`): no compilation (issue 31).

Each function takes the arguments of the kernel of the same name and returns what it returns, value for
value (``tests/format/test_sst_vectorised.py`` compares both on every sample snapshot and on crafted and
damaged blocks). :mod:`.columns` runs them where numba's cache does not hold the kernel yet and the input
is small: compiling the four kernels costs 4-5 CPU-seconds, more than a first open of a small snapshot
costs altogether.

The entry walk runs every *restart segment* of every block side by side: RocksDB writes a restart point
(an entry sharing no key bytes, whose offset the block's trailer lists) every 16 entries, so one NumPy
step decodes the next entry of every segment, and a block is walked in about 16 steps whatever the
number of blocks. The walk is the kernels' walk, from the block's start, exactly when every segment ends
where the next one starts (its last entry's value ends at the next restart offset); where restart
points are not entry starts, one segment per block is walked instead. Each key is rebuilt from the
previous one's first ``shared`` bytes column by column (byte ``j`` of entry ``i`` was written by the last
entry up to ``i`` sharing at most ``j`` bytes).

What a data block as RocksDB writes it never holds (a bad varint, an entry past its block, a key sharing
more than the previous one has, a short key, a hash index, runs out of order, bytes past a key that are
not zero) is handed to the kernel itself, which numba then compiles: its error code and offset are then
the ones the caller reports, on damaged data only.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

from .codes import DISORDER, FIRST, GREATER, OK, OLDER, SAME_SEQ

_K5 = np.arange(5, dtype=np.int64)
_SHIFT7 = 7 * _K5
_EMPTY = np.zeros(0, dtype=np.int64)


def _kernels():
    from . import kernels  # numba: for damaged input only

    return kernels


def _u32(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    b = buf[pos[:, None] + np.arange(4)].astype(np.int64)
    return b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16) | (b[:, 3] << 24)


def _varint(buf: np.ndarray, p: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The varint32 at every position (:func:`.kernels.varint` with ``most`` 5): values, positions after,
    and whether it runs past ``end`` or over 5 bytes."""
    b = buf[np.minimum(p, len(buf) - 1)]
    value = b.astype(np.int64)
    after = p + 1
    bad = p >= end
    more = np.flatnonzero(b >= 0x80)  # (most are one byte)
    if len(more):
        value[more], after[more], bad[more] = _long_varint(buf, p[more], end[more])
    return value, after, bad


def _long_varint(buf: np.ndarray, p: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_varint` of up to 5 bytes each."""
    idx = p[:, None] + _K5
    np.clip(idx, 0, len(buf) - 1, out=idx)
    b = buf[idx].astype(np.int64)
    last = b < 0x80
    length = np.argmax(last, axis=1) + 1
    bad = ~last.any(axis=1) | (p + length > end)
    value = ((b & 0x7F) << _SHIFT7) * (_K5 < length[:, None])
    return value.sum(axis=1), p + length, bad


def _block_ends(buf: np.ndarray, bstart: np.ndarray, blen: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Each block's end of entries and restart count (:func:`.kernels._block_limit`); None if any block is bad."""
    s, length = bstart, blen
    if ((length < 4) | (s < 0) | (s + length + 8 > len(buf))).any():
        return None
    packed = _u32(buf, s + length - 4)
    nr = packed & 0x7FFFFFFF
    limit = length - 4 - 4 * nr
    if (packed >> 31).any() or ((nr < 1) | (limit < 0)).any():
        return None
    return s + limit, nr


def _restart_lanes(buf: np.ndarray, bstart: np.ndarray, end: np.ndarray, nr: np.ndarray) -> tuple | None:
    """``(block, start, stop)`` of every restart segment, or None where a block's restart offsets do not
    start at 0 and rise to its end of entries."""
    blk = np.repeat(np.arange(len(bstart)), nr)
    first = np.cumsum(nr) - nr
    roff = _u32(buf, end[blk] + 4 * (np.arange(len(blk)) - first[blk]))
    start = bstart[blk] + roff
    stop = np.empty_like(start)
    stop[:-1] = start[1:]
    last = first + nr - 1
    stop[last] = end
    if (roff[first] != 0).any() or (stop < start).any():
        return None
    return blk, start, stop


def _walk_lanes(buf: np.ndarray, blk: np.ndarray, start: np.ndarray, stop: np.ndarray,
                end: np.ndarray) -> tuple | None:
    """Every entry of the segments ``start..stop`` of blocks ``blk`` (entries checked against their block's
    ``end``), in the kernels' order: ``(block, shared, non-shared, value length, key position)``; None on
    anything the kernels' walk would not pass the same way."""
    p = start.copy()
    lane_end = end[blk]
    active = np.flatnonzero(p < stop)
    parts = []
    step = 0
    while len(active):
        at = p[active]
        e = lane_end[active]
        shared, q, bad = _varint(buf, at, e)
        nonshared, q, bad2 = _varint(buf, q, e)
        vlen, q, bad3 = _varint(buf, q, e)
        bad |= bad2 | bad3 | (nonshared > e - q) | (vlen > e - q - nonshared) | (shared + nonshared < 8)
        if bad.any():
            return None
        nxt = q + nonshared + vlen
        p[active] = nxt
        parts.append((active, np.full(len(active), step), shared, nonshared, vlen, q))
        active = active[nxt < stop[active]]
        step += 1
    if (p != stop).any():  # a segment's last entry runs over the next restart point
        return None
    if not parts:
        return _EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY
    lane, steps, shared, nonshared, vlen, kpos = (np.concatenate(c) for c in zip(*parts))
    order = np.lexsort((steps, lane))
    block = blk[lane[order]]
    shared, nonshared = shared[order], nonshared[order]
    k = shared + nonshared
    prev = np.zeros_like(k)  # the previous key's length in its block (0 before a block's first)
    prev[1:] = np.where(block[1:] == block[:-1], k[:-1], 0)
    if (shared > prev).any():
        return None
    return block, shared, nonshared, vlen[order], kpos[order]


_last = threading.local()  # the walk scan_blocks made, for fill_entries on the same arrays in the same thread
# (held by weak references: a joined buffer maps the SST files, which must go with its last array)


def _entries(buf: np.ndarray, bstart: np.ndarray, blen: np.ndarray, again: bool = False) -> tuple | None:
    """:func:`_walk_lanes` over restart segments, else over whole blocks; None where the kernel must walk.
    ``again``: the walk of the same three arrays by the last call in this thread, if that was the last
    one (:func:`fill_entries` after :func:`scan_blocks`, as the kernels are called, walks once)."""
    last = getattr(_last, "walk", None)
    _last.walk = None
    if again and last is not None and last[0]() is buf and last[1]() is bstart and last[2]() is blen:
        return last[3]
    got = _walk(buf, bstart, blen)
    if not again:
        _last.walk = (weakref.ref(buf), weakref.ref(bstart), weakref.ref(blen), got)
    return got


def _walk(buf: np.ndarray, bstart: np.ndarray, blen: np.ndarray) -> tuple | None:
    bstart = np.asarray(bstart, dtype=np.int64)
    blen = np.asarray(blen, dtype=np.int64)
    got = _block_ends(buf, bstart, blen)
    if got is None:
        return None
    end, nr = got
    lanes = _restart_lanes(buf, bstart, end, nr)
    walked = _walk_lanes(buf, *lanes, end) if lanes is not None else None
    if walked is None:
        walked = _walk_lanes(buf, np.arange(len(bstart)), bstart, end, end)
    return walked


def scan_blocks(buf, bstart, blen, counts):
    """:func:`.kernels.scan_blocks`."""
    got = _entries(buf, bstart, blen)
    if got is None:
        return _kernels().scan_blocks(buf, bstart, blen, counts)
    block, shared, nonshared, _, _ = got
    counts[: len(bstart)] = np.bincount(block, minlength=len(bstart))
    longest = int((shared + nonshared).max()) if len(block) else 0
    return OK, -1, 0, longest


def fill_entries(buf, bstart, blen, bfile, keys, base, width, ulen, vpos, vlen, seq, typ, rel):
    """:func:`.kernels.fill_entries`."""
    n = len(ulen)
    args = (buf, bstart, blen, bfile, keys, base, width, ulen, vpos, vlen, seq, typ, rel)
    if (width < 8 or width % 8 or base < 0 or len(keys) < base + n * width or len(vpos) != n or len(vlen) != n
            or len(seq) != n or len(typ) != n or len(rel) != n or len(blen) != len(bstart)
            or len(bfile) != len(bstart)):
        return _kernels().fill_entries(*args)
    got = _entries(buf, bstart, blen, again=True)
    if got is None:
        return _kernels().fill_entries(*args)
    block, shared, nonshared, vl, kpos = got
    k = shared + nonshared
    if len(block) != n or (n and int(k.max()) > width + 8):
        return _kernels().fill_entries(*args)  # (TOO_MANY, where the kernel finds it)
    if not n:
        return OK, -1, 0
    # the internal keys, column by column: byte j of entry i is byte j - shared[s] of the key bytes of
    # the last entry s <= i with shared[s] <= j (a block's first entry shares nothing)
    longest = int(k.max())
    rows = np.arange(n)
    internal = np.zeros((n, longest), dtype=np.uint8)
    top = len(buf) - 1
    for j in range(longest):
        src = rows if j >= int(shared.max()) else np.maximum.accumulate(np.where(shared <= j, rows, 0))
        internal[:, j] = buf[np.minimum(kpos[src] + (j - shared[src]), top)]
    u = k - 8
    user = np.zeros((n, width), dtype=np.uint8)
    user[:, : min(width, longest)] = internal[:, :width]
    user[np.arange(width) >= u[:, None]] = 0
    keys[base : base + n * width] = user.reshape(-1)
    trailer = (internal[rows[:, None], u[:, None] + np.arange(8)].astype(np.uint64)
               << (np.uint64(8) * np.arange(8, dtype=np.uint64))).sum(axis=1, dtype=np.uint64)
    seq[:] = (trailer >> np.uint64(8)).astype(np.int64)
    typ[:] = (trailer & np.uint64(0xFF)).astype(np.uint8)
    ulen[:] = u
    vpos[:] = kpos + nonshared
    vlen[:] = vl
    f = np.asarray(bfile)[block]
    words = user.view(">u8")
    r = np.full(n, FIRST, dtype=np.int8)
    if n > 1:
        a, b = words[:-1], words[1:]
        differ = a != b
        j = np.argmax(differ, axis=1)
        pick = np.arange(n - 1)
        c = np.where(differ.any(axis=1), np.where(a[pick, j] < b[pick, j], -1, 1), 0)
        c = np.where(c == 0, np.sign(u[:-1] - u[1:]), c)  # a key before its extensions
        s0, s1 = seq[:-1], seq[1:]
        rest = np.where(c < 0, GREATER, np.where(c > 0, DISORDER, np.where(
            s1 < s0, OLDER, np.where(s1 == s0, SAME_SEQ, DISORDER))))
        r[1:] = np.where(f[1:] != f[:-1], FIRST, rest)
    rel[:] = r
    return OK, -1, 0


def _words(keys, base, width, ulen):
    """The ``len(ulen)`` key rows as big-endian words (compared like the bytes), or None where a row holds a
    byte other than zero past its key's last word (the kernels compare only up to the longer key's)."""
    n = len(ulen)
    words = np.asarray(keys[base : base + n * width]).reshape(n, width).view(">u8")
    past = np.arange(width // 8) >= ((np.asarray(ulen) + 7) // 8)[:, None]
    if (words[past] != 0).any():
        return None
    return words


def _rows_ok(keys, base, width, ulen, seq) -> bool:
    n = len(ulen)
    if width < 8 or width % 8 or base < 0 or len(keys) < base + n * width or len(seq) != n:
        return False
    return not (n and ((ulen < 0) | (ulen > width)).any())


def _sort_key(words, ulen, seq) -> tuple:
    """``np.lexsort`` keys: user key bytes ascending (a key before its extensions), then newest first."""
    return (-np.asarray(seq, dtype=np.int64), np.asarray(ulen), *words.T[::-1])


def merge_runs(keys, base, width, ulen, seq, run_starts):
    """:func:`.kernels.merge_runs`: a stable sort, which is the kernel's pairwise stable merge where each run is
    in order (as :mod:`.columns` checks before it merges); a run out of order goes to the kernel."""
    n = len(ulen)
    if not _rows_ok(keys, base, width, ulen, seq) or len(run_starts) < 2 or run_starts[0] != 0 \
            or run_starts[len(run_starts) - 1] != n or (np.diff(run_starts) < 0).any():
        return np.empty(0, dtype=np.int64), False
    words = _words(keys, base, width, ulen)
    if words is None:
        return _kernels().merge_runs(keys, base, width, ulen, seq, run_starts)
    order = np.lexsort(_sort_key(words, ulen, seq)).astype(np.int64)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    run = np.repeat(np.arange(len(run_starts) - 1), np.diff(run_starts))
    within = run[1:] == run[:-1]
    # a run is in order where no entry sorts strictly before its predecessor: equal entries keep their order
    # in a stable sort, so ranks rise along a run exactly then
    if (within & (rank[1:] < rank[:-1])).any():
        return _kernels().merge_runs(keys, base, width, ulen, seq, run_starts)
    if len(run_starts) == 2:
        return np.arange(n, dtype=np.int64), True  # (the kernel merges nothing)
    return order, True


def visible_entries(keys, base, width, ulen, seq, typ, vpos, vlen, order, out, out_base):
    """:func:`.kernels.visible_entries`."""
    n = len(order)
    m = len(ulen)
    empty = np.zeros(0, dtype=np.int64)
    fail = (empty, empty.copy(), empty.copy(), empty.copy(), empty.copy(), False, False)
    if (not _rows_ok(keys, base, width, ulen, seq) or len(typ) != m or len(vpos) != m or len(vlen) != m
            or out_base < 0 or len(out) < out_base + n * width):
        return fail
    order = np.asarray(order, dtype=np.int64)
    if n and ((order < 0) | (order >= m)).any():
        return fail
    words = _words(keys, base, width, ulen)
    if words is None:
        return _kernels().visible_entries(keys, base, width, ulen, seq, typ, vpos, vlen, order, out, out_base)
    if not n:
        return empty, empty.copy(), empty.copy(), empty.copy(), empty.copy(), False, True
    a, b = order[:-1], order[1:]
    same = (ulen[a] == ulen[b]) & (words[a] == words[b]).all(axis=1)
    first = np.flatnonzero(np.r_[True, ~same])
    last = np.r_[first[1:], n]
    heads = order[first]
    two = first[last - first > 1]
    tie = bool((seq[order[two + 1]] == seq[order[two]]).any())
    t = typ[heads]
    shown = (t == 1) | (t == 2)  # a value or a merge operand
    keep = heads[shown]
    rows = np.asarray(keys[base : base + m * width]).reshape(m, width)
    out[out_base : out_base + len(keep) * width] = rows[keep].reshape(-1)
    return (keep, vpos[keep].astype(np.int64), (vpos[keep] + vlen[keep]).astype(np.int64),
            first[shown].astype(np.int64), last[shown].astype(np.int64), tie, True)
