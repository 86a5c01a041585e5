"""Diff of two snapshots: keys added, removed and changed, and growth per key and per state.

A key's content in one state is the set of its entries ``(namespace, user_key,
value)``; each entry is hashed (``pandas.util.hash_array``; values that are
dicts or lists hash through ``str``) and a key's fingerprint is the wrapping
sum of its entries' hashes. Two snapshots' keys are matched by value after a
joint :func:`pandas.factorize`, so no Python loop runs per key. For two
Snapshots the same runs over their cached analysis columns: entries hashed
column-wise in Arrow (:func:`._columns.arrow_hash`), the two Arrow key
dictionaries joined by sorting 64-bit key hashes slice by slice of key groups
and checking every match exactly (:func:`_joint_by_hash`), per-key sums run
by run (:func:`_side_keys`), NumPy's loops split over two threads. A key is

* ``added``: in ``b`` only; ``removed``: in ``a`` only;
* ``changed``: in both with a different fingerprint or entry count;
* ``unchanged``: otherwise (last-access times alone do not count as a change).
"""

from __future__ import annotations

import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ._columns import KeyValues, cached_frame, positions, row_hashes, state_rows
from ._common import Source, factorize_keys, first_occurrences, frame, is_snapshot
from ._hashing import string_buffers, word_views

DIFF_COLUMNS = ["operator", "state", "key", "status", "entries_a", "entries_b", "entries_delta", "bytes_a",
                "bytes_b", "bytes_delta"]
STATUSES = ("added", "removed", "changed", "unchanged")

_COLUMNS = ("operator", "state", "kind", "key", "namespace", "user_key", "value", "size_bytes")
_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xC2B2AE3D27D4EB4F)


def _hash(col: pd.Series) -> np.ndarray:
    arr = col.to_numpy()
    try:
        return pd.util.hash_array(arr, categorize=False)
    except TypeError:
        return pd.util.hash_array(col.map(repr).to_numpy(dtype=object), categorize=False)


def _row_hashes(df: pd.DataFrame) -> np.ndarray:
    with np.errstate(over="ignore"):
        return _hash(df["value"]) * _M1 + _hash(df["user_key"]) * _M2 + _hash(df["namespace"])


def diff(a: Source, b: Source, *, operator: str | Iterable[str] | None = None,
         state: str | Iterable[str] | None = None, unchanged: bool = True) -> pd.DataFrame:
    """Per (operator, state, key): status and growth from snapshot ``a`` to snapshot ``b``.

    Columns: ``operator, state, key, status, entries_a, entries_b, entries_delta,``
    ``bytes_a, bytes_b, bytes_delta``; sorted by operator, state and falling ``bytes_delta``;
    ``status`` is a Categorical of :data:`STATUSES`.
    ``unchanged=False`` leaves the unchanged keys out.
    """
    if is_snapshot(a) and is_snapshot(b) and hasattr(a, "reader") and hasattr(b, "reader"):
        return _diff_snapshots(a, b, operator, state, unchanged)
    fa = frame(a, _COLUMNS, operator, state)
    fb = frame(b, _COLUMNS, operator, state)
    both = pd.concat([fa, fb], ignore_index=True)
    side = np.concatenate([np.zeros(len(fa), np.int8), np.ones(len(fb), np.int8)])
    if not len(both):
        return pd.DataFrame({c: pd.Series(dtype=object) for c in DIFF_COLUMNS})
    key_codes, keys = factorize_keys(both["key"])
    os_codes, os_uniques = pd.factorize(pd.MultiIndex.from_arrays([both["operator"], both["state"]]))
    group, _ = pd.factorize(os_codes.astype(np.int64) * (len(keys) + 1) + key_codes)
    n = int(group.max()) + 1
    first = first_occurrences(group)
    h = _row_hashes(both)
    size = both["size_bytes"].to_numpy(dtype=np.float64)
    ent, byt, fp = [], [], []
    for s in (0, 1):
        sel = side == s
        g = group[sel]
        ent.append(np.bincount(g, minlength=n).astype(np.int64))
        byt.append(np.rint(np.bincount(g, weights=size[sel], minlength=n)).astype(np.int64))
        fp.append(_group_sums(g, h[sel], n))
    in_a, in_b = ent[0] > 0, ent[1] > 0
    status = np.where(~in_a, "added", np.where(~in_b, "removed",
                      np.where((fp[0] != fp[1]) | (ent[0] != ent[1]), "changed", "unchanged")))
    ops = np.array([t[0] for t in os_uniques], dtype=object)
    sts = np.array([t[1] for t in os_uniques], dtype=object)
    out = pd.DataFrame({
        "operator": ops[os_codes[first]], "state": sts[os_codes[first]], "key": keys[key_codes[first]],
        "status": status, "entries_a": ent[0], "entries_b": ent[1], "entries_delta": ent[1] - ent[0],
        "bytes_a": byt[0], "bytes_b": byt[1], "bytes_delta": byt[1] - byt[0],
    })
    if not unchanged:
        out = out[out["status"] != "unchanged"]
    out = out.sort_values(["operator", "state", "bytes_delta"], ascending=[True, True, False], kind="stable")
    out["status"] = pd.Categorical(out["status"], categories=list(STATUSES))
    return out.reset_index(drop=True)[DIFF_COLUMNS]


def _joint_codes(kva: KeyValues, kvb: KeyValues, groups=None) -> tuple[np.ndarray, np.ndarray]:
    """Map b's key codes into a's code space; b-only keys get codes after a's.

    Returns ``(translation, new_from_b)``: ``translation[code_b]`` is the joint code and
    ``new_from_b[j]`` the b code of joint code ``len(kva) + j``. Kept on ``kva`` for as long
    as ``kvb`` lives (a second diff of the same snapshots, filtered, does not join again).
    ``groups``: called (only when the join is computed) for each side's key group per code,
    which makes the join faster (:func:`_joint_by_hash`).
    """
    kept = kva.joins.get(id(kvb))
    if kept is not None and kept[0]() is kvb:
        return kept[1]
    out = _joint_codes_of(kva, kvb, *(groups() if groups is not None else (None, None)))
    kva.joins = {k: v for k, v in kva.joins.items() if v[0]() is not None}
    kva.joins[id(kvb)] = (weakref.ref(kvb), out)
    return out


def _joint_codes_of(kva: KeyValues, kvb: KeyValues, groups_a: np.ndarray | None = None,
                    groups_b: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    tr = _joint_by_hash(kva, kvb, groups_a, groups_b)
    if tr is None:
        tr = _joint_by_lookup(kva, kvb)
    new = np.flatnonzero(tr < 0)
    tr[new] = len(kva) + np.arange(len(new))
    return tr, new


def _joint_by_lookup(kva: KeyValues, kvb: KeyValues) -> np.ndarray:
    """b code -> a code (-1: not in a), looking b's keys up in a's (Arrow hash tables)."""
    tr = np.full(len(kvb), -1, dtype=np.int64)
    for off_b, seg_b in zip(kvb.offsets[:-1], kvb.segments):
        for off_a, seg_a in zip(kva.offsets[:-1], kva.segments):
            if isinstance(seg_b, np.ndarray) or isinstance(seg_a, np.ndarray):
                if isinstance(seg_b, np.ndarray) and isinstance(seg_a, np.ndarray):
                    found = pd.Index(seg_a).get_indexer(seg_b)
                else:
                    continue
            else:
                if seg_a.type != seg_b.type:
                    continue
                where = pc.index_in(seg_b, value_set=seg_a)
                found = where.fill_null(-1).to_numpy(zero_copy_only=False)
            hit = found >= 0
            sl = tr[off_b: off_b + len(seg_b)]
            sl[hit & (sl < 0)] = off_a + found[hit & (sl < 0)]
    return tr


def _joint_by_hash(kva: KeyValues, kvb: KeyValues, groups_a: np.ndarray | None = None,
                   groups_b: np.ndarray | None = None) -> np.ndarray | None:
    """b code -> a code (-1: not in a) by sorting both sides' 64-bit key hashes (:func:`_sort_join`).

    None when the keys are not one Arrow array of strings or integers of the same type on
    both sides (then :func:`_joint_by_lookup`).

    ``groups_a``/``groups_b``, when given, hold a group number per code (the key group of
    the key's rows): if both rise with the codes (keys are coded in the order rows are
    written, key group by key group), the codes are cut into slices of whole groups and each
    slice of a is joined with b's slice of the same groups. A slice fits in the CPU cache,
    where its sort and its scatters are several times faster than over 10 M keys at once.
    Keys left unmatched on both sides are then joined again all together, so a key whose
    group differs between the sides (another max parallelism) is still found: the groups
    decide only how fast the join is, never its answer.
    """
    if len(kva.segments) != 1 or len(kvb.segments) != 1:
        return None
    seg_a, seg_b = kva.segments[0], kvb.segments[0]
    if isinstance(seg_a, np.ndarray) or isinstance(seg_b, np.ndarray) or seg_a.type != seg_b.type:
        return None
    ha, hb = _both_hashes(kva, kvb)
    if ha is None or hb is None:
        return None
    na, nb = len(ha), len(hb)
    if int(na + nb - 1).bit_length() > 40:  # fewer than 24 hash bits left in the packed values
        return None
    tr = np.full(nb, -1, dtype=np.int64)
    if not na or not nb:
        return tr
    slices = _slices(groups_a, groups_b, na, nb)
    words = _fixed_width_words(seg_a, seg_b)

    def join(some: list[tuple[int, int, int, int]]) -> list[np.ndarray]:
        """Join these slices; a's codes left unmatched in each."""
        left = []
        for a0, a1, b0, b1 in some:
            if a1 > a0 and b1 > b0:
                _sort_join(ha[a0:a1], hb[b0:b1], seg_a, seg_b, a0, b0, tr[b0:b1], words)
            t = tr[b0:b1]
            found = np.zeros(a1 - a0, dtype=bool)
            found[t[t >= 0] - a0] = True
            left.append(np.flatnonzero(~found) + a0)
        return left

    if len(slices) > 1:  # slices write to their own parts of tr: half of them on a second thread
        left = [x for half in _both(lambda: join(slices[0::2]), lambda: join(slices[1::2])) for x in half]
        # keys whose groups differ between the sides: join what is left, all together
        lb = np.flatnonzero(tr < 0)
        la = np.sort(np.concatenate(left))
        if len(la) and len(lb):
            sub = np.full(len(lb), -1, dtype=np.int64)
            _sort_join(ha[la], hb[lb], seg_a.take(pa.array(la)), seg_b.take(pa.array(lb)), 0, 0, sub)
            hit = np.flatnonzero(sub >= 0)
            tr[lb[hit]] = la[sub[hit]]
    else:
        join(slices)
    return tr


_SLICE_KEYS = 1 << 17
_IN_ORDER_KEYS = 1 << 20


def _slices(groups_a: np.ndarray | None, groups_b: np.ndarray | None, na: int,
            nb: int) -> list[tuple[int, int, int, int]]:
    """``(a0, a1, b0, b1)`` code ranges of whole groups, about ``_SLICE_KEYS`` codes of a each
    (one range of everything when the groups are not given or do not rise with the codes)."""
    whole = [(0, na, 0, nb)]
    if groups_a is None or groups_b is None or na <= _SLICE_KEYS:
        return whole
    if not (bool((groups_a[1:] >= groups_a[:-1]).all()) and bool((groups_b[1:] >= groups_b[:-1]).all())):
        return whole
    cuts = np.unique(groups_a[np.arange(_SLICE_KEYS, na, _SLICE_KEYS)])
    cuts = cuts[cuts > groups_a[0]]
    ea = np.concatenate([[0], np.searchsorted(groups_a, cuts), [na]])
    eb = np.concatenate([[0], np.searchsorted(groups_b, cuts), [nb]])
    return [(int(ea[i]), int(ea[i + 1]), int(eb[i]), int(eb[i + 1])) for i in range(len(ea) - 1)]


def _sort_join(ha: np.ndarray, hb: np.ndarray, seg_a: pa.Array, seg_b: pa.Array, a0: int, b0: int,
               out: np.ndarray, words: tuple | None = None) -> None:
    """``out[j] = a0 + i`` where key ``seg_b[b0 + j]`` equals ``seg_a[a0 + i]`` (``ha``, ``hb``
    their hashes), by one sort of both sides' hashes.

    Each side's hash is packed with its row number (the hash's low bits give way to it) and
    the packed values of both sides are sorted together: a key in both sides is a run of two
    equal hash prefixes, one from each side. Such a pair is matched only if the two keys
    compare equal (:func:`_equal_keys`): a hash collision never matches two different keys.
    The rare runs of three or more (prefix collisions) are matched by exact lookup.
    """
    na, nb = len(ha), len(hb)
    bits = int(na + nb - 1).bit_length()
    low = np.uint64((1 << bits) - 1)
    packed = np.empty(na + nb, dtype=np.uint64)
    np.bitwise_and(ha, ~low, out=packed[:na])
    np.bitwise_and(hb, ~low, out=packed[na:])
    packed |= np.arange(na + nb, dtype=np.uint64)
    packed.sort()
    same = packed[1:] ^ packed[:-1]
    same = same <= low  # neighbours with the same hash prefix
    clean = same.copy()  # runs of exactly two
    clean[1:] &= ~same[:-1]
    clean[:-1] &= ~same[1:]
    i = np.flatnonzero(clean)
    multi = np.zeros(0, dtype=np.int64)
    if int(np.count_nonzero(same)) != len(i):  # prefixes shared by three or more keys
        np.logical_not(clean, out=clean)
        clean &= same
        multi = np.flatnonzero(clean)
    del clean, same
    # within a run the low bits (row numbers) sort a's row before b's
    first, second = packed[i], packed[1:][i]
    first &= low
    second &= low
    cross = first < np.uint64(na)
    cross &= second >= np.uint64(na)
    if not bool(cross.all()):  # two keys of one side in a run (a collision): not a pair
        first, second = first[cross], second[cross]
    ia = first.astype(np.int64)
    ib = second.astype(np.int64)
    ib -= na
    del first, second, cross, i
    if len(ia):
        if nb > _IN_ORDER_KEYS:  # b in order, a nearly so: the takes below read memory in order
            cand = np.full(nb, -1, dtype=np.int64)
            cand[ib] = ia
            ib = np.flatnonzero(cand >= 0)
            ia = cand[ib]
            del cand
        if words is not None:  # this slice's words, contiguous (the views' strided, unaligned reads are slow)
            local = ([np.ascontiguousarray(w[a0: a0 + na]) for w in words[0]],
                     [np.ascontiguousarray(w[b0: b0 + nb]) for w in words[1]])
            equal = _equal_keys(seg_a, seg_b, ia, ib, local)
            ia += a0
        else:
            ia += a0
            equal = _equal_keys(seg_a, seg_b, ia, ib + b0)
        if bool(equal.all()):
            out[ib] = ia
        else:
            out[ib[equal]] = ia[equal]
    if len(multi):  # exact lookup of just those keys
        r = (packed[np.unique(np.concatenate([multi, multi + 1]))] & low).astype(np.int64)
        sa_, sb_ = r[r < na] + a0, r[r >= na] - na
        if len(sa_) and len(sb_):
            found = pc.index_in(seg_b.take(pa.array(sb_ + b0)), value_set=seg_a.take(pa.array(sa_)))
            f = found.fill_null(-1).to_numpy(zero_copy_only=False)
            out[sb_[f >= 0]] = sa_[f[f >= 0]]


def _both_hashes(kva: KeyValues, kvb: KeyValues) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Both sides' key hashes, b's on a second thread when neither is kept yet."""
    if kva is kvb or kva.has_hash64() or kvb.has_hash64():
        return kva.hash64(), kvb.hash64()
    return _both(kva.hash64, kvb.hash64)


def _both(f, g) -> tuple:
    """``(f(), g())``, ``g`` on a second thread: NumPy and Arrow release the GIL in their loops,
    so two halves of the work run side by side on two cores."""
    with ThreadPoolExecutor(1, thread_name_prefix="diff") as pool:
        later = pool.submit(g)
        return f(), later.result()


def _equal_keys(seg_a: pa.Array, seg_b: pa.Array, ia: np.ndarray, ib: np.ndarray,
                words: tuple | None = None) -> np.ndarray:
    """``seg_a[ia] == seg_b[ib]`` elementwise (bool array), exactly.

    ``words``: both sides' :func:`_fixed_width_words` (strings of one width, the same on both
    sides): then the keys are equal exactly when all their 8-byte words are, compared in NumPy
    without copying any string; otherwise Arrow takes both sides' keys and compares them.
    """
    if words is not None:
        wa, wb = words
        eq = wa[0][ia] == wb[0][ib]
        for x, y in zip(wa[1:], wb[1:]):
            eq &= x[ia] == y[ib]
        return eq
    return pc.equal(seg_a.take(pa.array(ia)), seg_b.take(pa.array(ib))).to_numpy(zero_copy_only=False)


def _fixed_width_words(seg_a: pa.Array, seg_b: pa.Array) -> tuple | None:
    """Both sides' strings as 8-byte word views (:func:`._hashing.word_views`) when every
    string of both has one width of at least 8 bytes and there are no nulls; else None."""
    views = []
    width = None
    for seg in (seg_a, seg_b):
        t = seg.type
        if seg.null_count or not (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t)
                                  or pa.types.is_large_binary(t)) or not len(seg):
            return None
        offsets, data = string_buffers(seg)
        w = int(offsets[1] - offsets[0])
        if w < 8 or (width is not None and w != width) or int(offsets[-1] - offsets[0]) != w * len(seg):
            return None
        if not bool((np.diff(offsets) == w).all()):
            return None
        width = w
        views.append(word_views(data[int(offsets[0]): int(offsets[-1])].reshape(len(seg), w), w))
    return views[0], views[1]


def _side_keys(codes: np.ndarray, rows: np.ndarray | slice | list, h: np.ndarray, size: np.ndarray,
               n_codes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per key of one state on one side: ``(codes, entries, bytes, fingerprint)``.

    The fingerprint is the wrapping uint64 sum of the key's entry hashes. The usual
    layouts need no per-key scatter: a state with one entry per key whose codes rise
    (a value state: keys are coded in the order they first appear) is its own answer, and
    a state whose keys' entries are consecutive rows with rising codes (a list or map
    state, written key by key) is summed run by run (``np.add.reduceat``). Anything else
    is summed per code (``np.bincount``; 32-bit halves in float64, exact below 2**21
    entries per key).
    """
    c, hr, sz = (_rows_of(x, rows) for x in (codes, h, size))
    if not len(c):
        return c, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), hr
    if len(c) == 1 or bool((c[1:] > c[:-1]).all()):  # one entry per key (a read-only run of ones)
        return c, np.broadcast_to(np.int64(1), (len(c),)), _int64(sz), hr
    starts = np.flatnonzero(c[1:] != c[:-1])
    starts += 1
    starts = np.concatenate([np.zeros(1, dtype=starts.dtype), starts])
    run_keys = c[starts]
    if len(run_keys) == 1 or bool((run_keys[1:] > run_keys[:-1]).all()):
        entries = np.diff(np.append(starts, len(c))).astype(np.int64)
        if np.issubdtype(sz.dtype, np.integer):
            byt = np.add.reduceat(sz.astype(np.int64, copy=False), starts)
        else:
            byt = np.rint(np.add.reduceat(sz.astype(np.float64), starts)).astype(np.int64)
        with np.errstate(over="ignore"):
            fp = np.add.reduceat(hr, starts)
        return run_keys, entries, byt, fp
    counts = np.bincount(c, minlength=n_codes)
    present = np.flatnonzero(counts)
    lo = np.bincount(c, weights=(hr & np.uint64(0xFFFFFFFF)).astype(np.float64), minlength=n_codes)[present]
    hi = np.bincount(c, weights=(hr >> np.uint64(32)).astype(np.float64), minlength=n_codes)[present]
    fp = lo.astype(np.uint64) + (hi.astype(np.uint64) << np.uint64(32))
    return (present, counts[present].astype(np.int64),
            np.rint(np.bincount(c, weights=sz.astype(np.float64), minlength=n_codes)[present]).astype(np.int64), fp)


def _rows_of(x: np.ndarray, rows: np.ndarray | slice | list) -> np.ndarray:
    """``x[rows]``; ``rows`` may be a list of ``(lo, hi)`` spans (copied slice by slice, much
    faster than gathering 10 M positions)."""
    if isinstance(rows, list):
        return x[rows[0][0]: rows[0][1]] if len(rows) == 1 else np.concatenate([x[lo:hi] for lo, hi in rows])
    return x[rows]


def _int64(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int64, copy=False) if np.issubdtype(x.dtype, np.integer) else np.rint(x).astype(np.int64)


def _falling(delta: np.ndarray) -> np.ndarray:
    """``np.argsort(-delta, kind="stable")`` without sorting the zeros (most keys of a diff)."""
    pos = np.flatnonzero(delta > 0)
    neg = np.flatnonzero(delta < 0)
    if not len(pos) and not len(neg):
        return np.arange(len(delta))
    return np.concatenate([pos[np.argsort(-delta[pos], kind="stable")], np.flatnonzero(delta == 0),
                           neg[np.argsort(-delta[neg], kind="stable")]])


def _is_range(x: np.ndarray, n: int) -> bool:
    """Whether ``x`` is ``0, 1, ..., n - 1``."""
    return len(x) == n and (n == 0 or (int(x[0]) == 0 and int(x[-1]) == n - 1 and bool((x[1:] > x[:-1]).all())))


def _state_diff(sa: tuple, sb: tuple, tr: np.ndarray, k: int, n_a: int, unchanged: bool) -> tuple[np.ndarray, ...]:
    """One state's rows of the diff: ``(joint codes, order, status codes, entries_a, entries_b,
    bytes_a, bytes_b)`` from each side's :func:`_side_keys` and the key join ``tr``; the joint
    codes are in output order, the other columns are listed in output order by ``order``.

    The keys of the state (either side) are numbered in joint-code order: all ``k`` joint
    codes when the state holds nearly every key (no renumbering), else by a sort of its few
    keys. Each output column is then one scatter per side and one gather in output order.
    """
    ja, jb = sa[0], tr[sb[0]]
    if len(ja) + len(jb) < k // 8:  # a state of few keys: number just them
        present = np.unique(np.concatenate([ja, jb]))
        ia, ib = np.searchsorted(present, ja), np.searchsorted(present, jb)
    elif _is_range(ja, n_a) and int(np.count_nonzero(jb >= n_a)) == k - n_a:
        present, ia, ib = None, slice(0, n_a), jb  # a's keys in order, then b's new ones: all k
    else:
        mask = np.zeros(k, dtype=bool)
        mask[ja] = True
        mask[jb] = True
        if bool(mask.all()):
            present, ia, ib = None, ja, jb
        else:
            present = np.flatnonzero(mask)
            rank = np.cumsum(mask, dtype=np.int64)
            rank -= 1
            ia, ib = rank[ja], rank[jb]
            del rank
        del mask
    n = k if present is None else len(present)

    def dense(side: tuple, at: np.ndarray | slice) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ent, byt, fp = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.uint64)
        ent[at], byt[at], fp[at] = side[1], side[2], side[3]
        return ent, byt, fp

    (ent_a, byt_a, fp_a), (ent_b, byt_b, fp_b) = _both(lambda: dense(sa, ia), lambda: dense(sb, ib))
    code = np.empty(n, dtype=np.int8)
    delta = np.empty(n, dtype=np.int64)

    def status(lo: int, hi: int) -> None:  # elementwise: each half of the keys on its own thread
        same = fp_a[lo:hi] == fp_b[lo:hi]
        same &= ent_a[lo:hi] == ent_b[lo:hi]  # never true for a key on one side only (0 entries on the other)
        c = code[lo:hi]
        np.add(same.view(np.int8), np.int8(2), out=c)  # changed 2, unchanged 3
        c[ent_b[lo:hi] == 0] = 1  # removed
        c[ent_a[lo:hi] == 0] = 0  # added
        np.subtract(byt_b[lo:hi], byt_a[lo:hi], out=delta[lo:hi])

    half = n // 2
    if n >= _THREAD_ROWS:
        _both(lambda: status(0, half), lambda: status(half, n))
    else:
        status(0, n)
    del fp_a, fp_b
    if unchanged:
        order = _falling(delta)
    else:
        keep = np.flatnonzero(code != 3)
        order = keep[_falling(delta[keep])]
    joint = order if present is None else present[order]
    return joint, order, code, ent_a, ent_b, byt_a, byt_b


_THREAD_ROWS = 1 << 18
_INT_COLUMNS = ["entries_a", "entries_b", "entries_delta", "bytes_a", "bytes_b", "bytes_delta"]


def _diff_snapshots(a, b, operator, state, unchanged: bool) -> pd.DataFrame:
    """:func:`diff` of two Snapshots over their cached analysis columns and Arrow row hashes.

    The ``key`` column holds Python objects, as in :meth:`~explorer.snapshot.Snapshot.keyed_state`
    and in the diff of two DataFrames (the two paths give equal frames); they are made only
    for the rows listed, in Arrow. At 10 M keys listed that is most of the time of a diff
    with ``unchanged=True``.
    """
    fa, fb = cached_frame(a, operator, state), cached_frame(b, operator, state)
    kva, kvb = fa.attrs["key_values"], fb.attrs["key_values"]
    pa_, pb_ = positions(a, operator, state), positions(b, operator, state)
    ha, hb = row_hashes(a), row_hashes(b)
    ha = ha if pa_ is None else ha[pa_]
    hb = hb if pb_ is None else hb[pb_]
    tr, new_from_b = _joint_codes(kva, kvb, lambda: _key_group_per_code(a, b, kva, kvb))
    codes_a = fa["key"].to_numpy(dtype=np.int64)
    codes_b = fb["key"].to_numpy(dtype=np.int64)
    na = len(kva)
    k = na + len(new_from_b)
    rows_a, rows_b = _spans_by_state(fa), _spans_by_state(fb)
    size_a, size_b = fa["size_bytes"].to_numpy(), fb["size_bytes"].to_numpy()
    empty = (np.zeros(0, dtype=np.int64),) * 3 + (np.zeros(0, dtype=np.uint64),)
    names = sorted(set(rows_a) | set(rows_b))
    sides_a, sides_b = _both(  # each side's per-key sums, the two sides side by side
        lambda: [_side_keys(codes_a, rows_a[n], ha, size_a, na) if n in rows_a else empty for n in names],
        lambda: [_side_keys(codes_b, rows_b[n], hb, size_b, len(kvb)) if n in rows_b else empty for n in names])
    parts = []
    for (op, st), sa, sb in zip(names, sides_a, sides_b):
        parts.append((op, st) + _state_diff(sa, sb, tr, k, na, unchanged))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in DIFF_COLUMNS})
    total = sum(len(p[2]) for p in parts)
    block = np.empty((len(_INT_COLUMNS), total), dtype=np.int64)  # the six int columns, one pandas block
    status = np.empty(total, dtype=np.int8)
    ops = np.empty(total, dtype=object)
    sts = np.empty(total, dtype=object)
    at = 0
    for op, st, joint, order, code, ent_a, ent_b, byt_a, byt_b in parts:
        sl = slice(at, at + len(joint))
        ops[sl] = op
        sts[sl] = st
        # straight into the block: one pass per column (mode="clip": with out=, "raise" buffers a copy)
        np.take(code, order, out=status[sl], mode="clip")
        for row, col in ((0, ent_a), (1, ent_b), (3, byt_a), (4, byt_b)):
            np.take(col, order, out=block[row, sl], mode="clip")
        at += len(joint)
    np.subtract(block[1], block[0], out=block[2])
    np.subtract(block[4], block[3], out=block[5])
    keys = _keys_of(np.concatenate([p[2] for p in parts]), kva, kvb, new_from_b)
    out = pd.DataFrame(block.T, columns=_INT_COLUMNS, copy=False)
    out.insert(0, "status", pd.Categorical.from_codes(status, categories=list(STATUSES)))
    out.insert(0, "key", keys)
    out.insert(0, "state", sts)
    out.insert(0, "operator", ops)
    return out


def _spans_by_state(df: pd.DataFrame) -> dict[tuple[str, str], list[tuple[int, int]] | np.ndarray | slice]:
    """Rows of each ``(operator, state)`` of a cached frame: its pieces' ``(lo, hi)`` spans
    (:func:`._columns.state_rows` positions for any other frame)."""
    spans = df.attrs.get("spans")
    if spans is None or spans[0] != len(df):
        return {(op, st): rows for op, st, rows in state_rows(df)}
    out: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for op, st, lo, hi in spans[1]:
        out.setdefault((str(op), str(st)), []).append((lo, hi))
    return out


def _key_group_per_code(a, b, kva: KeyValues, kvb: KeyValues) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The key group of each key code's rows on each side (for :func:`_slices`; None without
    a key group column). A key whose rows disagree gets one of their groups: the join's answer
    does not depend on them."""
    out = []
    for snap, kv in ((a, kva), (b, kvb)):
        f = cached_frame(snap)
        if "key_group" not in f.columns or not len(kv) or not np.issubdtype(f["key_group"].dtype, np.integer):
            return None, None
        out.append((f["key"].to_numpy(dtype=np.int64), f["key_group"].to_numpy(), len(kv)))

    def per_code(codes: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
        g = np.zeros(n, dtype=np.int32)
        g[codes] = groups
        return g

    return _both(lambda: per_code(*out[0]), lambda: per_code(*out[1]))


def _keys_of(joint: np.ndarray, kva: KeyValues, kvb: KeyValues, new_from_b: np.ndarray) -> np.ndarray:
    """The keys of joint codes ``joint`` as an object array, in that order.

    When most keys are listed and both sides' keys are one Arrow array of strings of one
    type, a's keys followed by b's new ones are the joint dictionary and Arrow makes each
    Python str once, straight into the array returned (no second pass over millions of
    objects to copy them in place).
    """
    na = len(kva)
    segs = kva.segments + kvb.segments
    if len(joint) > na // 4 and len(segs) == 2 and not any(isinstance(x, np.ndarray) for x in segs) \
            and segs[0].type == segs[1].type and (pa.types.is_string(segs[0].type)
                                                  or pa.types.is_large_string(segs[0].type)):
        joint_dict = pa.concat_arrays([segs[0], segs[1].take(pa.array(new_from_b, type=pa.int64()))])
        return joint_dict.take(pa.array(joint, type=pa.int64())).to_numpy(zero_copy_only=False)
    out = np.empty(len(joint), dtype=object)
    from_a = joint < na
    ia = np.flatnonzero(from_a)
    out[ia] = kva.take(joint[ia])
    ib = np.flatnonzero(~from_a)
    out[ib] = kvb.take(new_from_b[joint[ib] - na])
    return out


def _group_sums(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Wrapping uint64 sums of ``values`` per group (0 for empty groups)."""
    out = np.zeros(n, dtype=np.uint64)
    if not len(group):
        return out
    order = np.argsort(group, kind="stable")
    g = group[order]
    starts = np.flatnonzero(np.concatenate([[True], g[1:] != g[:-1]]))
    with np.errstate(over="ignore"):
        out[g[starts]] = np.add.reduceat(values[order], starts)
    return out


def diff_summary(d: pd.DataFrame) -> pd.DataFrame:
    """Per (operator, state) of a :func:`diff`: keys added/removed/changed/unchanged and growth.

    Columns: ``operator, state, keys_added, keys_removed, keys_changed, keys_unchanged,``
    ``entries_a, entries_b, entries_growth, bytes_a, bytes_b, bytes_growth, growth_pct``.
    """
    counts = pd.crosstab([d["operator"], d["state"]], d["status"]).reindex(columns=list(STATUSES), fill_value=0)
    counts.columns = [f"keys_{c}" for c in counts.columns]
    sums = d.groupby(["operator", "state"], observed=True)[["entries_a", "entries_b", "bytes_a", "bytes_b"]].sum()
    out = counts.join(sums).reset_index()
    out["entries_growth"] = out["entries_b"] - out["entries_a"]
    out["bytes_growth"] = out["bytes_b"] - out["bytes_a"]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["growth_pct"] = np.where(out["bytes_a"] > 0, 100.0 * out["bytes_growth"] / out["bytes_a"], np.nan)
    return out[["operator", "state", "keys_added", "keys_removed", "keys_changed", "keys_unchanged", "entries_a",
                "entries_b", "entries_growth", "bytes_a", "bytes_b", "bytes_growth", "growth_pct"]]


def growth_by_key(d: pd.DataFrame, n: int | None = 10) -> pd.DataFrame:
    """Per (operator, key) of a :func:`diff`, summed over states: the keys that grew most, first.

    Columns: ``operator, key, entries_a, entries_b, entries_delta, bytes_a, bytes_b, bytes_delta``.
    """
    codes, keys = factorize_keys(d["key"])
    g = d.assign(_k=codes).groupby(["operator", "_k"], sort=False, observed=True)[
        ["entries_a", "entries_b", "entries_delta", "bytes_a", "bytes_b", "bytes_delta"]].sum().reset_index()
    g.insert(1, "key", keys[g.pop("_k").to_numpy()])
    g = g.sort_values(["bytes_delta", "entries_delta"], ascending=False, kind="stable").reset_index(drop=True)
    return g.head(n) if n is not None else g
