"""numba kernel that numbers string keys: :func:`._columns._encode_keys`' codes without Arrow's hash table.

``pyarrow.compute.dictionary_encode`` numbers the keys of a range of 3 M rows in 1.6 s (one
hash table of all of them, a cache miss per key); :func:`encode_strings` gives the same codes
(first appearance order, one per distinct byte string) in about a tenth of that. The rows are
first cut into buckets by the top bits of their 64-bit key hash (:func:`._diff_kernels.hash_strings`;
equal keys have equal hashes, so a key never spans two buckets), each bucket's keys go
through an open-addressing table of its own size (one that stays in cache), and every hash
match is confirmed byte by byte (a collision costs a probe, never a wrong code). The codes
are then renumbered in the order of each key's first row, which is Arrow's order.

Pieces already sorted by key group and key bytes (the engine's RocksDB savepoints, generated ones) are
numbered without a hash table by :func:`number_sorted`, their order checked as they are read (see the
section below).

Imported lazily, like :mod:`._diff_kernels`: ``import explorer`` does not pay for numba.
Offsets are checked before any byte is read; bad ones are :data:`BAD_OFFSETS`, not a read.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .. import numba_cache  # noqa: F401 - a damaged numba cache file is a miss, not an error

BAD_OFFSETS = -2
#: rows per bucket aimed at: a bucket's table (twice its rows, 12 bytes a slot) stays near the CPU's caches
BUCKET_ROWS = 1 << 14

_jit = numba.njit(cache=True, nogil=True)


@numba.njit(cache=True, nogil=True, inline="always")
def _same(off, data, i, j):
    a, b, c = off[i], off[i + 1], off[j]
    if off[j + 1] - c != b - a:
        return False
    for x in range(b - a):
        if data[a + x] != data[c + x]:
            return False
    return True


@numba.njit(cache=True, nogil=True, inline="always")
def _offsets_rise(off, data, n):
    """Whether the ``n + 1`` offsets ``off`` start at or past 0, never fall and end within ``data``: checked
    before any key byte is read."""
    for i in range(n):
        if off[i] < 0 or off[i + 1] < off[i] or off[i + 1] > len(data):
            return False
    return True


@numba.njit(cache=True, nogil=True, inline="always")
def _table_size(rows):
    """Slots of an open-addressing table for ``rows`` keys: a power of two, at least 16 and twice the rows."""
    size = 16
    while size < 2 * rows:
        size <<= 1
    return size


@numba.njit(cache=True, nogil=True, inline="always")
def _buckets(h, bits, with_rows):
    """The hashes ``h`` cut into ``1 << bits`` buckets by their top ``bits`` bits (``0 <= bits <= 30``):
    ``count`` (bucket ``b``'s rows are ``count[b]:count[b + 1]`` of the bucket order), the largest
    bucket's size, the rows in bucket order (stable: a bucket's rows in row order; empty unless
    ``with_rows``) and their hashes in that order, which a bucket's pass reads in sequence."""
    n = len(h)
    nb = 1 << bits
    shift = np.uint64(64 - bits) if bits > 0 else np.uint64(0)
    count = np.zeros(nb + 1, np.int64)
    for i in range(n):
        b = np.int64(h[i] >> shift) if bits > 0 else 0
        count[b + 1] += 1
    biggest = 0
    for b in range(nb):
        biggest = max(biggest, count[b + 1])
        count[b + 1] += count[b]
    order = np.empty(n if with_rows else 0, np.int64)
    hs = np.empty(n, np.uint64)
    at = count[:nb].copy()
    for i in range(n):
        b = np.int64(h[i] >> shift) if bits > 0 else 0
        if with_rows:
            order[at[b]] = i
        hs[at[b]] = h[i]
        at[b] += 1
    return count, biggest, order, hs


@_jit
def encode_strings(off, data, h, bits, codes, first):
    """``codes[i]``: the number of key ``i`` (bytes ``data[off[i]:off[i + 1]]``, hash ``h[i]``) in the
    order of first appearance; ``first[c]``: the row where key ``c`` first appears. ``bits``: the
    buckets are the top ``bits`` bits of the hash. Returns the number of distinct keys, or
    :data:`BAD_OFFSETS` (nothing read) when the offsets do not rise within ``data``."""
    n = len(h)
    if len(off) != n + 1 or len(codes) != n or len(first) != n or bits < 0 or bits > 30:
        return BAD_OFFSETS
    if not _offsets_rise(off, data, n):
        return BAD_OFFSETS
    if n == 0:
        return 0
    nb = 1 << bits
    count, biggest, order, hs = _buckets(h, bits, True)
    cap = _table_size(biggest)
    slot_code = np.empty(cap, np.int64)
    slot_hash = np.empty(cap, np.uint64)
    is_first = np.zeros(n, np.bool_)
    k = 0
    for b in range(nb):
        lo, hi = count[b], count[b + 1]
        size = _table_size(hi - lo)
        mask = np.uint64(size - 1)
        slot_code[:size] = -1
        prev, prev_code = -1, -1
        prev_hash = np.uint64(0)
        for q in range(lo, hi):
            i = order[q]
            hq = hs[q]
            if prev >= 0 and prev_hash == hq and _same(off, data, prev, i):  # runs of one key (a list's entries)
                codes[i] = prev_code
                prev = i
                continue
            slot = hq & mask
            while True:
                c = slot_code[slot]
                if c < 0:
                    slot_code[slot] = k
                    slot_hash[slot] = hq
                    first[k] = i
                    is_first[i] = True
                    c = k
                    k += 1
                    break
                if slot_hash[slot] == hq and _same(off, data, first[c], i):
                    break
                slot = (slot + np.uint64(1)) & mask
            codes[i] = c
            prev, prev_code, prev_hash = i, c, hq
    # renumber in the order of first rows (Arrow's numbering)
    renum = np.empty(k, np.int64)
    r = 0
    for i in range(n):
        if is_first[i]:
            renum[codes[i]] = r
            first[r] = i
            r += 1
    for i in range(n):
        codes[i] = renum[codes[i]]
    return k


@_jit
def per_key_sums(codes, key_group, size, n_codes, entries, nbytes, kg_of):
    """Per code ``0..n_codes-1``: rows (``entries``), summed ``size`` (``nbytes``) and the key group of its
    last row (``kg_of``), in one pass (what three ``np.bincount`` and a scatter give). False, with
    nothing read out of bounds, for a code outside ``0..n_codes-1`` or arrays of unequal lengths."""
    n = len(codes)
    if len(key_group) != n or len(size) != n or len(entries) != n_codes or len(nbytes) != n_codes \
            or len(kg_of) != n_codes:
        return False
    entries[:] = 0
    nbytes[:] = 0
    kg_of[:] = 0
    for i in range(n):
        c = codes[i]
        if c < 0 or c >= n_codes:
            return False
        entries[c] += 1
        nbytes[c] += size[i]
        kg_of[c] = key_group[i]
    return True


# --- keys already sorted: numbered by a merge, no hash table --------------------------------------------------
#
# A canonical savepoint's files are sorted by key group (the format's one promise); the engine's RocksDB
# backend also writes each key group's keys in byte order (its key codec is order-preserving), and a
# generated savepoint may too. Where every piece of a range is so sorted, equal keys are neighbours
# within a piece, and a piece's keys are numbered by comparing each row with the one before it; the
# pieces (states, subtasks) are then merged by (key group, key bytes) to give one code per key across
# them. Nothing of the order is assumed: each piece's order is checked as it is read (UNSORTED, and the
# caller numbers the range with :func:`encode_strings`), and a key found in two key groups (which the
# merge would number twice) is caught by :func:`distinct_hashes` on the keys' hashes.

#: :func:`number_sorted`: a piece's rows are not in (key group, key bytes) order
UNSORTED = -3


@intrinsic
def _word_be(typingctx, data, at):
    """The 8 bytes of the uint8 array ``data`` at byte ``at`` (uint64) as one big-endian word, so that two
    words compare as their bytes do, in one unaligned load. Callers check ``at + 8 <= len(data)`` first."""
    sig = types.uint64(data, types.uint64)

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(array.data, [args[1]])
        return builder.bswap(builder.load(builder.bitcast(ptr, ir.IntType(64).as_pointer()), align=1))

    return sig, codegen


@numba.njit(cache=True, nogil=True, inline="always")
def _order(off, data, i, j):
    """-1, 0 or 1 as key ``i`` sorts before, equal to or after key ``j``: bytes compared as unsigned, a
    key that is a prefix of the other first (the order of UTF-8 strings as Python's ``str`` compares
    them). Offsets are checked by the callers."""
    a, b = np.uint64(off[i]), np.uint64(off[j])
    la, lb = np.uint64(off[i + 1]) - a, np.uint64(off[j + 1]) - b
    m = min(la, lb)
    eight = np.uint64(8)
    x = np.uint64(0)
    while x + eight <= m:
        wa, wb = _word_be(data, a + x), _word_be(data, b + x)
        if wa != wb:
            return -1 if wa < wb else 1
        x += eight
    if x < m:
        if m >= eight:  # the last word overlaps the one before: its bytes before ``x`` are equal
            wa, wb = _word_be(data, a + m - eight), _word_be(data, b + m - eight)
            if wa != wb:
                return -1 if wa < wb else 1
        else:
            while x < m:
                ca, cb = data[a + x], data[b + x]
                if ca != cb:
                    return -1 if ca < cb else 1
                x += np.uint64(1)
    return -1 if la < lb else (1 if la > lb else 0)


@numba.njit(cache=True, nogil=True, inline="always")
def _before(off, data, kg, i, j):
    """:func:`_order` of rows ``i`` and ``j`` by (key group, key bytes)."""
    if kg[i] != kg[j]:
        return -1 if kg[i] < kg[j] else 1
    return _order(off, data, i, j)


@numba.njit(cache=True, nogil=True, inline="always")
def _head_less(off, data, kg, heads, cur, p, q):
    """Whether piece ``p``'s current key sorts before piece ``q``'s (ties: the lower piece first)."""
    r = _before(off, data, kg, heads[cur[p]], heads[cur[q]])
    return r < 0 or (r == 0 and p < q)


@numba.njit(cache=True, nogil=True, inline="always")
def _sift_down(heap, hn, off, data, kg, heads, cur):
    at = 0
    while True:
        c = 2 * at + 1
        if c >= hn:
            return
        if c + 1 < hn and _head_less(off, data, kg, heads, cur, heap[c + 1], heap[c]):
            c += 1
        if not _head_less(off, data, kg, heads, cur, heap[c], heap[at]):
            return
        heap[c], heap[at] = heap[at], heap[c]
        at = c


@_jit
def number_sorted(off, data, kg, starts, codes, first):
    """:func:`encode_strings`' ``codes`` and ``first`` for rows whose pieces (rows ``starts[p]..starts[p + 1]``)
    are each sorted by key group ``kg`` then key bytes, without a hash table: equal keys of a piece are
    neighbours, and the pieces are merged by (key group, key). Returns the number of distinct
    (key group, key) pairs (the number of keys when no key lies in two key groups, which the caller
    checks), :data:`UNSORTED` when a piece is out of that order (``codes`` and ``first`` then
    unspecified), or :data:`BAD_OFFSETS` (nothing read) for offsets that do not rise within ``data``."""
    n = len(codes)
    n_pieces = len(starts) - 1
    if len(off) != n + 1 or len(kg) != n or len(first) != n or n_pieces < 1 or starts[0] != 0 \
            or starts[n_pieces] != n:
        return BAD_OFFSETS
    for p in range(n_pieces):
        if starts[p + 1] < starts[p]:
            return BAD_OFFSETS
    if not _offsets_rise(off, data, n):
        return BAD_OFFSETS
    if n == 0:
        return 0
    # 1. each piece's runs of one (key group, key), its order checked row by row; codes[i]: the row's run
    heads = first  # heads[r]: the first row of run r (runs numbered piece after piece, in row order)
    run_at = np.empty(n_pieces + 1, np.int64)
    runs = 0
    for p in range(n_pieces):
        run_at[p] = runs
        for i in range(starts[p], starts[p + 1]):
            if i > starts[p]:
                r = _before(off, data, kg, i - 1, i)
                if r > 0:
                    return UNSORTED
                if r == 0:
                    codes[i] = runs - 1
                    continue
            heads[runs] = i
            codes[i] = runs
            runs += 1
    run_at[n_pieces] = runs
    if n_pieces == 1:  # one piece: its runs are its keys, numbered in order of first row already
        return runs
    # 2. the pieces' runs merged by (key group, key): run_code[r], equal keys of two pieces one code. The
    # piece first in order takes its runs up to the next piece's key at once (found by galloping): a
    # small piece (a list state of a few keys) costs its own keys' comparisons, not the large one's.
    run_code = np.empty(runs, np.int64)
    cur = run_at[:n_pieces].copy()
    heap = np.empty(n_pieces, np.int64)
    hn = 0
    for p in range(n_pieces):
        if run_at[p] < run_at[p + 1]:
            heap[hn] = p
            at = hn
            hn += 1
            while at > 0:
                up = (at - 1) // 2
                if not _head_less(off, data, kg, heads, cur, heap[at], heap[up]):
                    break
                heap[at], heap[up] = heap[up], heap[at]
                at = up
    k = 0
    last = -1  # the row of the last key numbered
    while hn > 0:
        p = heap[0]
        r = cur[p]
        row = heads[r]
        if last < 0 or kg[last] != kg[row] or _order(off, data, last, row) != 0:
            k += 1
        run_code[r] = k - 1
        last = row
        end = run_at[p + 1]
        r += 1
        if hn == 1:  # the last piece: the rest of its runs are keys of their own
            while r < end:
                run_code[r] = k
                k += 1
                r += 1
            last = heads[end - 1]
        elif r < end:
            nxt = heap[1] if hn == 2 or _head_less(off, data, kg, heads, cur, heap[1], heap[2]) else heap[2]
            t = heads[cur[nxt]]
            # runs r.. of p before t: gallop, then halve (a piece's runs rise strictly)
            lo, step = r, 1  # runs lo.. before t unless found otherwise; hi: the first run not before t
            hi = end
            while lo < end:
                probe = min(lo + step - 1, end - 1)
                if _before(off, data, kg, heads[probe], t) < 0:
                    lo = probe + 1
                    step *= 2
                else:
                    hi = probe
                    break
            while lo < hi:  # runs before lo are before t, run hi is not (or hi == end)
                mid = (lo + hi) // 2
                if _before(off, data, kg, heads[mid], t) < 0:
                    lo = mid + 1
                else:
                    hi = mid
            while r < lo:
                run_code[r] = k
                k += 1
                r += 1
            if r > cur[p] + 1:
                last = heads[r - 1]
        cur[p] = r
        if r == end:
            hn -= 1
            heap[0] = heap[hn]
        if hn > 1:
            _sift_down(heap, hn, off, data, kg, heads, cur)
    # 3. codes in order of first row (Arrow's numbering), first[c] the first row of code c. When the first
    # piece holds every key (a value state beside list states of some keys), its runs are the codes in that
    # order already and their heads the first rows: only the other pieces' rows are renumbered
    whole = k == run_at[1]
    for r in range(run_at[1]):
        if not whole:
            break
        whole = run_code[r] == r
    if whole:
        for i in range(starts[1], n):
            codes[i] = run_code[codes[i]]
        return k
    # else over the run heads, which are read no more
    renum = np.full(k, -1, np.int64)
    q = 0
    for i in range(n):
        c = run_code[codes[i]]
        m = renum[c]
        if m < 0:
            m = q
            renum[c] = q
            first[q] = i
            q += 1
        codes[i] = m
    return k


@_jit
def distinct_hashes(h, bits):
    """Whether the hashes ``h`` are all different (each bucket of the top ``bits`` bits through a table of its
    own size, as :func:`encode_strings`): the check that :func:`number_sorted`'s keys, distinct per key
    group, are distinct keys. A duplicate, or a 64-bit collision of two keys, is False."""
    n = len(h)
    if n < 2:
        return True
    if bits < 0 or bits > 30:
        bits = 0
    nb = 1 << bits
    count, biggest, _, hs = _buckets(h, bits, False)
    cap = _table_size(biggest)
    used = np.empty(cap, np.bool_)
    slot_hash = np.empty(cap, np.uint64)
    for b in range(nb):
        lo, hi = count[b], count[b + 1]
        size = _table_size(hi - lo)
        mask = np.uint64(size - 1)
        used[:size] = False
        for q in range(lo, hi):
            hq = hs[q]
            slot = hq & mask
            while used[slot]:
                if slot_hash[slot] == hq:
                    return False
                slot = (slot + np.uint64(1)) & mask
            used[slot] = True
            slot_hash[slot] = hq
    return True


def warm() -> None:
    """Compile (or load from numba's cache) every signature the key numbering and per-key sums pass these
    kernels (:func:`explorer.kernels.warm`, at install): offsets int32 (Arrow ``string``) or int64
    (``large_string``), key groups int32 or int64 (other integer widths are widened to int64)."""
    h = np.zeros(2, dtype=np.uint64)
    data = np.zeros(2, dtype=np.uint8)
    for off_type in (np.int32, np.int64):
        off = np.array([0, 1, 2], dtype=off_type)
        encode_strings(off, data, h, 0, np.empty(2, np.int64), np.empty(2, np.int64))
    off = np.array([0, 1, 2], dtype=np.int32)  # (pieces sorted by key: the engine's RocksDB savepoints' strings)
    for kg_type in (np.int32, np.int64):
        kg = np.zeros(2, dtype=kg_type)
        number_sorted(off, data, kg, np.array([0, 2], dtype=np.int64), np.empty(2, np.int64), np.empty(2, np.int64))
        per_key_sums(np.zeros(2, np.int64), kg, np.ones(2, np.int64), 1, np.empty(1, np.int64), np.empty(1, np.int64),
                     np.empty(1, kg_type))
    distinct_hashes(h, 0)
