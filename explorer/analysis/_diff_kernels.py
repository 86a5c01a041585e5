"""numba kernels of :func:`explorer.analysis.diff.diff` over two Snapshots: the key join, the
per-key sums of each side, the merge of the two sides per state and the output columns; and
the diff's 64-bit key hash of :mod:`._hashing`.

Imported lazily (inside functions): ``import explorer`` does not pay for numba. The kernels
take and return NumPy arrays only and release the GIL, so the diff's two threads run them
side by side. They never read outside the arrays they are given: lengths and offsets are
checked first and a bad one is an error code (:data:`BAD_OFFSETS`) the caller turns into an
error, not a read.

Keys are compared as bytes: a string key is ``data[off[i]:off[i + 1]]`` of its Arrow array's
buffers, an integer key its 8 little-endian bytes. Two keys match only when their bytes are
equal (a 64-bit hash only finds the candidates), so a hash collision costs time, never a
wrong match; and a join whose probe chains grow past a budget (a hash that does not spread
the keys) stops with :data:`OVER_BUDGET` so the caller can look the keys up another way.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .. import numba_cache  # noqa: F401 - a damaged numba cache file is a miss, not an error

OK = 0
OVER_BUDGET = -1
BAD_OFFSETS = -2

_jit = numba.njit(cache=True, nogil=True)


@intrinsic
def _word(typingctx, data, at):
    """The 8 bytes of the uint8 array ``data`` at byte ``at`` (uint64) as one little-endian
    word, in one unaligned load. Callers check ``at + 8 <= len(data)`` first."""
    sig = types.uint64(data, types.uint64)

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.gep(array.data, [args[1]])
        return builder.load(builder.bitcast(ptr, ir.IntType(64).as_pointer()), align=1)

    return sig, codegen


@numba.njit(cache=True, nogil=True, inline="always")
def _same_bytes(off_a, data_a, i, off_b, data_b, j):
    """1 when key ``i`` of a and key ``j`` of b have the same bytes, 0 when not, -1 when their
    offsets fall outside the data buffers (``i``, ``j`` are checked by the callers)."""
    s, e = off_a[i], off_a[i + 1]
    t, f = off_b[j], off_b[j + 1]
    if s < 0 or e < s or e > len(data_a) or t < 0 or f < t or f > len(data_b):
        return -1
    if f - t != e - s:
        return 0
    n = np.uint64(e - s)
    s, t = np.uint64(s), np.uint64(t)
    x = np.uint64(0)
    eight = np.uint64(8)
    while x + eight <= n:
        if _word(data_a, s + x) != _word(data_b, t + x):
            return 0
        x += eight
    if n >= eight:  # the last word overlaps the one before
        return 1 if _word(data_a, s + n - eight) == _word(data_b, t + n - eight) else 0
    while x < n:
        if data_a[s + x] != data_b[t + x]:
            return 0
        x += np.uint64(1)
    return 1


@_jit
def _join_part(ha, hb, off_a, data_a, off_b, data_b, ia, ib, tr, found_a, table, steps, budget):
    """Join keys ``ia`` of a with keys ``ib`` of b. Returns the probe steps taken so far
    (``steps`` plus this part's), -1 past ``budget``, -2 for offsets outside the data.

    Two snapshots of one job list most keys in the same order, so b's next key is first
    compared with the key of a after the last one matched (same hash, then same bytes); only
    when that fails is it looked up in an open-addressing table of a's keys (built on the
    first such key), each hash match there confirmed by the bytes too.
    """
    size = 16
    while size < 2 * len(ia):
        size *= 2
    mask = np.uint64(size - 1)
    t = table[:size]
    built = False
    last = -1
    m = len(ib)
    q = 0
    while q < m:
        while q < m:  # a run of keys in a's order: each the key after the last one matched
            g = last + 1
            if g >= len(ia):
                break
            i = ia[g]
            j = ib[q]
            if ha[i] != hb[j] or _same_bytes(off_a, data_a, i, off_b, data_b, j) != 1:
                break
            tr[j] = i
            found_a[i] = True
            last = g
            q += 1
        if q == m:
            break
        j = ib[q]
        h = hb[j]
        q += 1
        if not built:
            t[:] = -1
            for e in range(len(ia)):
                slot = ha[ia[e]] & mask
                while t[slot] >= 0:
                    slot = (slot + np.uint64(1)) & mask
                    steps += 1
                t[slot] = e
            built = True
        slot = h & mask
        while True:
            e = t[slot]
            if e < 0:
                break
            i = ia[e]
            if ha[i] == h:
                same = _same_bytes(off_a, data_a, i, off_b, data_b, j)
                if same < 0:
                    return -2
                if same:
                    tr[j] = i
                    found_a[i] = True
                    last = e
                    break
            slot = (slot + np.uint64(1)) & mask
            steps += 1
        if steps > budget:
            return -1
    return steps


_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)
_M3 = np.uint64(0x94D049BB133111EB)
_SEED = np.uint64(0xD6E8FEB86659FD93)


@_jit
def hash_strings(off, data, out):
    """``out[i]``: a 64-bit hash of bytes ``data[off[i]:off[i + 1]]`` (see
    :func:`._hashing.string_hash64`). False, with nothing read, for offsets outside ``data``."""
    n = len(out)
    if len(off) != n + 1:
        return False
    eight = np.uint64(8)
    for i in range(n):
        s, e = off[i], off[i + 1]
        if s < 0 or e < s or e > len(data):
            return False
        m = np.uint64(e - s)
        p = np.uint64(s)
        h = (m + np.uint64(1)) * _SEED
        if m < eight:
            w = np.uint64(0)
            for x in range(m):
                w |= np.uint64(data[p + np.uint64(x)]) << np.uint64(8 * x)
            h = (h ^ w) * _M1
        else:
            x = np.uint64(0)
            while x + eight <= m:
                h = (h ^ _word(data, p + x)) * _M1
                h ^= h >> np.uint64(29)
                x += eight
            if x < m:  # the last word overlaps the one before
                h = (h ^ _word(data, p + m - eight)) * _M2
        h ^= h >> np.uint64(32)
        h *= _M3
        h ^= h >> np.uint64(29)
        out[i] = h
    return True


@_jit
def join_slices(ha, hb, off_a, data_a, off_b, data_b, slices, tr, found_a, budget):
    """``tr[j] = i`` for every key ``j`` of b equal to key ``i`` of a, within each slice
    ``(a0, a1, b0, b1)`` (rows of ``slices``; code ranges); ``found_a[i]`` set for the matched.
    Returns :data:`OK`, :data:`OVER_BUDGET` or :data:`BAD_OFFSETS`."""
    na, nb = len(ha), len(hb)
    if len(off_a) != na + 1 or len(off_b) != nb + 1 or len(tr) != nb or len(found_a) != na:
        return BAD_OFFSETS
    biggest = 0
    for s in range(slices.shape[0]):
        a0, a1, b0, b1 = slices[s, 0], slices[s, 1], slices[s, 2], slices[s, 3]
        if a0 < 0 or a1 > na or a0 > a1 or b0 < 0 or b1 > nb or b0 > b1:
            return BAD_OFFSETS
        biggest = max(biggest, a1 - a0)
    size = 16
    while size < 2 * biggest:
        size *= 2
    table = np.empty(size, dtype=np.int32)
    steps = 0
    for s in range(slices.shape[0]):
        a0, a1, b0, b1 = slices[s, 0], slices[s, 1], slices[s, 2], slices[s, 3]
        if a1 == a0 or b1 == b0:
            continue
        steps = _join_part(ha, hb, off_a, data_a, off_b, data_b, np.arange(a0, a1), np.arange(b0, b1), tr,
                           found_a, table, steps, budget)
        if steps < 0:
            return OVER_BUDGET if steps == -1 else BAD_OFFSETS
    return OK


@_jit
def join_rows(ha, hb, off_a, data_a, off_b, data_b, ia, ib, tr, found_a, budget):
    """:func:`join_slices` of just a's keys ``ia`` with b's keys ``ib`` (all together)."""
    na, nb = len(ha), len(hb)
    if len(off_a) != na + 1 or len(off_b) != nb + 1 or len(tr) != nb or len(found_a) != na:
        return BAD_OFFSETS
    for e in range(len(ia)):
        if ia[e] < 0 or ia[e] >= na:
            return BAD_OFFSETS
    for e in range(len(ib)):
        if ib[e] < 0 or ib[e] >= nb:
            return BAD_OFFSETS
    size = 16
    while size < 2 * len(ia):
        size *= 2
    table = np.empty(size, dtype=np.int32)
    steps = _join_part(ha, hb, off_a, data_a, off_b, data_b, ia, ib, tr, found_a, table, 0, budget)
    if steps < 0:
        return OVER_BUDGET if steps == -1 else BAD_OFFSETS
    return OK


@_jit
def rising(codes, spans, n_codes):
    """1 when the codes of the rows of ``spans`` rise strictly (one row per key, keys in code
    order), 0 when not, -1 for a row or code out of range."""
    last = -1
    out = 1
    for s in range(spans.shape[0]):
        lo, hi = spans[s, 0], spans[s, 1]
        if lo < 0 or hi < lo or hi > len(codes):
            return -1
        for r in range(lo, hi):
            c = codes[r]
            if c < 0 or c >= n_codes:
                return -1
            if c <= last:
                out = 0
            last = c
    return out


@_jit
def side_sums(codes, h, size, spans, n_codes, byt_kind):
    """Per key of one state on one side, its rows the ``(lo, hi)`` rows of ``spans`` (entry key
    codes ``codes``, entry hashes ``h``, sizes ``size``): ``(keys, entries, bytes, fingerprint,
    n, ok)`` (the first ``n`` of each), keys rising; bytes of the dtype of ``byt_kind``
    (int64 or float64). The fingerprint is the wrapping uint64 sum of the entry hashes.

    Rows of one key in runs of rising codes (a value state's one entry per key; a list or map
    state written key by key) are summed run by run in one pass; anything else through a
    table of ``n_codes``. ``ok`` is False for a span or code out of range."""
    m = 0
    for s in range(spans.shape[0]):
        lo, hi = spans[s, 0], spans[s, 1]
        if lo < 0 or hi < lo or hi > len(codes) or hi > len(h) or hi > len(size):
            return (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), np.empty(0, dtype=byt_kind.dtype),
                    np.empty(0, dtype=np.uint64), 0, False)
        m += hi - lo
    keys = np.empty(m, dtype=np.int64)
    ent = np.empty(m, dtype=np.int64)
    byt = np.empty(m, dtype=byt_kind.dtype)
    fp = np.empty(m, dtype=np.uint64)
    n = 0
    rising = True
    cur = -1  # the key of the run being summed, its sums in locals
    c_ent = 0
    c_byt = byt[:0].sum()  # a zero of the bytes' dtype
    c_fp = np.uint64(0)
    for s in range(spans.shape[0]):
        for r in range(spans[s, 0], spans[s, 1]):
            c = codes[r]
            if c < 0 or c >= n_codes:
                return keys, ent, byt, fp, 0, False
            if c == cur:
                c_ent += 1
                c_byt += size[r]
                c_fp += h[r]
                continue
            if c < cur:
                rising = False
                break
            if cur >= 0:
                keys[n], ent[n], byt[n], fp[n] = cur, c_ent, c_byt, c_fp
                n += 1
            cur, c_ent, c_byt, c_fp = c, 1, size[r], h[r]
        if not rising:
            break
    if rising and cur >= 0:
        keys[n], ent[n], byt[n], fp[n] = cur, c_ent, c_byt, c_fp
        n += 1
    if rising:
        return keys, ent, byt, fp, n, True
    cnt = np.zeros(n_codes, dtype=np.int64)
    acc = np.zeros(n_codes, dtype=byt_kind.dtype)
    sums = np.zeros(n_codes, dtype=np.uint64)
    for s in range(spans.shape[0]):
        for r in range(spans[s, 0], spans[s, 1]):
            c = codes[r]
            if c < 0 or c >= n_codes:
                return keys, ent, byt, fp, 0, False
            cnt[c] += 1
            acc[c] += size[r]
            sums[c] += h[r]
    n = 0
    for c in range(n_codes):
        if cnt[c]:
            keys[n], ent[n], byt[n], fp[n] = c, cnt[c], acc[c], sums[c]
            n += 1
    return keys, ent, byt, fp, n, True


@_jit
def b_order(codes, spans, tr, k, row_kind):
    """b's keys (one per row of ``spans``; key code ``codes[r]``, joint code ``tr[codes[r]]``) in
    rising joint code: their rows. By a table of ``k`` rows (of the dtype of ``row_kind``: int32
    when the rows fit) when the state holds many of the keys, by a sort when few. Empty when a
    code is out of range or a joint code repeated."""
    m = 0
    for s in range(spans.shape[0]):
        lo, hi = spans[s, 0], spans[s, 1]
        if lo < 0 or hi < lo or hi > len(codes):
            return np.empty(0, dtype=np.int64)
        m += hi - lo
    out = np.empty(m, dtype=np.int64)
    jb = np.empty(m if m * 8 < k else 0, dtype=np.int64)
    pos = np.full(0 if m * 8 < k else k, -1, dtype=row_kind.dtype)
    q = 0
    for s in range(spans.shape[0]):
        for r in range(spans[s, 0], spans[s, 1]):
            c = codes[r]
            if c < 0 or c >= len(tr) or tr[c] < 0 or tr[c] >= k:
                return out[:0]
            if len(pos):
                if pos[tr[c]] >= 0:
                    return out[:0]
                pos[tr[c]] = r
            else:
                jb[q] = tr[c]
                out[q] = r
            q += 1
    if not len(pos):
        by = np.argsort(jb, kind="mergesort")
        rows = out.copy()
        for t in range(m):
            out[t] = rows[by[t]]
            if t and jb[by[t]] == jb[by[t - 1]]:
                return out[:0]
        return out
    q = 0
    for c in range(k):
        if pos[c] >= 0:
            out[q] = pos[c]
            q += 1
    return out


@_jit
def merge_state(a_codes, a_ent, a_byt, a_fp, a_spans, b_codes, b_ent, b_byt, b_fp, order_b, tr, keep_unchanged,
                write, at, n_pos, block, status_out, joint_out, nonzero):
    """One state's keys of both sides merged in rising joint code; each side one key per row
    (``*_ent`` empty: one entry per row). a's rows are those of ``a_spans``, its codes (the
    joint codes of a's keys) rising; b's are ``order_b`` (:func:`b_order`). Status codes:
    0 added, 1 removed, 2 changed, 3 unchanged (left out unless ``keep_unchanged``).

    Pass 1 (``write`` False) counts: returns ``(kept, positive deltas, negative deltas)``.
    Pass 2 writes each kept key whose ``bytes_delta`` is 0 (most keys) straight to its output
    row ``at + n_pos + i`` (``block``: entries a, b, delta, bytes a, b, delta; ``status_out``,
    ``joint_out``) and the others, in joint order, to the rows of ``nonzero`` (joint, status,
    entries a, entries b, bytes a, bytes b) for :func:`place_nonzero`. Returns -1s for rows or
    codes out of range."""
    bad = (-1, -1, -1)
    for s in range(a_spans.shape[0]):
        lo, hi = a_spans[s, 0], a_spans[s, 1]
        if lo < 0 or hi < lo or hi > len(a_codes) or hi > len(a_byt) or hi > len(a_fp) \
                or (len(a_ent) and hi > len(a_ent)):
            return bad
    nb = len(order_b)
    nb_rows = min(len(b_codes), len(b_byt), len(b_fp))
    if len(b_ent):
        nb_rows = min(nb_rows, len(b_ent))
    if write and (block.shape[0] != 6 or len(status_out) != block.shape[1] or len(joint_out) != block.shape[1]
                  or nonzero.shape[1] != 6):
        return bad
    n_spans = a_spans.shape[0]
    si = 0
    ra = a_spans[0, 0] if n_spans else 0
    while si < n_spans and ra >= a_spans[si, 1]:
        si += 1
        if si < n_spans:
            ra = a_spans[si, 0]
    q = 0
    kept = pos = neg = zero = nz = 0
    while si < n_spans or q < nb:
        ca = a_codes[ra] if si < n_spans else -1
        rb = -1
        cb = -1
        if q < nb:
            rb = order_b[q]
            if rb < 0 or rb >= nb_rows or b_codes[rb] < 0 or b_codes[rb] >= len(tr):
                return bad
            cb = tr[b_codes[rb]]
        if cb < 0 or (ca >= 0 and ca < cb):  # a only
            joint, status = ca, 1
            ea, eb, ba, bb = (a_ent[ra] if len(a_ent) else 1), 0, a_byt[ra], 0
            take_a, take_b = True, False
        elif ca < 0 or cb < ca:  # b only
            joint, status = cb, 0
            ea, eb, ba, bb = 0, (b_ent[rb] if len(b_ent) else 1), 0, b_byt[rb]
            take_a, take_b = False, True
        else:
            ea, eb = (a_ent[ra] if len(a_ent) else 1), (b_ent[rb] if len(b_ent) else 1)
            ba, bb = a_byt[ra], b_byt[rb]
            joint, status = ca, 3 if (a_fp[ra] == b_fp[rb] and ea == eb) else 2
            take_a, take_b = True, True
        if take_a:
            ra += 1
            while si < n_spans and ra >= a_spans[si, 1]:
                si += 1
                if si < n_spans:
                    ra = a_spans[si, 0]
        if take_b:
            q += 1
        if status == 3 and not keep_unchanged:
            continue
        kept += 1
        d = bb - ba
        if d > 0:
            pos += 1
        elif d < 0:
            neg += 1
        if not write:
            continue
        if d == 0:
            o = at + n_pos + zero
            if o < 0 or o >= len(joint_out):
                return bad
            joint_out[o] = joint
            status_out[o] = status
            block[0, o], block[1, o], block[2, o] = ea, eb, eb - ea
            block[3, o], block[4, o], block[5, o] = ba, bb, 0
            zero += 1
        else:
            if nz >= nonzero.shape[0]:
                return bad
            nonzero[nz, 0], nonzero[nz, 1], nonzero[nz, 2] = joint, status, ea
            nonzero[nz, 3], nonzero[nz, 4], nonzero[nz, 5] = eb, ba, bb
            nz += 1
    return kept, pos, neg


@_jit
def first_at_least(order_b, b_codes, tr, cut):
    """The first position ``q`` of ``order_b`` (:func:`b_order`, rising joint codes) whose key's
    joint code is at least ``cut`` (a binary search); -1 for rows or codes out of range."""
    lo, hi = 0, len(order_b)
    while lo < hi:
        mid = (lo + hi) // 2
        r = order_b[mid]
        if r < 0 or r >= len(b_codes) or b_codes[r] < 0 or b_codes[r] >= len(tr):
            return -1
        if tr[b_codes[r]] < cut:
            lo = mid + 1
        else:
            hi = mid
    return lo


@_jit
def place_nonzero(nonzero, at, kept, block, status_out, joint_out):
    """The rows of ``nonzero`` (:func:`merge_state`) to their output rows: rising ``bytes_delta``
    first from ``at``, falling ones last before ``at + kept``, each group by falling delta, ties
    in joint order (``np.argsort(-delta, kind="stable")`` of the state's rows)."""
    m = nonzero.shape[0]
    delta = np.empty(m, dtype=np.int64)
    npos = 0
    for r in range(m):
        delta[r] = nonzero[r, 5] - nonzero[r, 4]
        if delta[r] > 0:
            npos += 1
    by = np.argsort(-delta, kind="mergesort")
    if at < 0 or at + kept > len(joint_out) or m > kept:
        return False
    for t in range(m):
        r = by[t]
        o = at + t if t < npos else at + kept - (m - t)
        joint_out[o] = nonzero[r, 0]
        status_out[o] = nonzero[r, 1]
        ea, eb, ba, bb = nonzero[r, 2], nonzero[r, 3], nonzero[r, 4], nonzero[r, 5]
        block[0, o], block[1, o], block[2, o] = ea, eb, eb - ea
        block[3, o], block[4, o], block[5, o] = ba, bb, bb - ba
    return True


@_jit
def gather_strings(joint, na, off_a, data_a, off_b, data_b, new_from_b):
    """The bytes of the keys of joint codes ``joint`` (below ``na``: a's key, else b's key
    ``new_from_b[code - na]``) as ``(offsets int64, data, ok)``."""
    m = len(joint)
    offsets = np.zeros(m + 1, dtype=np.int64)
    nb = len(off_b) - 1
    fail = (offsets, np.zeros(0, dtype=np.uint8), False)
    if na < 0 or len(off_a) < na + 1:
        return fail
    total = 0
    for r in range(m):
        c = joint[r]
        if c < 0:
            return fail
        if c < na:
            s, e, n = off_a[c], off_a[c + 1], len(data_a)
        else:
            c -= na
            if c >= len(new_from_b) or new_from_b[c] < 0 or new_from_b[c] >= nb:
                return fail
            s, e, n = off_b[new_from_b[c]], off_b[new_from_b[c] + 1], len(data_b)
        if s < 0 or e < s or e > n:
            return fail
        total += e - s
        offsets[r + 1] = total
    data = np.empty(total, dtype=np.uint8)
    for r in range(m):
        c = joint[r]
        o = np.uint64(offsets[r])
        if c < na:
            s, e = np.uint64(off_a[c]), np.uint64(off_a[c + 1])
            for x in range(e - s):  # byte by byte: faster here than unaligned 8-byte stores
                data[o + x] = data_a[s + x]
        else:
            j = new_from_b[c - na]
            s, e = np.uint64(off_b[j]), np.uint64(off_b[j + 1])
            for x in range(e - s):
                data[o + x] = data_b[s + x]
    return offsets, data, True


@_jit
def pandas_mix(vals, out):
    """``out``: :func:`pandas.util.hash_array` of numbers already turned into uint64 ``vals`` (its
    finalizer: SplitMix64's without its first add, as :func:`._hashing.splitmix64`), in one pass instead of five NumPy ones."""
    for i in range(len(vals)):
        x = vals[i]
        x ^= x >> np.uint64(30)
        x *= _M2
        x ^= x >> np.uint64(27)
        x *= _M3
        x ^= x >> np.uint64(31)
        out[i] = x


def warm() -> None:
    """Compile (or load from numba's cache) every signature the diff and the key numbering pass these
    kernels, on tiny arrays of the same types (:func:`explorer.kernels.warm`, at install): string keys'
    offsets int32 (Arrow ``string``, ``binary``) or int64 (``large_string``; integer keys as 8-byte words,
    their bytes a read-only Arrow buffer), entry sizes int64 or float64, b's rows int32 or int64."""
    i64 = np.zeros(0, dtype=np.int64)
    u64 = np.zeros(2, dtype=np.uint64)
    spans = np.zeros((1, 2), dtype=np.int64)
    for off_type, readonly in ((np.int32, False), (np.int64, False), (np.int64, True)):
        off = np.array([0, 1, 2], dtype=off_type)
        data = np.zeros(2, dtype=np.uint8)
        data.flags.writeable = not readonly
        tr = np.full(2, -1, dtype=np.int64)
        found = np.zeros(2, dtype=bool)
        slices = np.array([[0, 1, 0, 1], [1, 1, 1, 1], [1, 2, 1, 2], [2, 2, 2, 2]], dtype=np.int64)
        for some in (slices, slices[0::2]):  # (the slices; or every other one, a strided view, per thread)
            join_slices(u64, u64, off, data, off, data, some, tr, found, 1 << 16)
        join_rows(u64, u64, off, data, off, data, np.arange(2), np.arange(2), tr.copy(), found.copy(), 1 << 16)
        if readonly:  # (integer keys: joined, never hashed or gathered as strings)
            continue
        hash_strings(off, data, u64.copy())
        for off_b, data_b in ((off, data), (np.zeros(1, np.int64), np.zeros(0, np.uint8))):  # (no b segment)
            gather_strings(np.zeros(1, dtype=np.int64), 2, off, data, off_b, data_b, i64)
    codes = np.zeros(2, dtype=np.int64)
    rising(codes, spans, 1)
    for size in (np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.float64)):
        side_sums(codes, u64, size, spans, 1, size[:0])
    for row_kind in (np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)):
        b_order(codes, spans, np.zeros(1, dtype=np.int64), 1, row_kind)
    block, status, joint = np.zeros((6, 0), dtype=np.int64), np.zeros(0, dtype=np.int8), np.zeros(0, dtype=np.int64)
    nonzero = np.zeros((0, 6), dtype=np.int64)
    merge_state(codes, i64, codes, u64, spans, codes, i64, codes, u64, i64, codes, True, False, 0, 0, block, status,
                joint, nonzero)
    first_at_least(i64, codes, codes, 0)
    place_nonzero(nonzero, 0, 0, block, status, joint)
    ro = np.zeros(1, dtype=np.uint64)
    ro.flags.writeable = False  # (a zero-copy view of an Arrow column)
    for vals in (ro, np.zeros(1, dtype=np.uint64)):
        pandas_mix(vals, np.empty(1, dtype=np.uint64))
