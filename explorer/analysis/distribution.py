"""Key-group distribution, imbalance, and the rescale what-if.

Flink moves whole key groups when it rescales, so everything here is computed
from *per-key-group aggregates* (entries, bytes, keys, records), never by
looping over keys: the load of subtask ``i`` at parallelism ``p`` is the sum
over the key groups ``kg`` with ``kg * p // max_parallelism == i``
(``np.bincount``). Only a what-if with a *different max parallelism* needs
the keys again, because the key groups themselves change; then the keys are
re-hashed (vectorised) into the new key groups.

Imbalance figures, per metric:

* ``max_over_mean``: load of the heaviest subtask / mean load (1.0 is perfect;
  the job runs at the speed of its heaviest subtask);
* ``cv``: coefficient of variation, population standard deviation / mean.

``overload`` (:func:`overload`, the one definition every table uses) is a subtask's
load over the mean subtask load of its operator: 1.0 is an average subtask, 2.0 one
that carries twice the average (and so runs about twice as long per record).

:func:`state_sizes` counts entries, bytes and keys per state from the data, for the
formats whose metadata does not carry them (Apache Flink, Spark).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from ..errors import AnalysisError
from ..keygroups import check_parallelism, operator_indices_for_key_groups
from . import _ranges
from ._columns import filter_key, memo, state_rows
from ._common import (KEY_PASS_COLUMNS, LOAD_COLUMNS, KeyTable, Layout, Source, frame, is_snapshot, layouts,
                      partitioner, per_key_codes)
from ._keys import key_codes

#: the load metrics every distribution carries
METRICS = ("entries", "bytes", "keys", "records")


def _aggregate(kt: KeyTable, lay: Layout, records: pd.DataFrame | None, *,
               key_groups: np.ndarray | None = None, max_parallelism: int | None = None) -> pd.DataFrame:
    """Per key group ``0..M-1`` of one operator: entries, bytes, keys (zero filled), records (the traffic
    the engine counted, zero filled; ``<NA>`` in every key group where the snapshot counted none).

    ``kt`` holds the operator's keys (:func:`._common.per_key_codes`; timers excluded):
    every key lives in one key group, so the sums over its keys are the sums over its rows.
    """
    m = max_parallelism or lay.max_parallelism
    kg = kt.key_group if key_groups is None else key_groups
    kg = np.asarray(kg, dtype=np.int64)
    if len(kg) and (kg.min() < 0 or kg.max() >= m):
        raise AnalysisError(f"operator {lay.operator!r}: key group {int(kg.max())} is outside 0..{m - 1}; "
                            f"is max_parallelism={m} right?")
    entries = np.bincount(kg, weights=kt.entries.astype(np.float64), minlength=m)
    nbytes = np.bincount(kg, weights=kt.bytes.astype(np.float64), minlength=m)
    keys = np.bincount(kg, minlength=m)
    rec = pd.array([pd.NA] * m, dtype="Int64")  # unknown, never 0
    if records is not None and len(records) and max_parallelism in (None, lay.max_parallelism):
        r = records[records["operator"] == lay.operator]
        if len(r):
            rec = pd.array(np.rint(np.bincount(r["key_group"].to_numpy().astype(np.int64),
                                               weights=r["records"].to_numpy(dtype=np.float64), minlength=m)
                                   ).astype(np.int64), dtype="Int64")
    return pd.DataFrame({
        "operator": lay.operator,
        "key_group": np.arange(m, dtype=np.int64),
        "entries": np.rint(entries).astype(np.int64),
        "bytes": np.rint(nbytes).astype(np.int64),
        "keys": keys.astype(np.int64),
        "records": rec,
    })


def _keys_of(source: Source, df: pd.DataFrame, operator, state) -> KeyTable:
    """The per-key sums of ``df`` (kept on a Snapshot, shared with the hot-key analyses)."""
    return memo(source, ("per_key", filter_key(operator, state)), lambda: per_key_codes(df, subtasks=False))


def _aggregates(source: Source, df: pd.DataFrame, operator, state, lay: Layout,
                records: pd.DataFrame | None) -> pd.DataFrame:
    """:func:`_aggregate` of one operator at its own max parallelism (kept on a Snapshot)."""
    def build() -> pd.DataFrame:
        return _aggregate(_keys_of(source, df, operator, state).of_operator(lay.operator), lay, records)

    return memo(source, ("kg_aggregates", filter_key(operator, state), lay.operator, lay.max_parallelism),
                build).copy()


def _records(source: Source) -> pd.DataFrame | None:
    if is_snapshot(source):
        try:
            return source.metrics()
        except Exception:  # noqa: BLE001 - formats without per-key-group metrics
            return None
    return None


def key_group_aggregates(source: Source, *, operator: str | Iterable[str] | None = None,
                         state: str | Iterable[str] | None = None, max_parallelism: int | None = None) -> pd.DataFrame:
    """One row per (operator, key group) for every key group: entries, bytes, keys, records.

    ``records`` is the traffic per key group the engine counted (a Snapshot's
    :meth:`~explorer.snapshot.Snapshot.metrics`), ``<NA>`` where the snapshot counted none (nullable Int64).
    """
    if _ranges.needs_ranges(source, operator, state):
        lays = layouts(source, _NO_ROWS, operator, None, max_parallelism)
        parts = [_streamed(source, operator, state, max_parallelism)[name].copy() for name in sorted(lays)]
        return _concat(parts, ["operator", "key_group", *METRICS])
    df = frame(source, LOAD_COLUMNS, operator, state)
    lays = layouts(source, df, operator, None, max_parallelism)
    rec = _records(source)
    parts = [_aggregates(source, df, operator, state, lay, rec) for name, lay in sorted(lays.items())]
    return _concat(parts, ["operator", "key_group", *METRICS])


#: the frame :func:`._common.layouts` is given for a Snapshot streamed over ranges (it reads the metadata only)
_NO_ROWS = pd.DataFrame({c: pd.Series(dtype=object) for c in LOAD_COLUMNS})


def _streamed(source: Source, operator, state, max_parallelism: int | None = None,
              rehash_to: int | None = None) -> dict[str, pd.DataFrame]:
    """Per operator, :func:`key_group_aggregates` summed over the key-group ranges of ``source``
    (:mod:`._ranges`); with ``rehash_to`` the keys re-hashed into that many key groups (no records).
    Kept on the Snapshot."""
    def per_range(v: Any) -> dict[str, pd.DataFrame]:
        if rehash_to is None:
            part = key_group_aggregates(v, operator=operator, state=state, max_parallelism=max_parallelism)
            return {str(n): g for n, g in part.groupby("operator", sort=False, observed=True)}
        df = frame(v, LOAD_COLUMNS, operator, state)
        lays = layouts(v, df, operator)
        scheme = partitioner(v)
        by_op = {}
        for name, lay in lays.items():
            kt = _keys_of(v, df, operator, state).of_operator(name)
            by_op[name] = _aggregate(kt, lay, None, key_groups=kt.values.key_groups(rehash_to, scheme)[kt.key],
                                     max_parallelism=rehash_to)
        return by_op

    def build() -> dict[str, pd.DataFrame]:
        acc: dict[str, pd.DataFrame] = {}
        # two ranges at a time on two threads (the reads and the key kernel release the GIL); merged in order
        what = "key groups" if rehash_to is None else f"key groups at M={rehash_to}"
        for by_op in _ranges.ranges(what, source, operator=operator, state=state, columns=KEY_PASS_COLUMNS,
                                    ahead=True).map(per_range):
            for name, g in by_op.items():
                g = g.reset_index(drop=True)
                if name not in acc:
                    acc[name] = g
                else:
                    cur = acc[name]
                    for metric in METRICS:
                        cur[metric] = cur[metric].reset_index(drop=True) + g[metric].reset_index(drop=True)
        return acc

    return source.analysis_cache.memo(("streamed_kg_aggregates", filter_key(operator, state), max_parallelism,
                                       rehash_to), build)


def key_group_distribution(source: Source, parallelism: int | None = None, *,
                           operator: str | Iterable[str] | None = None, state: str | Iterable[str] | None = None,
                           max_parallelism: int | None = None) -> pd.DataFrame:
    """Entries, bytes, keys and records per key group, with the subtask that owns it at ``parallelism``.

    Columns: ``operator, key_group, subtask, entries, bytes, keys, records``.
    ``parallelism`` defaults to the snapshot's.
    """
    streamed = _ranges.needs_ranges(source, operator, state)
    df = _NO_ROWS if streamed else frame(source, LOAD_COLUMNS, operator, state)
    lays = layouts(source, df, operator, parallelism, max_parallelism)
    rec = _records(source)
    parts = []
    for name, lay in sorted(lays.items()):
        agg = (_streamed(source, operator, state, max_parallelism)[name].copy() if streamed
               else _aggregates(source, df, operator, state, lay, rec))
        agg.insert(2, "subtask", operator_indices_for_key_groups(lay.max_parallelism, lay.parallelism,
                                                                 agg["key_group"].to_numpy()))
        parts.append(agg)
    return _concat(parts, ["operator", "key_group", "subtask", *METRICS])


def subtask_loads(distribution: pd.DataFrame, parallelism: int | None = None,
                  max_parallelism: int | None = None) -> pd.DataFrame:
    """Per (operator, subtask) sums of a :func:`key_group_distribution` (or of key-group aggregates
    at another ``parallelism``).

    Columns: ``operator, parallelism, subtask, key_group_start, key_group_end, key_groups,``
    ``entries, bytes, keys, records, bytes_share`` (``records`` nullable: ``<NA>`` where unknown).
    """
    parts = []
    for name, g in distribution.groupby("operator", sort=True, observed=True):
        m = int(max_parallelism or len(g))
        kg = g["key_group"].to_numpy().astype(np.int64)
        if parallelism is None:
            if "subtask" not in g:
                raise AnalysisError("subtask_loads needs parallelism= or a distribution with a subtask column")
            p = int(g["subtask"].max()) + 1
            sub = g["subtask"].to_numpy().astype(np.int64)
        else:
            p = int(parallelism)
            check_parallelism(p, m)
            sub = operator_indices_for_key_groups(m, p, kg)
        out = {"operator": name, "parallelism": p, "subtask": np.arange(p)}
        first = np.full(p, -1, dtype=np.int64)
        last = np.full(p, -1, dtype=np.int64)
        for i in range(p):  # over subtasks, not keys: key groups of subtask i are contiguous
            sel = kg[sub == i]
            if len(sel):
                first[i], last[i] = sel.min(), sel.max()
        out["key_group_start"] = first
        out["key_group_end"] = last
        out["key_groups"] = np.bincount(sub, minlength=p)
        for metric in METRICS:
            if g[metric].isna().all():  # traffic the snapshot did not count: unknown per subtask too
                out[metric] = pd.array([pd.NA] * p, dtype="Int64")
                continue
            sums = np.bincount(sub, weights=g[metric].to_numpy(dtype=np.float64, na_value=0), minlength=p)
            out[metric] = sums.round().astype(np.int64)
            if metric == "records":
                out[metric] = pd.array(out[metric], dtype="Int64")
        total = out["bytes"].sum()
        out["bytes_share"] = out["bytes"] / total if total else np.zeros(p)
        parts.append(pd.DataFrame(out))
    return _concat(parts, ["operator", "parallelism", "subtask", "key_group_start", "key_group_end", "key_groups",
                           *METRICS, "bytes_share"])


def subtask_distribution(source: Source, parallelism: int | None = None, *,
                         operator: str | Iterable[str] | None = None, state: str | Iterable[str] | None = None,
                         max_parallelism: int | None = None) -> pd.DataFrame:
    """Entries, bytes, keys and records per subtask at ``parallelism`` (default: the snapshot's)."""
    dist = key_group_distribution(source, parallelism, operator=operator, state=state, max_parallelism=max_parallelism)
    return subtask_loads(dist)


#: the caption that explains :func:`overload` wherever it is shown
OVERLOAD_CAPTION = ("overload: the load of the key's subtask over the mean subtask load of its operator "
                    "(1.0 = an average subtask, 2.0 = twice the average)")


def overload(loads: np.ndarray | Sequence[float], subtask: np.ndarray | Sequence[int] | int) -> np.ndarray | float:
    """The overload of ``subtask`` (one or many): its load over the mean of ``loads`` (NaN when all are 0).

    The one definition of the ratio every table shows (see :data:`OVERLOAD_CAPTION`).
    """
    loads = np.asarray(loads, dtype=np.float64)
    mean = loads.mean() if len(loads) else 0.0
    picked = loads[np.asarray(subtask, dtype=np.int64)]
    if not mean:
        return np.full(np.shape(picked), np.nan) if np.ndim(picked) else float("nan")
    return picked / mean


def state_sizes(source: Source) -> pd.DataFrame:
    """Per (operator, state): ``kind, entries, bytes, keys`` counted from the keyed state itself.

    Timers count as entries of their timer state. Works on every format (the metadata of
    Apache Flink and Spark snapshots carries no entry counts).
    """
    cols = ["operator", "state", "kind", "entries", "bytes", "keys"]
    if _ranges.needs_ranges(source):
        def build() -> pd.DataFrame:
            parts = [state_sizes(v) for (v,) in _ranges.ranges("state sizes", source)]
            parts = [p for p in parts if len(p)]
            if not parts:
                return pd.DataFrame({c: pd.Series(dtype=object if c in cols[:3] else np.int64) for c in cols})
            return (pd.concat(parts, ignore_index=True).groupby(["operator", "state", "kind"], sort=True,
                                                                 observed=True)[["entries", "bytes", "keys"]]
                    .sum().reset_index()[cols])
        return source.analysis_cache.memo(("streamed_state_sizes",), build).copy()
    df = frame(source, LOAD_COLUMNS)
    if not len(df):
        return pd.DataFrame({c: pd.Series(dtype=object if c in cols[:3] else np.int64) for c in cols})
    codes, kv = key_codes(df)
    size = df["size_bytes"].to_numpy(dtype=np.float64)
    seen = np.zeros(max(len(kv), 1), dtype=bool)
    rows = []
    for op, st, r in state_rows(df):
        c = codes[r]
        seen[c] = True
        nkeys = int(seen.sum())
        seen[c] = False
        first = r.start if isinstance(r, slice) else int(r[0])
        rows.append({"operator": op, "state": st, "kind": str(df["kind"].iloc[first]), "entries": int(len(c)),
                     "bytes": int(round(float(size[r].sum()))), "keys": nkeys})
    return pd.DataFrame(rows, columns=cols)


def imbalance_figures(loads: np.ndarray) -> dict[str, float]:
    """``total, mean, max, min, max_over_mean, cv`` of per-subtask loads (NaN ratios for zero load)."""
    loads = np.asarray(loads, dtype=np.float64)
    total = float(loads.sum())
    mean = total / len(loads) if len(loads) else 0.0
    mx = float(loads.max()) if len(loads) else 0.0
    return {
        "total": total,
        "mean": mean,
        "max": mx,
        "min": float(loads.min()) if len(loads) else 0.0,
        "max_over_mean": mx / mean if mean else np.nan,
        "cv": float(loads.std()) / mean if mean else np.nan,
    }


def imbalance(source: Source | pd.DataFrame, parallelism: int | None = None, *,
              operator: str | Iterable[str] | None = None, state: str | Iterable[str] | None = None,
              max_parallelism: int | None = None) -> pd.DataFrame:
    """Imbalance figures per operator and metric at ``parallelism``.

    ``source`` is a Snapshot, a keyed-state DataFrame, or a :func:`subtask_distribution`.
    Columns: ``operator, parallelism, metric, total, mean, max, min, max_over_mean, cv, heaviest_subtask``;
    no ``records`` rows for an operator whose traffic the snapshot did not count (unknown, not 0).
    """
    if isinstance(source, pd.DataFrame) and "key_groups" in source.columns and "bytes_share" in source.columns:
        loads = source
    else:
        loads = subtask_distribution(source, parallelism, operator=operator, state=state,
                                     max_parallelism=max_parallelism)
    rows = []
    for name, g in loads.groupby("operator", sort=True, observed=True):
        for metric in METRICS:
            if g[metric].isna().all():  # traffic the snapshot did not count: no figure, rather than a 0
                continue
            v = g[metric].to_numpy(dtype=np.float64, na_value=0)
            rows.append({"operator": name, "parallelism": len(g), "metric": metric, **imbalance_figures(v),
                         "heaviest_subtask": int(g["subtask"].to_numpy()[np.argmax(v)]) if len(v) else -1})
    return pd.DataFrame(rows, columns=["operator", "parallelism", "metric", "total", "mean", "max", "min",
                                       "max_over_mean", "cv", "heaviest_subtask"])


def rescale_whatif(source: Source, parallelisms: int | Sequence[int] | None = None, *,
                   max_parallelism: int | Sequence[int] | None = None,
                   operator: str | Iterable[str] | None = None, state: str | Iterable[str] | None = None,
                   metrics: Sequence[str] = ("entries", "bytes", "keys", "records")) -> pd.DataFrame:
    """Imbalance at other parallelisms ``p'`` (and optionally other max parallelisms ``M'``).

    ``parallelisms`` defaults to ``1..min(M, 4 * p)``. Each ``p'`` must satisfy
    ``0 < p' <= M'``. With the snapshot's own max parallelism the answer comes from
    the per-key-group aggregates (exactly what Flink's rescaling moves); for another
    ``M'`` the keys are re-hashed into ``M'`` key groups first (``records`` is then
    unknown: the traffic counters are per key group of the old ``M``).

    Columns: ``operator, max_parallelism, parallelism, metric, total, mean, max, min,``
    ``max_over_mean, cv, heaviest_subtask, key_groups_min, key_groups_max, is_current``.

    For a DataFrame ``source`` give ``max_parallelism=`` (the keys are then always re-hashed,
    so the answer does not depend on the frame's own ``key_group`` column).
    """
    streamed = _ranges.needs_ranges(source, operator, state)
    df = _NO_ROWS if streamed else frame(source, LOAD_COLUMNS, operator, state)
    lays = layouts(source, df, operator, None, None if is_snapshot(source) else _first(max_parallelism))
    rec = _records(source)
    rows = []
    scheme = partitioner(source)
    for name, lay in sorted(lays.items()):
        maxps = [lay.max_parallelism] if max_parallelism is None else _as_ints(max_parallelism)
        for m in maxps:
            if streamed:
                agg = _streamed(source, operator, state, None, None if m == lay.max_parallelism else m)[name]
            elif m == lay.max_parallelism and is_snapshot(source):
                agg = _aggregates(source, df, operator, state, lay, rec)
            else:
                kt = _keys_of(source, df, operator, state).of_operator(name)
                agg = _aggregate(kt, lay, None, key_groups=kt.values.key_groups(m, scheme)[kt.key], max_parallelism=m)
            ps = range(1, min(m, 4 * lay.parallelism) + 1) if parallelisms is None else _as_ints(parallelisms)
            kg = agg["key_group"].to_numpy()
            for p in ps:
                check_parallelism(p, m)
                sub = operator_indices_for_key_groups(m, p, kg)
                n_kg = np.bincount(sub, minlength=p)
                for metric in metrics:
                    if agg[metric].isna().all():  # traffic not counted (or counted per the old M): unknown
                        continue
                    loads = np.bincount(sub, weights=agg[metric].to_numpy(dtype=np.float64, na_value=0), minlength=p)
                    rows.append({"operator": name, "max_parallelism": m, "parallelism": p, "metric": metric,
                                 **imbalance_figures(loads), "heaviest_subtask": int(np.argmax(loads)),
                                 "key_groups_min": int(n_kg.min()), "key_groups_max": int(n_kg.max()),
                                 "is_current": bool(p == lay.parallelism and m == lay.max_parallelism)})
    return pd.DataFrame(rows, columns=["operator", "max_parallelism", "parallelism", "metric", "total", "mean", "max",
                                       "min", "max_over_mean", "cv", "heaviest_subtask", "key_groups_min",
                                       "key_groups_max", "is_current"])


#: the largest parallelism :func:`best_parallelisms` ranks by default (past it, each subtask holds a handful of key
#: groups at most and the ranking says little more)
BEST_UP_TO = 1024


def fixed_partitioning(source: Source | pd.DataFrame) -> str | None:
    """Why ``source``'s parallelism cannot be chosen on restore, or None where it can (Flink, the engine)."""
    if partitioner(source) == "spark":
        return ("a Spark checkpoint's partitioning is fixed: spark.sql.shuffle.partitions is stored in the "
                "checkpoint and a restarted query keeps it, so there is no parallelism to choose")
    return None


def best_parallelisms(source: Source | pd.DataFrame, parallelisms: Sequence[int] | None = None, *,
                      metric: str = "auto", n: int = 5, operator: str | Iterable[str] | None = None,
                      max_parallelism: int | Sequence[int] | None = None) -> pd.DataFrame:
    """The ``n`` parallelisms ``p >= 2`` with the best balance of ``metric`` (lowest max/mean, then lowest p).

    ``metric="auto"`` ranks by traffic (``records``) where the snapshot counted it, else by
    ``bytes``, per operator; the ``metric`` column says which. Parallelism 1 is left out (one
    subtask is trivially balanced: no choice at all); the default candidates are
    ``2..min(max parallelism, BEST_UP_TO)``. A Spark checkpoint gives no rows: its partitioning
    is fixed (:func:`fixed_partitioning` says why). ``source`` may be a :func:`rescale_whatif`
    result. Rows of :func:`rescale_whatif`, best first, per operator (and max parallelism), with
    a ``rank`` column.
    """
    if metric not in METRICS and metric != "auto":
        raise AnalysisError(f"unknown metric {metric!r}; expected 'auto' or one of {list(METRICS)}")
    if isinstance(source, pd.DataFrame) and "max_over_mean" in source.columns:
        w = source
    elif fixed_partitioning(source):
        w = rescale_whatif(source, [], operator=operator, metrics=["bytes"])
    else:
        if parallelisms is None:
            lays = layouts(source, _NO_ROWS if is_snapshot(source) else frame(source, LOAD_COLUMNS, operator, None),
                           operator, None, _first(max_parallelism))
            top = min([min(lay.max_parallelism, BEST_UP_TO) for lay in lays.values()] +
                      ([min(_as_ints(max_parallelism))] if max_parallelism is not None else []))
            parallelisms = list(range(2, top + 1))
        metrics = ["records", "bytes"] if metric == "auto" else [metric]
        w = rescale_whatif(source, parallelisms, operator=operator, max_parallelism=max_parallelism, metrics=metrics)
    w = w[w["parallelism"] >= 2]
    if metric == "auto":
        counted = w[(w["metric"] == "records") & (w["total"] > 0)]
        by_records = set(zip(counted["operator"], counted["max_parallelism"]))
        pick = [("records" if (o, m) in by_records else "bytes") == x
                for o, m, x in zip(w["operator"], w["max_parallelism"], w["metric"])]
        w = w[np.asarray(pick, dtype=bool)] if len(w) else w
    else:
        w = w[w["metric"] == metric]
    w = w.sort_values(["operator", "max_parallelism", "max_over_mean", "parallelism"], na_position="last")
    w = w.groupby(["operator", "max_parallelism"], sort=True, observed=True).head(n).copy()
    w.insert(0, "rank", w.groupby(["operator", "max_parallelism"], observed=True).cumcount() + 1)
    return w.reset_index(drop=True)


def _as_ints(x: int | Sequence[int]) -> list[int]:
    return [int(x)] if isinstance(x, (int, np.integer)) else [int(v) for v in x]


def _first(x: int | Sequence[int] | None) -> int | None:
    if x is None:
        return None
    return _as_ints(x)[0]


def _concat(parts: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object if c == "operator" else np.int64) for c in columns})
    return pd.concat(parts, ignore_index=True)[columns]
