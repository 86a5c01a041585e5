"""Hot keys: the keys that hold the most state or get the most traffic, and what they do to subtasks.

Three ways to rank keys (``by``):

* ``"bytes"``: serialized state bytes of the key, over all its states;
* ``"entries"``: state entries of the key (a list's length, a map's size, 1 per value);
* ``"traffic"``: records the engine counted for the key in its heavy-hitter sketch
  (:meth:`~explorer.snapshot.Snapshot.heavy_hitters`; counts are upper bounds with the
  sketch's ``error``).

Skew figures over all keys of an operator: the Gini coefficient (0 = every key
equal, towards 1 = one key holds everything) and the share of the top 1 % of keys
(at least one key).

Salting what-if (:func:`salting_whatif`): a hot key ``k`` is split into ``n``
sub-keys ``f"{k}#{i}"`` for ``i in range(n)`` (the key's ``str()``, whatever its
type, then ``#`` and the index: the convention a job would use when it appends a
salt to the key, e.g. ``key_by(lambda r: f"{r.user}#{r.seq % n}")``). Its entries
and bytes are spread evenly over the sub-keys (the remainder to the first ones),
each sub-key is hashed into its Flink key group, and the per-subtask loads are
computed again.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from ..errors import AnalysisError
from ..keygroups import key_groups_for, operator_indices_for_key_groups
from ._columns import filter_key, memo
from ._common import (LOAD_COLUMNS, KeyTable, Layout, Source, frame, is_snapshot, layouts, partitioner,
                      per_key_codes)

BY = {"bytes": "bytes", "entries": "entries", "traffic": "records"}

HOT_KEY_COLUMNS = ["rank", "operator", "key", "key_group", "subtask", "entries", "bytes", "records", "records_error",
                   "share",
                   "subtask_load", "subtask_share", "overload"]


def _check_by(by: str) -> str:
    if by not in BY:
        raise AnalysisError(f"unknown ranking by={by!r}; expected one of {list(BY)}")
    return BY[by]


def _heavy_hitters(source: Source, heavy_hitters: pd.DataFrame | None) -> pd.DataFrame:
    if heavy_hitters is not None:
        return heavy_hitters
    if is_snapshot(source):
        return _snapshot_sketch(source)
    return pd.DataFrame(columns=["operator", "key", "count", "error"])


def key_stats(source: Source, *, operator: str | Iterable[str] | None = None, state: str | Iterable[str] | None = None,
              parallelism: int | None = None, max_parallelism: int | None = None,
              heavy_hitters: pd.DataFrame | None = None, keys: bool = True) -> pd.DataFrame:
    """One row per (operator, key): ``key_group, subtask, entries, bytes, records, records_error``.

    ``subtask`` is the owner at ``parallelism`` (default: the snapshot's). ``records`` is
    the key's count in the heavy-hitter sketch (an upper bound, at most ``records_error`` too
    high), 0 for keys the sketch does not hold. ``keys=False`` leaves the ``key`` column out,
    which saves turning every key into a Python object (enough for a Lorenz curve).
    """
    df = frame(source, LOAD_COLUMNS, operator, state)
    lays = layouts(source, df, operator, parallelism, max_parallelism)
    kt = _key_stats(df, lays, _heavy_hitters(source, heavy_hitters), source, operator, state)
    if keys:
        return kt.to_frame()
    return pd.DataFrame({"operator": np.asarray(kt.op_names, dtype=object)[kt.op] if len(kt.op_names) else
                         np.zeros(0, dtype=object), "key_group": kt.key_group, "subtask": kt.subtask,
                         "entries": kt.entries, "bytes": kt.bytes, "records": kt.records,
                         "records_error": kt.records_error})


def _key_stats(df: pd.DataFrame, lays: dict[str, Layout], hh: pd.DataFrame, source: Source | None = None,
               operator: Any = None, state: Any = None) -> KeyTable:
    """Per-key stats of the operators in ``lays`` (keys as codes), with the sketch's counts.

    For a Snapshot and its own sketch the table is built once per (rows, layouts) and kept
    on the Snapshot (:func:`._columns.memo`); the per-key sums under it are kept per rows, so
    another parallelism only recomputes the owners.
    """
    if source is None or hh is not _snapshot_sketch(source):
        return _build_key_stats(per_key_codes(df, subtasks=False), lays, hh)
    rows = filter_key(operator, state)
    base = memo(source, ("per_key", rows), lambda: per_key_codes(df, subtasks=False))
    lay_key = tuple(sorted((n, l.parallelism, l.max_parallelism) for n, l in lays.items()))
    return memo(source, ("key_stats", rows, lay_key), lambda: _build_key_stats(base, lays, hh))


def _snapshot_sketch(source: Source) -> pd.DataFrame | None:
    if not is_snapshot(source):
        return None
    return memo(source, ("heavy_hitters",), source.heavy_hitters)


def _build_key_stats(kt: KeyTable, lays: dict[str, Layout], hh: pd.DataFrame) -> KeyTable:
    if set(kt.op_names) - set(lays):
        kt = kt.take(np.isin(kt.op, [i for i, n in enumerate(kt.op_names) if n in lays]))
    else:
        kt = dataclasses.replace(kt)
    sub = np.zeros(len(kt), dtype=np.int64)
    for name, lay in lays.items():
        if name not in kt.op_names:
            continue
        sel = slice(None) if kt.op_names == [name] else kt.op == kt.op_names.index(name)
        sub[sel] = operator_indices_for_key_groups(lay.max_parallelism, lay.parallelism, kt.key_group[sel])
    kt.subtask = sub
    kt.records = np.zeros(len(kt), dtype=np.int64)
    kt.records_error = np.zeros(len(kt), dtype=np.int64)
    if len(hh) and len(kt):
        k = max(len(kt.values), 1)
        for name, g in hh.groupby("operator", sort=False, observed=True):
            if name not in kt.op_names:
                continue
            codes = kt.values.codes_of(list(g["key"]))
            i = kt.op_names.index(name)
            if kt.op_names == [name]:  # rows sorted by key code
                slots, want = kt.key, codes
            else:
                slots, want = kt.slot, i * k + codes
            pos = np.minimum(np.searchsorted(slots, want), len(slots) - 1)
            ok = (codes >= 0) & (slots[pos] == want)
            np.add.at(kt.records, pos[ok], g["count"].to_numpy()[ok].astype(np.int64))
            np.add.at(kt.records_error, pos[ok], g["error"].to_numpy()[ok].astype(np.int64))
    return kt


def _subtask_loads(kt: KeyTable, lay: Layout, metric: str, records_by_kg: pd.DataFrame | None) -> np.ndarray:
    p = lay.parallelism
    if metric == "records" and records_by_kg is not None and len(records_by_kg):
        r = records_by_kg[records_by_kg["operator"] == lay.operator]
        sub = operator_indices_for_key_groups(lay.max_parallelism, p, r["key_group"].to_numpy())
        return np.bincount(sub, weights=r["records"].to_numpy(dtype=np.float64), minlength=p)
    return kt.of_operator(lay.operator).subtask_loads(metric, p)


def _top(kt: KeyTable, metric: str, n: int) -> np.ndarray:
    """Rows of the ``n`` largest ``metric`` (ties: more entries first, then table order), largest first."""
    memo_key = ("top", metric, n)
    if memo_key not in kt.memo:
        kt.memo[memo_key] = _top_rows(kt, metric, n)
    return kt.memo[memo_key]


def _top_rows(kt: KeyTable, metric: str, n: int) -> np.ndarray:
    v = kt.column(metric)
    idx = np.arange(len(v))
    if len(v) > 4 * n:
        top = int(v.max())
        if 0 <= int(v.min()) and top < 4 * len(v):  # small counts: the cut from a histogram
            above = np.cumsum(np.bincount(v, minlength=top + 1)[::-1])
            cut = top - int(np.searchsorted(above, n))
        else:
            cut = np.partition(v, len(v) - n)[len(v) - n]
        idx = np.flatnonzero(v >= cut)
    order = np.lexsort((idx, -kt.entries[idx], -v[idx]))
    return idx[order][:n]


def hot_keys(source: Source, n: int = 10, by: str = "bytes", *, operator: str | Iterable[str] | None = None,
             state: str | Iterable[str] | None = None, parallelism: int | None = None,
             max_parallelism: int | None = None, heavy_hitters: pd.DataFrame | None = None) -> pd.DataFrame:
    """The ``n`` hottest keys of each operator ``by`` bytes, entries or traffic, and the subtask each overloads.

    Columns: ``rank, operator, key, key_group, subtask, entries, bytes, records, records_error,``
    ``share, subtask_load, subtask_share, overload`` where ``records`` is the sketch's count
    (an upper bound: the true count is at least ``records - records_error``), ``share`` is the
    key's part of the operator's total (of the ``by`` metric), ``subtask_load`` the total of
    its subtask, ``subtask_share`` the key's part of that subtask's load and ``overload`` the
    subtask's load over the mean subtask load (1.0 = an average subtask).

    Ties (keys of equal bytes, as when every entry has the same size) are ranked by entries,
    then by key code (the order keys first appear in the snapshot).
    """
    metric = _check_by(by)
    df = frame(source, LOAD_COLUMNS, operator, state)
    lays = layouts(source, df, operator, parallelism, max_parallelism)
    hh = _heavy_hitters(source, heavy_hitters)
    kt = _key_stats(df, lays, hh, source, operator, state)
    rec_kg = source.metrics() if is_snapshot(source) else None
    parts = []
    for name, lay in sorted(lays.items()):
        g = kt.of_operator(name)
        loads = _subtask_loads(kt, lay, metric, rec_kg)
        top = g.to_frame(_top(g, metric, n))
        if metric == "records":
            top = _with_sketch_only_keys(top, g, hh, lay, partitioner(source)).sort_values(
                [metric, "entries"], ascending=False, kind="stable").head(n)
        if not len(top):
            continue
        total = float(loads.sum()) or float(g.column(metric).sum())
        top.insert(0, "rank", np.arange(1, len(top) + 1))
        top["share"] = top[metric] / total if total else np.nan
        sub = top["subtask"].to_numpy().astype(np.int64)
        top["subtask_load"] = loads[sub]
        with np.errstate(divide="ignore", invalid="ignore"):
            top["subtask_share"] = np.where(loads[sub] > 0, top[metric].to_numpy() / loads[sub], np.nan)
            mean = loads.mean() if len(loads) else 0.0
            top["overload"] = loads[sub] / mean if mean else np.nan
        parts.append(top)
    if not parts:
        return pd.DataFrame(columns=HOT_KEY_COLUMNS)
    return pd.concat(parts, ignore_index=True)[HOT_KEY_COLUMNS]


def _with_sketch_only_keys(top: pd.DataFrame, g: KeyTable, hh: pd.DataFrame, lay: Layout,
                           scheme: str = "flink") -> pd.DataFrame:
    """Add the keys the sketch counts but that hold no state (state cleared or expired)."""
    mine = hh[hh["operator"] == lay.operator]
    if not len(mine):
        return top
    codes = g.values.codes_of(list(mine["key"]))
    held = np.isin(codes, g.key) & (codes >= 0)
    extra = mine[~held]
    if not len(extra):
        return top
    kg = key_groups_for(list(extra["key"]), lay.max_parallelism, scheme)
    rows = pd.DataFrame({"operator": lay.operator, "key": extra["key"].to_numpy(), "key_group": kg,
                         "subtask": operator_indices_for_key_groups(lay.max_parallelism, lay.parallelism, kg),
                         "entries": 0, "bytes": 0, "records": extra["count"].to_numpy().astype(np.int64),
                         "records_error": extra["error"].to_numpy().astype(np.int64)})
    return pd.concat([top, rows], ignore_index=True)


def gini(values: np.ndarray | Sequence[float]) -> float:
    """Gini coefficient of non-negative loads: 0 when all are equal, ``1 - 1/n`` when one holds all."""
    return _gini_sorted(np.sort(np.asarray(values, dtype=np.float64)))


def _skew(v: np.ndarray, fraction: float = 0.01) -> tuple[float, float]:
    """Gini and the top ``fraction``'s share of non-negative loads; from a histogram when they are
    small integers (no sort of millions of values), else from a sort."""
    n = len(v)
    if n == 0:
        return 0.0, 0.0
    total = float(v.sum())
    if total == 0:
        return 0.0, 0.0
    k = max(1, int(np.ceil(fraction * n)))
    if v.dtype.kind in "iu" and int(v.min()) >= 0 and int(v.max()) < 4 * n:
        counts = np.bincount(v).astype(np.float64)
        values = np.arange(len(counts), dtype=np.float64)
        before = np.concatenate([[0.0], np.cumsum(counts)[:-1]])  # ranks below each value
        rank_sum = counts * before + counts * (counts + 1) / 2  # sum of the 1-based ranks of each value
        g_ = float((2 * (values * rank_sum).sum()) / (n * total) - (n + 1) / n)
        desc_counts, desc_values = counts[::-1], values[::-1]
        taken = np.minimum(desc_counts, np.maximum(0, k - np.concatenate([[0.0], np.cumsum(desc_counts)[:-1]])))
        return g_, float((taken * desc_values).sum() / total)
    x = np.sort(np.asarray(v, dtype=np.float64))
    return _gini_sorted(x), float(x[::-1][:k].sum() / total)


def _gini_sorted(x: np.ndarray) -> float:
    n = len(x)
    total = x.sum()
    if n == 0 or total == 0:
        return 0.0
    i = np.arange(1, n + 1)
    return float(((2 * i - n - 1) * x).sum() / (n * total))


def top_share(values: np.ndarray | Sequence[float], fraction: float = 0.01) -> float:
    """Share of the total held by the top ``fraction`` of values (at least one value)."""
    x = np.asarray(values, dtype=np.float64)
    total = x.sum()
    if not len(x) or total == 0:
        return 0.0
    k = max(1, int(np.ceil(fraction * len(x))))
    return float(np.sort(x)[::-1][:k].sum() / total)


def lorenz_curve(values: np.ndarray | Sequence[float], points: int = 512) -> pd.DataFrame:
    """The Lorenz curve of loads: ``key_share`` (keys from the smallest up) against ``load_share``.

    At most ``points + 1`` points (evenly spaced in key share), starting at (0, 0) and ending at (1, 1).
    """
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = len(x)
    if n == 0 or x.sum() == 0:
        return pd.DataFrame({"key_share": [0.0, 1.0], "load_share": [0.0, 1.0]})
    cum = np.concatenate([[0.0], np.cumsum(x) / x.sum()])
    idx = np.unique(np.linspace(0, n, min(points, n) + 1).round().astype(np.int64))
    return pd.DataFrame({"key_share": idx / n, "load_share": cum[idx]})


def key_skew(source: Source | pd.DataFrame, by: str = "bytes", *, operator: str | Iterable[str] | None = None,
             state: str | Iterable[str] | None = None, max_parallelism: int | None = None) -> pd.DataFrame:
    """Skew of keys per operator: ``operator, by, keys, total, gini, top_1pct_share, top_key, top_key_share``.

    ``source`` may be a :func:`key_stats` result.
    """
    metric = _check_by(by)
    groups: list[tuple[str, np.ndarray, Any]] = []
    if isinstance(source, pd.DataFrame) and "entries" in source.columns and "size_bytes" not in source.columns:
        for name, g in source.groupby("operator", sort=True, observed=True):
            groups.append((str(name), g[metric].to_numpy(), lambda i, g=g: g["key"].iloc[i]))
    else:
        df = frame(source, LOAD_COLUMNS, operator, state)
        lays = layouts(source, df, operator, None, max_parallelism)
        kt = _key_stats(df, lays, _heavy_hitters(source, None), source, operator, state)
        for name in sorted(n for n in kt.op_names if n in lays):
            g = kt.of_operator(name)
            groups.append((name, g.column(metric), lambda i, g=g: g.values.take([g.key[i]])[0]))
    rows = []
    for name, v, key_at in groups:
        total = float(v.sum())
        top = int(np.argmax(v)) if len(v) else 0
        g_, share = _skew(v)
        rows.append({"operator": name, "by": by, "keys": len(v), "total": total, "gini": g_,
                     "top_1pct_share": share,
                     "top_key": key_at(top) if len(v) else None,
                     "top_key_share": float(v[top] / total) if total else 0.0})
    return pd.DataFrame(rows, columns=["operator", "by", "keys", "total", "gini", "top_1pct_share", "top_key",
                                       "top_key_share"])


def salted_key(key: Any, i: int) -> str:
    """The ``i``-th sub-key of a salted key: ``f"{key}#{i}"`` (see the module doc)."""
    return f"{key}#{i}"


def salting_whatif(source: Source, keys: Any = None, n: int = 4, *, operator: str | None = None,
                   state: str | Iterable[str] | None = None, parallelism: int | None = None,
                   max_parallelism: int | None = None, by: str = "bytes") -> pd.DataFrame:
    """Per-subtask loads before and after splitting ``keys`` into ``n`` sub-keys ``f"{k}#{i}"`` each.

    ``keys`` is one key or a list of keys (default: the hottest key ``by`` bytes). Columns:
    ``operator, scenario ("before" | "after"), parallelism, subtask, entries, bytes, keys``.
    """
    if n < 1:
        raise AnalysisError(f"n must be at least 1 sub-key, found {n}")
    df = frame(source, LOAD_COLUMNS, operator, state)
    lays = layouts(source, df, operator, parallelism, max_parallelism)
    if len(lays) != 1:
        raise AnalysisError(f"salting_whatif works on one operator; choose operator= among {sorted(lays)}")
    (lay,) = lays.values()
    kt = _key_stats(df, lays, _heavy_hitters(source, None), source, operator, state)
    kv = kt.values
    if keys is None:  # the hottest key: its code is known, no lookup
        col = BY[by] if by != "traffic" else "bytes"
        codes = kt.key[_top(kt, col, 1)]
        keys = list(kv.take(codes))
    else:
        if isinstance(keys, (str, int, float, tuple)) or not isinstance(keys, Iterable):
            keys = [keys]
        keys = list(keys)
        codes = kv.codes_of(keys)
    wanted = np.unique(codes[codes >= 0])
    pos = np.minimum(np.searchsorted(kt.key, wanted), max(len(kt) - 1, 0))  # rows are sorted by key code
    hot = pos[(kt.key[pos] == wanted)] if len(kt) else np.zeros(0, dtype=np.int64)
    held = set(kt.key[hot].tolist())
    missing = [repr(k) for k, c in zip(keys, codes) if c < 0 or int(c) not in held]
    if missing:
        raise AnalysisError(f"operator {lay.operator!r} holds no state for the keys {sorted(missing)}")
    p, m = lay.parallelism, lay.max_parallelism
    scheme = partitioner(source)

    def loads(sub: np.ndarray, entries: np.ndarray, nbytes: np.ndarray) -> dict[str, np.ndarray]:
        sub = np.asarray(sub, dtype=np.int64)
        return {
            "entries": np.bincount(sub, weights=np.asarray(entries, np.float64), minlength=p),
            "bytes": np.bincount(sub, weights=np.asarray(nbytes, np.float64), minlength=p),
            "keys": np.bincount(sub, minlength=p).astype(np.float64),
        }

    before = {m_: kt.subtask_loads(m_, p) for m_ in ("entries", "bytes", "keys")}
    salted = kt.take(hot)
    subs, ents, byts = [], [], []
    for key, e, b in zip(kv.take(salted.key), salted.entries, salted.bytes):  # the few salted keys
        kg = key_groups_for([salted_key(key, i) for i in range(n)], m, scheme)
        subs.append(operator_indices_for_key_groups(m, p, kg))
        ents.append(np.full(n, e // n) + (np.arange(n) < e % n))
        byts.append(np.full(n, b // n) + (np.arange(n) < b % n))
    removed = loads(salted.subtask, salted.entries, salted.bytes)
    added = loads(np.concatenate(subs), np.concatenate(ents), np.concatenate(byts))
    after = {k: before[k] - removed[k] + added[k] for k in before}
    out = []
    for scenario, ld in (("before", before), ("after", after)):
        out.append(pd.DataFrame({"operator": lay.operator, "scenario": scenario, "parallelism": p,
                                 "subtask": np.arange(p), **{k: np.rint(v).astype(np.int64) for k, v in ld.items()}}))
    return pd.concat(out, ignore_index=True)
