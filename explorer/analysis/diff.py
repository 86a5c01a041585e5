"""Diff of two snapshots: keys added, removed and changed, and growth per key and per state.

A key's content in one state is the set of its entries ``(namespace, user_key,
value)``; each entry is hashed (``pandas.util.hash_array``; values that are
dicts or lists hash through ``str``) and a key's fingerprint is the wrapping
sum of its entries' hashes. Two snapshots' keys are matched by value after a
joint :func:`pandas.factorize`, so no Python loop runs per key. A key is

* ``added``: in ``b`` only; ``removed``: in ``a`` only;
* ``changed``: in both with a different fingerprint or entry count;
* ``unchanged``: otherwise (last-access times alone do not count as a change).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from ._common import Source, factorize_keys, first_occurrences, frame

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
    ``bytes_a, bytes_b, bytes_delta``; sorted by operator, state and falling ``bytes_delta``.
    ``unchanged=False`` leaves the unchanged keys out.
    """
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
