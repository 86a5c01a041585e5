"""Hot keys: the keys that hold the most state or get the most traffic, and what they do to subtasks.

Ways to rank keys (``by``):

* ``"auto"`` (the default): by traffic where the snapshot counted it for the operator,
  else by state bytes;
* ``"bytes"``: serialized state bytes of the key, over all its states;
* ``"entries"``: state entries of the key (a list's length, a map's size, 1 per value);
* ``"traffic"``: records the engine counted for the key in its heavy-hitter sketch
  (:meth:`~explorer.snapshot.Snapshot.heavy_hitters`; counts are upper bounds with the
  sketch's ``error``). A key the sketch does not hold has an *unknown* count (``<NA>``),
  not 0: the sketch keeps only the heaviest keys. Rankings, Gini, top shares and Lorenz
  curves by traffic use the keys whose count is known, and say which share of the
  operator's traffic that is (``known_share``).

Ties are broken by entries (more first), then by the key (numbers by value, other keys by
their text, ascending), so a ranking is the same on every run.
``overload`` is :func:`explorer.analysis.distribution.overload`, measured in traffic where
the snapshot counted it per key group, else in bytes, whatever the ranking: a key's
overload is the same number in every table.

Skew figures over all keys of an operator: the Gini coefficient (0 = every key
equal, towards 1 = one key holds everything) and the share of the top 1 % of keys
(at least one key).

Salting what-if (:func:`salting_whatif`): a hot key ``k`` is split into ``n``
sub-keys ``f"{k}#{i}"`` for ``i in range(n)`` (the key's ``str()``, whatever its
type, then ``#`` and the index: the convention a job would use when it appends a
salt to the key, e.g. ``key_by(lambda r: f"{r.user}#{r.seq % n}")``). Its entries,
bytes and traffic are spread evenly over the sub-keys (the remainder to the first ones),
each sub-key is hashed into its Flink key group, and the per-subtask loads are
computed again.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import AnalysisError
from ..keygroups import key_groups_for, operator_indices_for_key_groups
from ..ranking import nth_largest
from . import _ranges
from ._columns import filter_key, memo
from ._common import (KERNEL_ROWS, KEY_PASS_COLUMNS, LOAD_COLUMNS, KeyTable, Layout, Source, frame, is_snapshot,
                      layouts, partitioner, per_key_codes)
from ._keys import Deferred
from .distribution import overload

BY = {"auto": "auto", "bytes": "bytes", "entries": "entries", "traffic": "records"}

HOT_KEY_COLUMNS = ["rank", "operator", "by", "key", "key_group", "subtask", "entries", "bytes", "records",
                   "records_error", "share", "subtask_load", "subtask_share", "overload", "overload_by"]

#: tied keys past this many are ordered by their position in the snapshot, not their text
_TIES_BY_TEXT = 200_000


def _check_by(by: str) -> str:
    if by not in BY:
        raise AnalysisError(f"unknown ranking by={by!r}; expected one of {list(BY)}")
    return BY[by]


def _metric_of(kt: KeyTable, metric: str) -> str:
    """``"auto"`` resolved for one operator's keys: traffic where any count is known, else bytes."""
    if metric != "auto":
        return metric
    return "records" if kt.records_known is not None and kt.records_known.any() else "bytes"


def _rank_values(kt: KeyTable, metric: str) -> np.ndarray:
    """The values ranked: for traffic, -1 where the count is unknown."""
    v = kt.column(metric).astype(np.int64, copy=False)  # (read only)
    if metric == "records" and kt.records_known is not None:
        v = np.where(kt.records_known, v, -1)
    return v


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
    high), ``<NA>`` (unknown) for keys the sketch does not hold. ``keys=False`` leaves the ``key`` column out,
    which saves turning every key into a Python object (enough for a Lorenz curve).
    """
    df = frame(source, LOAD_COLUMNS, operator, state)
    lays = layouts(source, df, operator, parallelism, max_parallelism)
    kt = _key_stats(df, lays, _heavy_hitters(source, heavy_hitters), source, operator, state)
    if keys:
        return kt.to_frame()
    return pd.DataFrame({"operator": np.asarray(kt.op_names, dtype=object)[kt.op] if len(kt.op_names) else
                         np.zeros(0, dtype=object), "key_group": kt.key_group, "subtask": kt.subtask,
                         "entries": kt.entries, "bytes": kt.bytes,
                         "records": pd.arrays.IntegerArray(kt.records, ~kt.records_known),
                         "records_error": pd.arrays.IntegerArray(kt.records_error, ~kt.records_known)})


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
    kt.records_known = np.zeros(len(kt), dtype=bool)
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
            kt.records_known[pos[ok]] = True
    return kt


def _subtask_loads(kt: KeyTable, lay: Layout, metric: str, records_by_kg: pd.DataFrame | None) -> np.ndarray:
    p = lay.parallelism
    if metric == "records" and records_by_kg is not None and len(records_by_kg):
        r = records_by_kg[records_by_kg["operator"] == lay.operator]
        sub = operator_indices_for_key_groups(lay.max_parallelism, p, r["key_group"].to_numpy())
        return np.bincount(sub, weights=r["records"].to_numpy(dtype=np.float64), minlength=p)
    return kt.of_operator(lay.operator).subtask_loads(metric, p)


def _top(kt: KeyTable, metric: str, n: int) -> np.ndarray:
    """Rows of the ``n`` largest ``metric`` (ties: more entries, then by key), largest first; by traffic
    only known counts."""
    memo_key = ("top", metric, n)
    if memo_key not in kt.memo:
        kt.memo[memo_key] = _top_rows(kt, metric, n)
    return kt.memo[memo_key]


def _top_rows(kt: KeyTable, metric: str, n: int) -> np.ndarray:
    v = _rank_values(kt, metric)
    if n <= 0 or not len(v):
        return np.zeros(0, dtype=np.int64)
    candidates = np.flatnonzero(v >= 0) if metric == "records" else None  # None: every row (no copy of v)
    if (len(v) if candidates is None else len(candidates)) > n:
        cv = v if candidates is None else v[candidates]
        cut = nth_largest(cv, n)
        if candidates is None:
            above, at = np.flatnonzero(cv > cut), np.flatnonzero(cv == cut)
        else:
            above, at = candidates[cv > cut], candidates[cv == cut]
    elif candidates is None:
        above, at = np.arange(len(v)), np.zeros(0, dtype=np.int64)
    else:
        above, at = candidates, np.zeros(0, dtype=np.int64)
    need = n - len(above)
    if len(at) > need:  # the keys tied at the cut: more entries first, then by key
        at = at[np.lexsort((_key_order_rank(kt, at), -kt.entries[at]))[:need]]
    idx = np.concatenate([above, at]).astype(np.int64)
    order = np.lexsort((_key_order_rank(kt, idx), -kt.entries[idx], -v[idx]))
    return idx[order][:n]


def _key_order(kt: KeyTable, rows: np.ndarray) -> np.ndarray:
    """Positions that sort ``rows`` by their key's text (by snapshot position past ``_TIES_BY_TEXT``)."""
    if len(rows) > _TIES_BY_TEXT:
        return np.argsort(kt.key[rows], kind="stable")
    text = _string_keys(kt.values, kt.key[rows]) if len(rows) > 64 else None
    if text is not None:  # str keys (key_order sorts them by their text): sorted by Arrow, no str objects made
        return pc.sort_indices(text).to_numpy().astype(np.int64, copy=False)
    return key_order(list(kt.values.take(kt.key[rows])))


def _string_keys(values: Any, codes: np.ndarray) -> pa.Array | None:
    """The keys of ``codes`` as an Arrow string array where ``values`` is one segment of strings, else None.

    Distinct keys, compared as UTF-8 bytes: the order of their Python ``str`` (code point order), which is
    what :func:`key_order` sorts str keys by."""
    segs = getattr(values, "_segments", None)
    if segs is None or len(segs) != 1:
        return None
    seg = segs[0]
    if isinstance(seg, Deferred):
        if seg.source is None or seg.rows is None or not _is_text(seg.source.type) or seg.source.null_count:
            return None
        return seg.source.take(pa.array(seg.rows[codes]))
    if isinstance(seg, (pa.Array, pa.ChunkedArray)) and _is_text(seg.type) and not seg.null_count:
        return seg.take(pa.array(codes))
    return None


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def key_order(keys: Sequence[Any]) -> np.ndarray:
    """Positions that sort ``keys`` for breaking ties: numbers by value (``-25`` before ``-1``), any other
    keys by their text. The one tie rule of :func:`hot_keys`, the report and the dashboard's Hot keys tab."""
    keys = list(keys)
    if keys and all(isinstance(k, (int, float, np.integer, np.floating)) and not isinstance(k, bool) for k in keys):
        return np.argsort(np.asarray(keys, dtype=np.float64), kind="stable")  # numbers by value
    return np.argsort(np.array([str(k) for k in keys], dtype=object), kind="stable")


def rank_order(values: np.ndarray, entries: np.ndarray, keys: Sequence[Any]) -> np.ndarray:
    """Positions that rank keys hottest first: by ``values``, ties by more ``entries``, then by
    :func:`key_order` (what :func:`hot_keys` does, for callers holding their own per-key arrays)."""
    tie = np.empty(len(keys), dtype=np.int64)
    tie[key_order(keys)] = np.arange(len(keys))
    return np.lexsort((tie, -np.asarray(entries), -np.asarray(values, dtype=np.float64)))


def hottest_key(values: np.ndarray, keys: Sequence[Any], unit: str) -> tuple[Any, str | None]:
    """The hottest of ``keys`` by ``values`` (known values, one per key), or ``None`` and why there is none.

    A what-if acts on one key that stands out: where the largest value is shared (every key the same
    size, or a few tied at the top), there is no hottest key, and the answer says so
    (``"no hottest key: 992 keys tie at 120 bytes"``) rather than picking one of them.
    """
    v = np.asarray(values, dtype=np.float64)
    if not len(v):
        return None, f"no key holds state measured in {unit}"
    top = v.max()
    tied = int((v == top).sum())
    if tied > 1:
        shown = f"{top:,.0f}" if float(top).is_integer() else f"{top:,.2f}"
        every = ", every key the same" if tied == len(v) else ""
        return None, f"no hottest key: {tied:,} keys tie at {shown} {unit}{every}"
    return keys[int(np.argmax(v))], None


def _key_order_rank(kt: KeyTable, rows: np.ndarray) -> np.ndarray:
    rank = np.empty(len(rows), dtype=np.int64)
    rank[_key_order(kt, rows)] = np.arange(len(rows))
    return rank


def _overload_loads(kt: KeyTable, lay: Layout, rec_kg: pd.DataFrame | None) -> tuple[np.ndarray, str]:
    """The per-subtask loads ``overload`` is measured in: traffic where counted, else bytes."""
    if rec_kg is not None and len(rec_kg):
        r = rec_kg[rec_kg["operator"] == lay.operator]
        if len(r) and r["records"].sum() > 0:
            return _subtask_loads(kt, lay, "records", rec_kg), "records"
    return kt.of_operator(lay.operator).subtask_loads("bytes", lay.parallelism), "bytes"


def hot_keys(source: Source, n: int = 10, by: str = "auto", *, operator: str | Iterable[str] | None = None,
             state: str | Iterable[str] | None = None, parallelism: int | None = None,
             max_parallelism: int | None = None, heavy_hitters: pd.DataFrame | None = None) -> pd.DataFrame:
    """The ``n`` hottest keys of each operator ``by`` traffic, bytes or entries, and the subtask each overloads.

    Columns: ``rank, operator, by, key, key_group, subtask, entries, bytes, records, records_error,``
    ``share, subtask_load, subtask_share, overload, overload_by`` where ``by`` is the measure
    ranked (``"auto"`` resolved per operator: ``records`` where the sketch counted traffic,
    else ``bytes``), ``records`` the sketch's count (an upper bound: the true count is at
    least ``records - records_error``; ``<NA>`` where unknown), ``share`` the key's part of
    the operator's total of that measure, ``subtask_load`` the total of its subtask,
    ``subtask_share`` the key's part of it, and ``overload`` the subtask's load over the
    mean subtask load (:func:`explorer.analysis.distribution.overload`, in the measure
    ``overload_by``, the same whatever ``by`` is).

    By traffic, only keys with a known count are listed: an operator without traffic
    data gives no rows. Ties are ranked by entries, then by key.
    """
    metric = _check_by(by)
    if heavy_hitters is None and _ranges.needs_ranges(source, operator, state):
        return _hot_keys_streamed(source, n, metric, operator, state, parallelism, max_parallelism)
    df = frame(source, LOAD_COLUMNS, operator, state)
    lays = layouts(source, df, operator, parallelism, max_parallelism)
    hh = _heavy_hitters(source, heavy_hitters)
    kt = _key_stats(df, lays, hh, source, operator, state)
    rec_kg = source.metrics() if is_snapshot(source) else None
    parts = []
    for name, lay in sorted(lays.items()):
        g = kt.of_operator(name)
        m = _metric_of(g, metric)
        loads = _subtask_loads(kt, lay, m, rec_kg)
        top = g.to_frame(_top(g, m, n))
        if m == "records":
            top = _with_sketch_only_keys(top, g, hh, lay, partitioner(source))
            top = _ranked(top, m).head(n)
        if not len(top):
            continue
        total = float(loads.sum()) or float(g.column(m).sum())
        ov_loads, ov_by = _overload_loads(kt, lay, rec_kg)
        parts.append(rank_hot_key_rows(top, m, loads, total, ov_loads, ov_by))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in HOT_KEY_COLUMNS})
    return pd.concat(parts, ignore_index=True)[HOT_KEY_COLUMNS]


def rank_hot_key_rows(top: pd.DataFrame, m: str, loads: np.ndarray, total: float, ov_loads: np.ndarray,
                      ov_by: str) -> pd.DataFrame:
    """The ranked rows of one operator's hottest keys (``top``, sorted by metric ``m``) with rank, the
    key's share of ``total``, its subtask's load (``loads`` per subtask) and share of it, and the
    subtask's overload by ``ov_by`` (from ``ov_loads``); shared by the local and the Spark analyses."""
    top = top.reset_index(drop=True)
    values = top[m].astype("float64").to_numpy()
    top.insert(0, "rank", np.arange(1, len(top) + 1))
    top.insert(2, "by", m)
    top["share"] = values / total if total else np.nan
    sub = top["subtask"].to_numpy().astype(np.int64)
    top["subtask_load"] = loads[sub]
    with np.errstate(divide="ignore", invalid="ignore"):
        top["subtask_share"] = np.where(loads[sub] > 0, values / loads[sub], np.nan)
    top["overload"] = overload(ov_loads, sub)
    top["overload_by"] = ov_by
    return top


def _tie_order(keys: pd.Series | np.ndarray) -> np.ndarray:
    """Keys as sort values for ties: numbers by value, other keys by their text (as :func:`_key_order`)."""
    keys = list(keys)
    if keys and all(isinstance(k, (int, float, np.integer, np.floating)) and not isinstance(k, bool) for k in keys):
        return np.asarray(keys, dtype=np.float64)
    return np.array([str(k) for k in keys], dtype=object)


def _ranked(top: pd.DataFrame, m: str) -> pd.DataFrame:
    """``top`` ordered by ``m`` (more first), then entries (more first), then by key (see the module doc)."""
    if not len(top):
        return top
    v = top[m].astype("float64").fillna(-1).to_numpy()
    order = np.lexsort((_rank_of(_tie_order(top["key"])), -top["entries"].to_numpy(dtype=np.float64), -v))
    return top.iloc[order].reset_index(drop=True)


def _rank_of(values: np.ndarray) -> np.ndarray:
    rank = np.empty(len(values), dtype=np.int64)
    rank[np.argsort(values, kind="stable")] = np.arange(len(values))
    return rank


# --- hot keys, skew and salting streamed over key-group ranges (a Snapshot over its memory budget) ----------

def _value_counts(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(v, return_counts=True)`` of integers: counted with ``np.bincount`` when they are
    non-negative and their largest is not far above their number (entries and bytes of the keys of a
    range: a count per value instead of a sort of millions), sorted otherwise."""
    if len(v) and v.dtype.kind in "iu":
        lo, hi = int(v.min()), int(v.max())
        if lo >= 0 and hi <= 4 * len(v) + 1024:
            counts = np.bincount(v, minlength=0)
            vals = np.flatnonzero(counts)
            return vals.astype(v.dtype, copy=False), counts[vals].astype(np.int64)
    vals, counts = np.unique(v, return_counts=True)
    return vals, counts.astype(np.int64, copy=False)


@dataclasses.dataclass
class _OperatorPass:
    """What one pass over the key-group ranges gathers of one operator (sums exact range by range)."""

    tops: dict = dataclasses.field(default_factory=dict)  # metric -> ranked candidate rows (each range's top n)
    loads: dict = dataclasses.field(default_factory=dict)  # metric -> per-subtask sums
    hist: dict = dataclasses.field(default_factory=dict)  # metric -> (values, counts) over the keys (known only)
    keys: int = 0
    known: bool = False  # some key held in state has a traffic count

    def add_hist(self, metric: str, v: np.ndarray) -> None:
        self.merge_hist(metric, *_value_counts(v))

    def merge_hist(self, metric: str, vals: np.ndarray, counts: np.ndarray) -> None:
        if metric in self.hist:
            pv, pc_ = self.hist[metric]
            vals, inv = np.unique(np.concatenate([pv, vals]), return_inverse=True)
            counts = np.bincount(inv, weights=np.concatenate([pc_, counts]).astype(np.float64)).astype(np.int64)
        self.hist[metric] = (vals, counts)


def _kernel_loads(g: KeyTable, p: int) -> None:
    """Puts the four per-subtask loads of a large table on it (:meth:`KeyTable.subtask_loads`'s memo) from
    one pass of :func:`._hot_kernels.subtask_sums`; small tables and other dtypes keep the bincounts."""
    cols = (g.subtask, g.entries, g.bytes, g.records)
    if len(g) < KERNEL_ROWS or any(c is None or c.dtype.kind != "i" for c in cols):
        return
    from . import _hot_kernels  # numba: loaded by the first large range, not by import explorer

    out = np.empty((4, p), dtype=np.float64)
    if _hot_kernels.subtask_sums(*cols, p, out):
        for i, metric in enumerate(("entries", "bytes", "keys", "records")):
            g.memo.setdefault(("loads", metric, p), out[i].copy())


def _range_summary(v: Any, n: int, operator, state, parallelism, max_parallelism) -> dict[str, dict]:
    """What the pass keeps of one range, per operator: keys, whether traffic is known, per-subtask loads, each
    measure's top ``n`` rows and value counts (small beside the range: computed on the thread that loaded it)."""
    df = frame(v, LOAD_COLUMNS, operator, state)
    lays = layouts(v, df, operator, parallelism, max_parallelism)
    hh = _snapshot_sketch(v)
    kt = _key_stats(df, lays, hh, v, operator, state)
    scheme = partitioner(v)
    out: dict[str, dict] = {}
    for name, lay in lays.items():
        g = kt.of_operator(name)
        _kernel_loads(g, lay.parallelism)
        loads = {metric: g.subtask_loads(metric, lay.parallelism) for metric in ("entries", "bytes", "keys", "records")}
        tops, hist = {}, {}
        for metric, sort_by in (("entries", "entries"), ("bytes", "bytes"), ("records", "records"),
                                ("records_held", "records")):
            top = g.to_frame(_top(g, sort_by, n))
            if metric == "records":
                top = _with_sketch_only_keys(top, g, hh, lay, scheme)
            tops[metric] = top
            if metric == "records_held":
                continue
            known = g.records_known if metric == "records" else None
            values = g.column(metric).astype(np.int64, copy=False)  # (read only: no copy of a range's keys)
            hist[metric] = _value_counts(values if known is None else values[known])
        out[name] = {"keys": len(g), "known": bool(g.records_known is not None and g.records_known.any()),
                     "loads": loads, "tops": tops, "hist": hist}
    return out


def _key_pass(source: Source, n: int, operator, state, parallelism, max_parallelism) -> dict[str, _OperatorPass]:
    """One pass over the ranges of ``source``: per operator the top ``n`` keys of each measure, per-subtask
    loads and value histograms (kept on the Snapshot). Two ranges at a time on two threads (each range's
    summary, :func:`_range_summary`, built on the thread that loaded it), merged here in range order."""
    def build() -> dict[str, _OperatorPass]:
        out: dict[str, _OperatorPass] = {}

        def per_range(v: Any) -> dict[str, dict]:
            return _range_summary(v, n, operator, state, parallelism, max_parallelism)

        for summary in _ranges.ranges("keys", source, operator=operator, state=state, columns=KEY_PASS_COLUMNS,
                                      ahead=True).map(per_range):
            for name, part in summary.items():
                acc = out.setdefault(name, _OperatorPass())
                acc.keys += part["keys"]
                acc.known = acc.known or part["known"]
                for metric, loads in part["loads"].items():
                    acc.loads[metric] = acc.loads.get(metric, 0) + loads
                for metric, top in part["tops"].items():
                    sort_by = "entries" if metric == "entries" else "bytes" if metric == "bytes" else "records"
                    prev = acc.tops.get(metric)
                    both = top if prev is None or not len(prev) else pd.concat([prev, top], ignore_index=True)
                    acc.tops[metric] = _ranked(both, sort_by).head(n)
                for metric, (vals, counts) in part["hist"].items():
                    acc.merge_hist(metric, vals, counts)
        return out

    key = ("streamed_keys", filter_key(operator, state), n, parallelism, max_parallelism)
    return source.analysis_cache.memo(key, build)


def _streamed_loads(acc: _OperatorPass, lay: Layout, metric: str, rec_kg: pd.DataFrame | None) -> np.ndarray:
    """:func:`_subtask_loads` from a pass: the traffic counters where the snapshot has them, else the sums."""
    if metric == "records" and rec_kg is not None and len(rec_kg):
        r = rec_kg[rec_kg["operator"] == lay.operator]
        sub = operator_indices_for_key_groups(lay.max_parallelism, lay.parallelism, r["key_group"].to_numpy())
        return np.bincount(sub, weights=r["records"].to_numpy(dtype=np.float64), minlength=lay.parallelism)
    return np.asarray(acc.loads.get(metric, np.zeros(lay.parallelism)), dtype=np.float64)


def _streamed_overload(acc: _OperatorPass, lay: Layout, rec_kg: pd.DataFrame | None) -> tuple[np.ndarray, str]:
    if rec_kg is not None and len(rec_kg):
        r = rec_kg[rec_kg["operator"] == lay.operator]
        if len(r) and r["records"].sum() > 0:
            return _streamed_loads(acc, lay, "records", rec_kg), "records"
    return _streamed_loads(acc, lay, "bytes", None), "bytes"


def _resolved(acc: _OperatorPass, metric: str) -> str:
    if metric != "auto":
        return metric
    return "records" if acc.known else "bytes"


def _hot_keys_streamed(source: Source, n: int, metric: str, operator, state, parallelism,
                       max_parallelism) -> pd.DataFrame:
    lays = layouts(source, _NO_ROWS, operator, parallelism, max_parallelism)
    passed = _key_pass(source, max(n, 1), operator, state, parallelism, max_parallelism)
    rec_kg = source.metrics()
    parts = []
    for name, lay in sorted(lays.items()):
        acc = passed.get(name)
        if acc is None:
            continue
        m = _resolved(acc, metric)
        top = acc.tops.get(m)
        if top is None or not len(top):
            continue
        top = top.head(n).copy()
        loads = _streamed_loads(acc, lay, m, rec_kg)
        total = float(loads.sum()) or float(np.sum(acc.loads.get(m, 0)))
        ov_loads, ov_by = _streamed_overload(acc, lay, rec_kg)
        parts.append(rank_hot_key_rows(top, m, loads, total, ov_loads, ov_by))
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in HOT_KEY_COLUMNS})
    return pd.concat(parts, ignore_index=True)[HOT_KEY_COLUMNS]


#: the frame :func:`._common.layouts` is given for a Snapshot streamed over ranges (it reads the metadata only)
_NO_ROWS = pd.DataFrame({c: pd.Series(dtype=object) for c in LOAD_COLUMNS})


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
                         "entries": 0, "bytes": 0,
                         "records": pd.array(extra["count"].to_numpy().astype(np.int64), dtype="Int64"),
                         "records_error": pd.array(extra["error"].to_numpy().astype(np.int64), dtype="Int64")})
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


SKEW_COLUMNS = ["operator", "by", "keys", "total", "gini", "top_1pct_share", "top_key", "top_key_share",
                "known_keys", "known_share"]


def key_skew(source: Source | pd.DataFrame, by: str = "auto", *, operator: str | Iterable[str] | None = None,
             state: str | Iterable[str] | None = None, max_parallelism: int | None = None) -> pd.DataFrame:
    """Skew of keys per operator: ``operator, by, keys, total, gini, top_1pct_share, top_key, top_key_share,``
    ``known_keys, known_share``.

    By traffic the figures cover the keys whose count the sketch knows (``known_keys`` of
    ``keys``), and ``known_share`` is their part of the operator's counted traffic (1.0 for
    bytes and entries); an operator without traffic data gets NaN figures. ``source`` may be
    a :func:`key_stats` result.
    """
    metric = _check_by(by)
    groups: list[tuple[str, np.ndarray, np.ndarray, Any, float | None]] = []
    if isinstance(source, pd.DataFrame) and "entries" in source.columns and "size_bytes" not in source.columns:
        for name, g in source.groupby("operator", sort=True, observed=True):
            m = metric if metric != "auto" else ("records" if "records" in g and g["records"].notna().any()
                                                 else "bytes")
            col = g[m]
            known = col.notna().to_numpy()
            groups.append((str(name), m, col.fillna(0).to_numpy(dtype=np.int64), known,
                           lambda i, g=g: g["key"].iloc[i], None, None))
    elif _ranges.needs_ranges(source, operator, state):
        return _key_skew_streamed(source, metric, operator, state, max_parallelism)
    else:
        df = frame(source, LOAD_COLUMNS, operator, state)
        lays = layouts(source, df, operator, None, max_parallelism)
        kt = _key_stats(df, lays, _heavy_hitters(source, None), source, operator, state)
        rec_kg = source.metrics() if is_snapshot(source) else None
        for name in sorted(n for n in kt.op_names if n in lays):
            g = kt.of_operator(name)
            m = _metric_of(g, metric)
            known = g.records_known if m == "records" else np.ones(len(g), dtype=bool)
            counted = None
            if m == "records" and rec_kg is not None and len(rec_kg):
                counted = float(rec_kg.loc[rec_kg["operator"] == name, "records"].sum()) or None
            first = _top(g, m, 1)  # the top key as hot_keys ranks it (ties: more entries, then by key)
            groups.append((name, m, g.column(m), known, lambda i, g=g: g.values.take([g.key[i]])[0], counted,
                           int(first[0]) if len(first) else None))
    rows = []
    for name, m, v_all, known, key_at, counted, first in groups:
        pos = np.flatnonzero(known)
        v = v_all[pos]
        total = float(v.sum())
        if m == "records" and not len(v):
            rows.append({"operator": name, "by": m, "keys": len(v_all), "total": np.nan, "gini": np.nan,
                         "top_1pct_share": np.nan, "top_key": None, "top_key_share": np.nan, "known_keys": 0,
                         "known_share": 0.0})
            continue
        top = int(np.argmax(v)) if len(v) else 0
        if first is not None:  # the ranked top key (same value as the argmax)
            top = int(np.searchsorted(pos, first))
        g_, share = _skew(v)
        known_share = 1.0 if m != "records" else (min(1.0, total / counted) if counted else 1.0)
        rows.append({"operator": name, "by": m, "keys": len(v_all), "total": total, "gini": g_,
                     "top_1pct_share": share,
                     "top_key": key_at(int(pos[top])) if len(v) else None,
                     "top_key_share": float(v[top] / total) if total else 0.0,
                     "known_keys": int(len(v)), "known_share": known_share})
    return pd.DataFrame(rows, columns=SKEW_COLUMNS)


def salted_key(key: Any, i: int) -> str:
    """The ``i``-th sub-key of a salted key: ``f"{key}#{i}"`` (see the module doc)."""
    return f"{key}#{i}"


def salting_whatif(source: Source, keys: Any = None, n: int = 4, *, operator: str | Iterable[str] | None = None,
                   state: str | Iterable[str] | None = None, parallelism: int | None = None,
                   max_parallelism: int | None = None, by: str = "auto") -> pd.DataFrame:
    """Per-subtask loads before and after splitting ``keys`` into ``n`` sub-keys ``f"{k}#{i}"`` each.

    ``keys`` is one key or a list of keys (default: each operator's hottest key ``by`` the
    default ranking of :func:`hot_keys`: traffic where counted, else bytes). Without
    ``operator=``, every keyed operator that holds the keys is shown (the default key: every
    keyed operator). Columns: ``operator, scenario ("before" | "after"), parallelism,
    subtask, entries, bytes, keys, records, salted`` where ``records`` is the traffic per
    subtask (``<NA>`` when the snapshot did not count it) and ``salted`` names the salted keys.
    The measure that shows the effect of salting is the traffic: see :func:`salting_measure`.
    """
    if n < 1:
        raise AnalysisError(f"n must be at least 1 sub-key, found {n}")
    metric = _check_by(by)
    given = None
    if keys is not None:
        # one key, unless a list of keys: a key may itself be a tuple or a dict (a Flink Row or Tuple2 key)
        many = isinstance(keys, (list, set, frozenset, np.ndarray, pd.Series, pd.Index, Iterator))
        given = list(keys) if many else [keys]
    if _ranges.needs_ranges(source, operator, state):
        return _salting_streamed(source, given, n, metric, by, operator, state, parallelism, max_parallelism)
    df = frame(source, LOAD_COLUMNS, operator, state)
    lays = layouts(source, df, operator, parallelism, max_parallelism)
    kt = _key_stats(df, lays, _heavy_hitters(source, None), source, operator, state)
    kv = kt.values
    rec_kg = source.metrics() if is_snapshot(source) else None
    out = []
    for name, lay in sorted(lays.items()):
        g = kt.of_operator(name)
        if not len(g):
            continue
        if given is None:
            rows = _top(g, _metric_of(g, metric), 1)
            if not len(rows):
                rows = _top(g, "bytes", 1)
        else:
            codes = kv.codes_of(given)
            wanted = np.unique(codes[codes >= 0])
            pos = np.minimum(np.searchsorted(g.key, wanted), len(g) - 1)
            rows = pos[g.key[pos] == wanted]
            if len(rows) < len(given):
                continue
        out.append(_salt(g.take(rows), g, lay, n, rec_kg, partitioner(source)))
    if not out:
        raise AnalysisError(f"{getattr(source, 'path', 'the data')}: found no state for the keys {given!r} in the "
                            f"keyed operators {sorted(lays)}; expected keys that hold state in one of them")
    return pd.concat(out, ignore_index=True)


def salting_measure(whatif: pd.DataFrame) -> str:
    """The column of a :func:`salting_whatif` that shows what salting does: ``records`` (traffic)
    where known, else ``bytes``."""
    if "records" in whatif and whatif["records"].notna().any() and whatif["records"].fillna(0).sum() > 0:
        return "records"
    return "bytes"


def _salt(hot: KeyTable, g: KeyTable, lay: Layout, n: int, rec_kg: pd.DataFrame | None, scheme: str) -> pd.DataFrame:
    p, m = lay.parallelism, lay.max_parallelism
    before = {m_: g.subtask_loads(m_, p) for m_ in ("entries", "bytes", "keys")}
    has_traffic = rec_kg is not None and len(rec_kg) and bool(
        (rec_kg["operator"] == lay.operator).any()) and bool(hot.records_known is not None and hot.records_known.all())
    if has_traffic:
        before["records"] = _subtask_loads(g, lay, "records", rec_kg)
    subs, ents, byts, recs = [], [], [], []
    for i_, key in enumerate(g.values.take(hot.key)):  # the few salted keys
        kg = key_groups_for([salted_key(key, i) for i in range(n)], m, scheme)
        subs.append(operator_indices_for_key_groups(m, p, kg))
        e, b, r = int(hot.entries[i_]), int(hot.bytes[i_]), int(hot.records[i_]) if hot.records is not None else 0
        ents.append(np.full(n, e // n) + (np.arange(n) < e % n))
        byts.append(np.full(n, b // n) + (np.arange(n) < b % n))
        recs.append(np.full(n, r // n) + (np.arange(n) < r % n))

    def loads(sub, **w) -> dict[str, np.ndarray]:
        sub = np.asarray(sub, dtype=np.int64)
        d = {k: np.bincount(sub, weights=np.asarray(v, np.float64), minlength=p) for k, v in w.items()}
        d["keys"] = np.bincount(sub, minlength=p).astype(np.float64)
        return d

    removed = loads(hot.subtask, entries=hot.entries, bytes=hot.bytes, records=hot.records)
    added = loads(np.concatenate(subs), entries=np.concatenate(ents), bytes=np.concatenate(byts),
                  records=np.concatenate(recs))
    after = {k: before[k] - removed[k] + added[k] for k in before}
    salted = ", ".join(str(k) for k in g.values.take(hot.key))
    out = []
    for scenario, ld in (("before", before), ("after", after)):
        frame_ = pd.DataFrame({"operator": lay.operator, "scenario": scenario, "parallelism": p,
                               "subtask": np.arange(p),
                               **{k: np.rint(ld[k]).astype(np.int64) for k in ("entries", "bytes", "keys")}})
        frame_["records"] = (pd.array(np.rint(ld["records"]).astype(np.int64), dtype="Int64") if "records" in ld
                             else pd.array([pd.NA] * p, dtype="Int64"))
        frame_["salted"] = salted
        out.append(frame_)
    return pd.concat(out, ignore_index=True)


def _skew_of_histogram(values: np.ndarray, counts: np.ndarray, fraction: float = 0.01) -> tuple[float, float]:
    """:func:`_skew` of the loads given as distinct ``values`` (ascending) and how many keys have each."""
    counts = counts.astype(np.float64)
    n = counts.sum()
    values = values.astype(np.float64)
    total = float((values * counts).sum())
    if n == 0 or total == 0:
        return 0.0, 0.0
    k = max(1, int(np.ceil(fraction * n)))
    before = np.concatenate([[0.0], np.cumsum(counts)[:-1]])
    rank_sum = counts * before + counts * (counts + 1) / 2
    g_ = float((2 * (values * rank_sum).sum()) / (n * total) - (n + 1) / n)
    desc_counts, desc_values = counts[::-1], values[::-1]
    taken = np.minimum(desc_counts, np.maximum(0, k - np.concatenate([[0.0], np.cumsum(desc_counts)[:-1]])))
    return g_, float((taken * desc_values).sum() / total)


def _key_skew_streamed(source: Source, metric: str, operator, state, max_parallelism) -> pd.DataFrame:
    lays = layouts(source, _NO_ROWS, operator, None, max_parallelism)
    passed = _key_pass(source, 10, operator, state, None, max_parallelism)
    rec_kg = source.metrics()
    rows = []
    for name in sorted(n_ for n_ in passed if n_ in lays):
        acc = passed[name]
        if not acc.keys:
            continue
        m = _resolved(acc, metric)
        values, counts = acc.hist.get(m, (np.zeros(0), np.zeros(0)))
        known_keys = int(counts.sum())
        if m == "records" and not known_keys:
            rows.append({"operator": name, "by": m, "keys": acc.keys, "total": np.nan, "gini": np.nan,
                         "top_1pct_share": np.nan, "top_key": None, "top_key_share": np.nan, "known_keys": 0,
                         "known_share": 0.0})
            continue
        total = float((values.astype(np.float64) * counts).sum())
        g_, share = _skew_of_histogram(values, counts)
        counted = None
        if m == "records" and rec_kg is not None and len(rec_kg):
            counted = float(rec_kg.loc[rec_kg["operator"] == name, "records"].sum()) or None
        known_share = 1.0 if m != "records" else (min(1.0, total / counted) if counted else 1.0)
        top = acc.tops["records_held" if m == "records" else m]  # keys held in state only
        rows.append({"operator": name, "by": m, "keys": acc.keys, "total": total, "gini": g_,
                     "top_1pct_share": share, "top_key": top["key"].iloc[0] if len(top) else None,
                     "top_key_share": float(top[m].iloc[0] / total) if total and len(top) else 0.0,
                     "known_keys": known_keys if m == "records" else acc.keys, "known_share": known_share})
    return pd.DataFrame(rows, columns=SKEW_COLUMNS)


def _salting_streamed(source: Source, given: list | None, n: int, metric: str, by: str, operator, state,
                      parallelism, max_parallelism) -> pd.DataFrame:
    """:func:`salting_whatif` of a Snapshot over its budget: the salted keys' own key groups are read (a
    view of those only), the loads of every other key come from one pass over the ranges."""
    lays = layouts(source, _NO_ROWS, operator, parallelism, max_parallelism)
    passed = _key_pass(source, 10, operator, state, parallelism, max_parallelism)
    scheme = partitioner(source)
    rec_kg = source.metrics()
    if given is None:
        jobs = []
        for name in sorted(lays):
            acc = passed.get(name)
            if acc is None or not acc.keys:
                continue
            m = _resolved(acc, metric)
            top = acc.tops["records_held" if m == "records" else m]
            if not len(top):
                top = acc.tops["bytes"]
            jobs.append(([top["key"].iloc[0]], [name]))
    else:
        jobs = [(given, operator)]
    out = []
    for keys_, ops in jobs:
        kgs: set[int] = set()
        for name, lay in lays.items():
            if ops is None or name in ({ops} if isinstance(ops, str) else set(ops)):
                kgs |= {int(k) for k in key_groups_for(list(keys_), lay.max_parallelism, scheme)}
        v = _ranges.view(source, min(kgs), max(kgs), kgs)
        try:
            part = salting_whatif(v, keys_, n, operator=ops, state=state, parallelism=parallelism,
                                  max_parallelism=max_parallelism, by=by)
        except AnalysisError:
            continue
        for name, idx in part.groupby("operator", sort=False).indices.items():
            lay, acc = lays[name], passed[name]
            rows = part.iloc[idx]
            before = rows.index[rows["scenario"] == "before"]
            after = rows.index[rows["scenario"] == "after"]
            for col in ("entries", "bytes", "keys", "records"):
                if col == "records" and part.loc[before, col].isna().all():
                    continue
                whole = np.rint(_streamed_loads(acc, lay, col, rec_kg)).astype(np.int64)
                vb = part.loc[before, col].to_numpy(dtype=np.int64)
                va = part.loc[after, col].to_numpy(dtype=np.int64)
                dtype = part[col].dtype
                part.loc[before, col] = pd.array(whole, dtype=dtype)
                part.loc[after, col] = pd.array(whole - vb + va, dtype=dtype)
        out.append(part)
    if not out:
        raise AnalysisError(f"{getattr(source, 'path', 'the data')}: found no state for the keys {given!r} in the "
                            f"keyed operators {sorted(lays)}; expected keys that hold state in one of them")
    return pd.concat(out, ignore_index=True)
