"""numba kernel that numbers string keys: :func:`._columns._encode_keys`' codes without Arrow's hash table.

``pyarrow.compute.dictionary_encode`` numbers the keys of a range of 3 M rows in 1.6 s (one
hash table of all of them, a cache miss per key); :func:`encode_strings` gives the same codes
(first appearance order, one per distinct byte string) in about a tenth of that. The rows are
first cut into buckets by the top bits of their 64-bit key hash (:func:`._diff_kernels.hash_strings`;
equal keys have equal hashes, so a key never spans two buckets), each bucket's keys go
through an open-addressing table of its own size (one that stays in cache), and every hash
match is confirmed byte by byte (a collision costs a probe, never a wrong code). The codes
are then renumbered in the order of each key's first row, which is Arrow's order.

Imported lazily, like :mod:`._diff_kernels`: ``import explorer`` does not pay for numba.
Offsets are checked before any byte is read; bad ones are :data:`BAD_OFFSETS`, not a read.
"""

from __future__ import annotations

import numba
import numpy as np

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


@_jit
def encode_strings(off, data, h, bits, codes, first):
    """``codes[i]``: the number of key ``i`` (bytes ``data[off[i]:off[i + 1]]``, hash ``h[i]``) in the
    order of first appearance; ``first[c]``: the row where key ``c`` first appears. ``bits``: the
    buckets are the top ``bits`` bits of the hash. Returns the number of distinct keys, or
    :data:`BAD_OFFSETS` (nothing read) when the offsets do not rise within ``data``."""
    n = len(h)
    if len(off) != n + 1 or len(codes) != n or len(first) != n or bits < 0 or bits > 30:
        return BAD_OFFSETS
    for i in range(n):
        if off[i] < 0 or off[i + 1] < off[i] or off[i + 1] > len(data):
            return BAD_OFFSETS
    if n == 0:
        return 0
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
    order = np.empty(n, np.int64)
    hs = np.empty(n, np.uint64)  # the hashes in bucket order: a bucket's pass reads them in sequence
    at = count[:nb].copy()
    for i in range(n):  # stable: a bucket's rows in row order
        b = np.int64(h[i] >> shift) if bits > 0 else 0
        order[at[b]] = i
        hs[at[b]] = h[i]
        at[b] += 1
    cap = 16
    while cap < 2 * biggest:
        cap <<= 1
    slot_code = np.empty(cap, np.int64)
    slot_hash = np.empty(cap, np.uint64)
    is_first = np.zeros(n, np.bool_)
    k = 0
    for b in range(nb):
        lo, hi = count[b], count[b + 1]
        size = 16
        while size < 2 * (hi - lo):
            size <<= 1
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
