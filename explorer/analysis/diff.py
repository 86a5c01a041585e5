"""Diff of two snapshots: keys added, removed and changed, and growth per key and per state.

A key's content in one state is the set of its entries ``(namespace, user_key,
value)``; each entry is hashed (``pandas.util.hash_array``; values that are
dicts or lists hash through ``str``) and a key's fingerprint is the wrapping
sum of its entries' hashes. Two snapshots' keys are matched by value after a
joint :func:`pandas.factorize`, so no Python loop runs per key. For two
Snapshots the same runs over their cached analysis columns: keys matched by
looking b's Arrow key dictionary up in a's (``pc.index_in``), entries hashed
column-wise in Arrow (:func:`._columns.arrow_hash`). A key is

* ``added``: in ``b`` only; ``removed``: in ``a`` only;
* ``changed``: in both with a different fingerprint or entry count;
* ``unchanged``: otherwise (last-access times alone do not count as a change).
"""

from __future__ import annotations

import weakref
from typing import Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ._columns import KeyValues, cached_frame, positions, row_hashes, state_rows
from ._common import Source, factorize_keys, first_occurrences, frame, is_snapshot

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


def _joint_codes(kva: KeyValues, kvb: KeyValues) -> tuple[np.ndarray, np.ndarray]:
    """Map b's key codes into a's code space; b-only keys get codes after a's.

    Returns ``(translation, new_from_b)``: ``translation[code_b]`` is the joint code and
    ``new_from_b[j]`` the b code of joint code ``len(kva) + j``. Kept on ``kva`` for as long
    as ``kvb`` lives (a second diff of the same snapshots, filtered, does not join again).
    """
    kept = kva.joins.get(id(kvb))
    if kept is not None and kept[0]() is kvb:
        return kept[1]
    out = _joint_codes_of(kva, kvb)
    kva.joins = {k: v for k, v in kva.joins.items() if v[0]() is not None}
    kva.joins[id(kvb)] = (weakref.ref(kvb), out)
    return out


def _joint_codes_of(kva: KeyValues, kvb: KeyValues) -> tuple[np.ndarray, np.ndarray]:
    tr = _joint_by_hash(kva, kvb)
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


def _joint_by_hash(kva: KeyValues, kvb: KeyValues) -> np.ndarray | None:
    """b code -> a code (-1: not in a) by one sort of both sides' 64-bit key hashes.

    Each side's hash is packed with its row number (the hash's low bits give way to it) and
    the packed values of both sides are sorted together: a key in both sides is a run of two
    equal hash prefixes, one from each side. Such a pair is matched only if the full 64-bit
    hashes are equal *and* the two keys compare equal (``pyarrow.compute.equal``): a hash
    collision never matches two different keys. The rare runs of three or more (prefix
    collisions) are matched by exact lookup. None when the keys are not one Arrow array of
    strings or integers of the same type on both sides (then :func:`_joint_by_lookup`).
    """
    if len(kva.segments) != 1 or len(kvb.segments) != 1:
        return None
    seg_a, seg_b = kva.segments[0], kvb.segments[0]
    if isinstance(seg_a, np.ndarray) or isinstance(seg_b, np.ndarray) or seg_a.type != seg_b.type:
        return None
    ha, hb = kva.hash64(), kvb.hash64()
    if ha is None or hb is None:
        return None
    na, nb = len(ha), len(hb)
    tr = np.full(nb, -1, dtype=np.int64)
    if not na or not nb:
        return tr
    bits = int(na + nb - 1).bit_length()
    if bits > 40:  # fewer than 24 hash bits left in the packed values
        return None
    low = np.uint64((1 << bits) - 1)
    packed = np.concatenate([ha, hb])
    packed &= ~low
    packed |= np.arange(na + nb, dtype=np.uint64)
    packed.sort()
    same = packed[1:] ^ packed[:-1]
    same = same <= low  # neighbours with the same hash prefix
    in_run = np.zeros(len(packed) + 1, dtype=bool)  # in_run[i + 1]: packed[i] and packed[i + 1] share it
    in_run[1:-1] = same
    clean = same & ~in_run[:-2] & ~in_run[2:]  # runs of exactly two
    i = np.flatnonzero(clean)
    # within a run the low bits (row numbers) sort a's row before b's
    ia, ib = (packed[i] & low).astype(np.int64), (packed[i + 1] & low).astype(np.int64) - na
    pair = np.flatnonzero((ia < na) & (ib >= 0))
    ia, ib = ia[pair], ib[pair]
    if len(ia):
        cand = np.full(nb, -1, dtype=np.int64)  # b in order, a nearly so: the takes below read memory in order
        cand[ib] = ia
        ib = np.flatnonzero(cand >= 0)
        ia = cand[ib]
        del cand
        equal = pc.equal(seg_a.take(pa.array(ia)), seg_b.take(pa.array(ib))).to_numpy(zero_copy_only=False)
        tr[ib[equal]] = ia[equal]
    multi = np.flatnonzero(same & (in_run[:-2] | in_run[2:]))
    if len(multi):  # prefixes shared by three or more keys: exact lookup of just those keys
        r = (packed[np.unique(np.concatenate([multi, multi + 1]))] & low).astype(np.int64)
        sa_, sb_ = r[r < na], r[r >= na] - na
        if len(sa_) and len(sb_):
            found = pc.index_in(seg_b.take(pa.array(sb_)), value_set=seg_a.take(pa.array(sa_)))
            f = found.fill_null(-1).to_numpy(zero_copy_only=False)
            tr[sb_[f >= 0]] = sa_[f[f >= 0]]
    return tr


def _side_keys(codes: np.ndarray, rows: np.ndarray | slice, h: np.ndarray, size: np.ndarray,
               n_codes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per key of one state on one side: ``(codes, entries, bytes, fingerprint)``.

    The fingerprint is the wrapping uint64 sum of the key's entry hashes (summed as its 32-bit
    halves in float64, exact below 2**21 entries per key). A state with one entry per key
    (a value state without namespaces) needs no sums: its rows are its keys.
    """
    c = codes[rows]
    hr = h[rows]
    sz = size[rows]
    counts = np.bincount(c, minlength=n_codes)
    if not len(c) or int(counts.max()) <= 1:
        return c, np.ones(len(c), dtype=np.int64), sz.astype(np.int64), hr
    present = np.flatnonzero(counts)
    lo = np.bincount(c, weights=(hr & np.uint64(0xFFFFFFFF)).astype(np.float64), minlength=n_codes)[present]
    hi = np.bincount(c, weights=(hr >> np.uint64(32)).astype(np.float64), minlength=n_codes)[present]
    fp = lo.astype(np.uint64) + (hi.astype(np.uint64) << np.uint64(32))
    return (present, counts[present].astype(np.int64),
            np.rint(np.bincount(c, weights=sz.astype(np.float64), minlength=n_codes)[present]).astype(np.int64), fp)


def _falling(delta: np.ndarray) -> np.ndarray:
    """``np.argsort(-delta, kind="stable")`` without sorting the zeros (most keys of a diff)."""
    pos = np.flatnonzero(delta > 0)
    neg = np.flatnonzero(delta < 0)
    return np.concatenate([pos[np.argsort(-delta[pos], kind="stable")], np.flatnonzero(delta == 0),
                           neg[np.argsort(-delta[neg], kind="stable")]])


def _diff_snapshots(a, b, operator, state, unchanged: bool) -> pd.DataFrame:
    """:func:`diff` of two Snapshots over their cached analysis columns and Arrow row hashes."""
    fa, fb = cached_frame(a, operator, state), cached_frame(b, operator, state)
    ha, hb = row_hashes(a), row_hashes(b)
    pa_, pb_ = positions(a, operator, state), positions(b, operator, state)
    ha = ha if pa_ is None else ha[pa_]
    hb = hb if pb_ is None else hb[pb_]
    kva, kvb = fa.attrs["key_values"], fb.attrs["key_values"]
    tr, new_from_b = _joint_codes(kva, kvb)
    codes_a = fa["key"].to_numpy(dtype=np.int64)
    codes_b = fb["key"].to_numpy(dtype=np.int64)
    k = len(kva) + len(new_from_b)
    rows_a = {(op, st): rows for op, st, rows in state_rows(fa)}
    rows_b = {(op, st): rows for op, st, rows in state_rows(fb)}
    size_a, size_b = fa["size_bytes"].to_numpy(), fb["size_bytes"].to_numpy()
    empty = (np.zeros(0, dtype=np.int64),) * 3 + (np.zeros(0, dtype=np.uint64),)
    parts = []
    for op, st in sorted(set(rows_a) | set(rows_b)):
        sa = _side_keys(codes_a, rows_a[(op, st)], ha, size_a, len(kva)) if (op, st) in rows_a else empty
        sb = _side_keys(codes_b, rows_b[(op, st)], hb, size_b, len(kvb)) if (op, st) in rows_b else empty
        ja, jb = sa[0], tr[sb[0]]
        ent_a = np.zeros(k, dtype=np.int64)
        ent_a[ja] = sa[1]
        ent_b = np.zeros(k, dtype=np.int64)
        ent_b[jb] = sb[1]
        in_a, in_b = ent_a > 0, ent_b > 0
        present = np.flatnonzero(in_a | in_b)  # joint codes in order
        if len(present) < k:
            ent_a, ent_b, in_a, in_b = ent_a[present], ent_b[present], in_a[present], in_b[present]

        def col(side: tuple, j: int, joint: np.ndarray) -> np.ndarray:
            out = np.zeros(k, dtype=side[j].dtype)
            out[joint] = side[j]
            return out if len(present) == k else out[present]

        byt_a, byt_b = col(sa, 2, ja), col(sb, 2, jb)
        same = (col(sa, 3, ja) == col(sb, 3, jb)) & (ent_a == ent_b)
        code = np.where(~in_a, 0, np.where(~in_b, 1, np.where(same, 3, 2))).astype(np.int8)
        if not unchanged:
            keep = np.flatnonzero(code != 3)
            present, code, ent_a, ent_b, byt_a, byt_b = (x[keep] for x in (present, code, ent_a, ent_b, byt_a, byt_b))
        delta = byt_b - byt_a
        order = _falling(delta)
        present, code, delta = present[order], code[order], delta[order]
        ent_a, ent_b, byt_a, byt_b = ent_a[order], ent_b[order], byt_a[order], byt_b[order]
        from_a = present < len(kva)
        keys = np.empty(len(present), dtype=object)
        ka = np.flatnonzero(from_a)
        if len(ka) == len(present):
            keys = kva.take(present)
        else:
            keys[ka] = kva.take(present[ka])
            kb = np.flatnonzero(~from_a)
            keys[kb] = kvb.take(new_from_b[present[kb] - len(kva)])
        parts.append(pd.DataFrame({
            "operator": op, "state": st, "key": keys,
            "status": pd.Categorical.from_codes(code, categories=list(STATUSES)),
            "entries_a": ent_a, "entries_b": ent_b, "entries_delta": ent_b - ent_a,
            "bytes_a": byt_a, "bytes_b": byt_b, "bytes_delta": delta,
        }))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in DIFF_COLUMNS})
    out = pd.concat(parts, ignore_index=True)  # pairs are in sorted order, each by falling bytes_delta
    out["status"] = out["status"].astype(pd.CategoricalDtype(list(STATUSES)))
    return out[DIFF_COLUMNS]


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
