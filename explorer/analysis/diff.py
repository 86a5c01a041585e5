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

from typing import Iterable

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from ._columns import KeyValues, cached_frame, positions, row_hashes
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
    ``new_from_b[j]`` the b code of joint code ``len(kva) + j``.
    """
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
    new = np.flatnonzero(tr < 0)
    tr[new] = len(kva) + np.arange(len(new))
    return tr, new


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
    codes_b = tr[fb["key"].to_numpy(dtype=np.int64)] if len(fb) else np.zeros(0, dtype=np.int64)
    k = len(kva) + len(new_from_b)

    def pairs(f: pd.DataFrame) -> tuple[np.ndarray, list[tuple[str, str]]]:
        if not len(f):
            return np.zeros(0, dtype=np.int64), []
        oc, sc = f["operator"].cat.codes.to_numpy(), f["state"].cat.codes.to_numpy()
        ops, sts = list(f["operator"].cat.categories), list(f["state"].cat.categories)
        combo = oc.astype(np.int64) * len(sts) + sc
        present = np.flatnonzero(np.bincount(combo, minlength=len(ops) * len(sts)))
        names = {int(c): (str(ops[c // len(sts)]), str(sts[c % len(sts)])) for c in present}
        return combo, names

    combo_a, names_a = pairs(fa)
    combo_b, names_b = pairs(fb)
    all_pairs = sorted(set(names_a.values()) | set(names_b.values()))
    parts = []
    for op, st in all_pairs:
        ia = [c for c, n in names_a.items() if n == (op, st)]
        ib = [c for c, n in names_b.items() if n == (op, st)]
        rows_a = np.flatnonzero(combo_a == ia[0]) if ia else np.zeros(0, dtype=np.int64)
        rows_b = np.flatnonzero(combo_b == ib[0]) if ib else np.zeros(0, dtype=np.int64)
        ent, byt, lo, hi = [], [], [], []
        for rows, codes, f, h in ((rows_a, codes_a, fa, ha), (rows_b, codes_b, fb, hb)):
            c = codes[rows]
            ent.append(np.bincount(c, minlength=k).astype(np.int64))
            byt.append(np.rint(np.bincount(c, weights=f["size_bytes"].to_numpy(np.float64)[rows], minlength=k))
                       .astype(np.int64))
            # the fingerprint: sums of the 32-bit halves of the entry hashes, exact in float64
            # for keys of fewer than 2**21 entries
            hr = h[rows]
            lo.append(np.bincount(c, weights=(hr & np.uint64(0xFFFFFFFF)).astype(np.float64), minlength=k))
            hi.append(np.bincount(c, weights=(hr >> np.uint64(32)).astype(np.float64), minlength=k))
        in_a, in_b = ent[0] > 0, ent[1] > 0
        present = np.flatnonzero(in_a | in_b)
        same = (lo[0][present] == lo[1][present]) & (hi[0][present] == hi[1][present]) & \
            (ent[0][present] == ent[1][present])
        code = np.where(~in_a[present], 0, np.where(~in_b[present], 1, np.where(same, 3, 2))).astype(np.int8)
        if not unchanged:
            keep = code != 3
            present, code = present[keep], code[keep]
        delta = byt[1][present] - byt[0][present]
        order = np.argsort(-delta, kind="stable")
        present, code, delta = present[order], code[order], delta[order]
        keys = np.empty(len(present), dtype=object)
        from_a = present < len(kva)
        keys[from_a] = kva.take(present[from_a])
        keys[~from_a] = kvb.take(new_from_b[present[~from_a] - len(kva)])
        parts.append(pd.DataFrame({
            "operator": op, "state": st, "key": keys,
            "status": pd.Categorical.from_codes(code, categories=list(STATUSES)),
            "entries_a": ent[0][present], "entries_b": ent[1][present],
            "entries_delta": ent[1][present] - ent[0][present],
            "bytes_a": byt[0][present], "bytes_b": byt[1][present], "bytes_delta": delta,
        }))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in DIFF_COLUMNS})
    out = pd.concat(parts, ignore_index=True)  # pairs are in sorted order, each by falling bytes_delta
    out["status"] = out["status"].astype(pd.CategoricalDtype(list(STATUSES)))
    return out[DIFF_COLUMNS]


    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in DIFF_COLUMNS})
    out = pd.concat(parts, ignore_index=True)
    out = out.sort_values(["operator", "state", "bytes_delta"], ascending=[True, True, False], kind="stable")
    return out.reset_index(drop=True)[DIFF_COLUMNS]


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
