"""The analyses on Spark: the same answers as :mod:`explorer.analysis`, for state bigger than one machine.

Each function reads the snapshot through the ``state-explorer`` data source
(:mod:`explorer.distributed.datasource`: the executors read their partitions of the snapshot
themselves, only the columns the answer needs) and lets Spark aggregate; only the
aggregates come back to the driver (one row per key group, per state, per time window, or
the ``n`` hottest keys), never the rows. The driver opens the snapshot's metadata (layouts,
creation time, TTLs, the traffic sketch), as :func:`explorer.open` does.

::

    from explorer.distributed import analysis
    from explorer.spark import get_spark
    spark = get_spark()                      # local[2]; get_spark("spark://host:7077") for a cluster
    analysis.key_group_distribution("s3://.../savepoint-7", spark=spark)
    analysis.hot_keys(path, n=20, by="bytes")
    analysis.diff_summary(path_a, path_b)            # counts only; analysis.diff(a, b) has a row per key

``source`` is a snapshot path (opened as ``explorer.open`` would, reader options such as
``ttl=`` or ``jars=`` passed on) or a DataFrame of :func:`explorer.spark.read_state`
(then ``max_parallelism=`` is needed where the snapshot's metadata would give it, as for a
pandas DataFrame in :mod:`explorer.analysis`). Keys come back as Python values (decoded from
the data source's JSON text of the key).

Answers equal the local ones column for column; rows come sorted by operator and state (the
local analyses keep the order of the snapshot's pieces). :func:`diff` returns the per-key
comparison as a Spark DataFrame (it has a row per key; ``.cache()`` it to ask it several
questions); :func:`diff_summary` and :func:`growth_by_key` bring back its aggregates, :func:`collect_diff` its rows
as the local diff's pandas frame (same columns and dtypes). For two snapshot paths
of the same max parallelism the diff runs range by range in the partitions (``aggregate=diff`` of the data
source: no join across the cluster), and ``diff_summary(path_a, path_b)`` brings back counts only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..analysis import keyed_operators, subtask_loads
from ..analysis.diff import KEY_STRINGS
from ..analysis.hotkeys import rank_hot_key_rows
from ..analysis.ttl import TIMELINE_COLUMNS, timeline_frame
from ..errors import AnalysisError
from ..keygroups import check_parallelism, key_groups_for, operator_indices_for_key_groups
from ..spark_session import get_spark
from ..stored import StoredSnapshot, open_stored
from .datasource import check_read, from_json, raise_state_error, rank_hot_keys, read_state, release_memory, to_json

__all__ = ["collect_diff", "diff", "diff_summary", "expired_not_cleaned", "growth_by_key", "hot_keys", "key_group_aggregates",
           "key_group_distribution", "state_sizes", "subtask_distribution", "ttl_expiry"]

TIMER_KINDS = ("event_timer", "processing_timer")
METRICS = ("entries", "bytes", "keys", "records")
LOAD_COLUMNS = ("operator", "state", "kind", "key", "key_group", "subtask", "size_bytes")
HOT_KEY_COLUMNS = ["rank", "operator", "by", "key", "key_group", "subtask", "entries", "bytes", "records",
                   "records_error", "share", "subtask_load", "subtask_share", "overload", "overload_by"]
EXPIRED_COLUMNS = ["operator", "state", "ttl_ms", "entries", "bytes", "expired_entries", "expired_bytes",
                   "expired_share", "keys_with_expired", "oldest_expiry"]
DIFF_COLUMNS = ["operator", "state", "key", "status", "entries_a", "entries_b", "entries_delta", "bytes_a",
                "bytes_b", "bytes_delta"]
STATUSES = ("added", "removed", "changed", "unchanged")
BY = {"auto": "auto", "bytes": "bytes", "entries": "entries", "traffic": "records"}
#: the options of :func:`explorer.open` (the readers'), passed to the driver's metadata read as well
_READER_OPTIONS = ("ttl", "jars", "uids", "type_hints", "kryo_version", "pyflink", "batch_id", "verify")


# --- the source: rows on the executors, metadata on the driver -------------------------------------
class _Source:
    """A DataFrame of the data source (the columns asked for) and, for a path, the snapshot's metadata."""

    def __init__(self, source: Any, columns: Iterable[str], operator, state, spark, options: dict[str, Any]):
        self.spark = spark or get_spark()
        self.snap: StoredSnapshot | None = None
        self.json_keys = options.pop("json_keys", True)
        self.path, self.options, self.state = None, dict(options), state
        self._df = None
        if isinstance(source, (str, Path)):
            self.path = source
            self.snap = open_stored(source, **{k: v for k, v in options.items() if k in _READER_OPTIONS})
            self._read = dict(columns=list(columns), operator=_listed(operator), state=_listed(state), **options)
            check_read(source, **self._read)  # a wrong path or option fails now, before any Spark job
        elif hasattr(source, "groupBy") and hasattr(source, "columns"):
            missing = [c for c in columns if c not in source.columns]
            if missing:
                raise AnalysisError(f"the DataFrame lacks the columns {missing}; expected the keyed-state contract "
                                    f"columns of explorer.spark.read_state, found {source.columns}")
            from pyspark.sql import functions as F

            df = source
            if operator is not None:
                df = df.where(F.col("operator").isin(_listed(operator)))
            if state is not None:
                df = df.where(F.col("state").isin(_listed(state)))
            self._df = df
        else:
            raise AnalysisError(f"expected a snapshot path or a Spark DataFrame of explorer.spark.read_state, found "
                                f"{type(source).__name__}")
        self.operator = operator

    @property
    def df(self):
        """The rows as a Spark DataFrame (made when first asked for: an aggregated read does not need it)."""
        if self._df is None:
            self._df = read_state(self.spark, self.path, **self._read)
        return self._df

    def can_aggregate(self) -> bool:
        """Whether the partitions may aggregate what they read (a path whose operators' subtasks own disjoint
        key-group ranges: every key then lies in one partition, and sums over partitions are exact)."""
        if self.snap is None:
            return False
        subs = self.snap.subtasks.dropna(subset=["key_group_start", "key_group_end"])
        for _, g in subs.groupby("operator"):
            g = g.sort_values("key_group_start")
            if (g["key_group_start"].to_numpy()[1:] <= g["key_group_end"].to_numpy()[:-1]).any():
                return False
        return True

    def aggregated(self, aggregate: str, **options: Any) -> pd.DataFrame:
        """The partitions' aggregates (:data:`explorer.distributed.datasource.AGGREGATE_SCHEMA`) of the path."""
        return collect(read_state(self.spark, self.path, aggregate=aggregate, operator=_listed(self.operator),
                                  state=_listed(self.state), **self.options, **options))

    def key(self, text: Any) -> Any:
        return from_json(text) if self.json_keys and isinstance(text, str) else text

    def layouts(self, parallelism: int | None, max_parallelism: int | None) -> dict[str, tuple[int, int]]:
        """``operator -> (parallelism, max parallelism)`` of the keyed operators asked for."""
        out: dict[str, tuple[int, int]] = {}
        wanted = _listed(self.operator)
        if self.snap is not None:
            ops = keyed_operators(self.snap)
            for row in ops.itertuples(index=False):
                if wanted is None or row.operator in wanted:
                    out[row.operator] = (int(row.parallelism), int(row.max_parallelism))
            unknown = set(wanted or ()) - set(out)
            if unknown:
                raise AnalysisError(f"{self.snap.path}: no keyed operator named {sorted(unknown)}; the keyed "
                                    f"operators are {sorted(out)}")
        else:
            from pyspark.sql import functions as F

            got = collect(self.df.groupBy("operator").agg(F.max("subtask").alias("p"), F.max("key_group").alias("kg")))
            for row in got.itertuples(index=False):
                if max_parallelism is None:
                    raise AnalysisError("max_parallelism= is needed for a DataFrame (a snapshot path knows its own); "
                                        f"the largest key group of operator {row.operator!r} is {int(row.kg)}")
                out[row.operator] = (int(row.p) + 1, int(max_parallelism))
        if parallelism is not None or max_parallelism is not None:
            out = {k: (int(parallelism or p), int(max_parallelism or m)) for k, (p, m) in out.items()}
        for p, m in out.values():
            check_parallelism(p, m)
        return out

    def metrics(self) -> pd.DataFrame | None:
        if self.snap is None:
            return None
        try:
            return self.snap.metrics()
        except Exception:  # noqa: BLE001 - formats without per-key-group metrics, as the local analyses
            return None

    def sketch(self) -> pd.DataFrame:
        if self.snap is None:
            return pd.DataFrame(columns=["operator", "key", "count", "error"])
        return self.snap.heavy_hitters()

    def partitioner(self) -> str:
        fmt = self.snap.format if self.snap is not None else ""
        return "spark" if str(fmt).startswith("spark") else "flink"


def _listed(x: str | Iterable[str] | None) -> list[str] | None:
    if x is None:
        return None
    return [x] if isinstance(x, str) else list(x)


def collect(df) -> pd.DataFrame:
    """A (small, aggregated) Spark DataFrame on the driver; a partition's failure raised as the project's error."""
    try:
        return df.toPandas()
    except Exception as exc:  # noqa: BLE001 - Spark's wrapping of an executor's StateExplorerError
        raise_state_error(exc)
        raise


def _non_timer(df):
    from pyspark.sql import functions as F

    return df.where(~F.col("kind").isin(list(TIMER_KINDS)))


def _concat(parts: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    return pd.concat(parts, ignore_index=True)[columns]


# --- key groups ---------------------------------------------------------------------------------------
def _kg_sums(src: _Source, per_key=None) -> pd.DataFrame:
    from pyspark.sql import functions as F

    if isinstance(per_key, pd.DataFrame):  # the partitions' aggregates: summed over partitions
        rows = per_key[per_key["row"] == "key_group"]
        return rows.groupby(["operator", "key_group"], as_index=False)[["entries", "bytes", "keys"]].sum()
    if per_key is None and src.can_aggregate():
        return _kg_sums(src, src.aggregated("key_groups"))
    if per_key is not None:  # every key lives in one key group: its sums are the key group's
        return collect(per_key.groupBy("operator", "key_group").agg(
            F.sum("entries").alias("entries"), F.sum("bytes").alias("bytes"), F.count(F.lit(1)).alias("keys")))
    return collect(_non_timer(src.df).groupBy("operator", "key_group").agg(
        F.count(F.lit(1)).alias("entries"), F.sum("size_bytes").alias("bytes"),
        F.countDistinct("key").alias("keys")))


def _aggregates(src: _Source, lays: dict[str, tuple[int, int]], max_parallelism: int | None,
                per_key=None) -> dict[str, pd.DataFrame]:
    """Per keyed operator: every key group ``0..M-1`` with entries, bytes, keys (zero filled), records (zero
    filled; ``<NA>`` in every key group where the snapshot counted none)."""
    sums = _kg_sums(src, per_key)
    records = src.metrics()
    out = {}
    for name, (_, m) in sorted(lays.items()):
        g = sums[sums["operator"] == name]
        kg = g["key_group"].to_numpy().astype(np.int64)
        if len(kg) and (kg.min() < 0 or kg.max() >= m):
            raise AnalysisError(f"operator {name!r}: key group {int(kg.max())} is outside 0..{m - 1}; "
                                f"is max_parallelism={m} right?")
        frame = pd.DataFrame({"operator": name, "key_group": np.arange(m, dtype=np.int64)})
        for col in ("entries", "bytes", "keys"):
            full = np.zeros(m, dtype=np.int64)
            full[kg] = g[col].fillna(0).to_numpy().astype(np.int64)
            frame[col] = full
        rec = pd.array([pd.NA] * m, dtype="Int64")  # unknown, never 0 (as explorer.analysis gives it)
        if records is not None and len(records) and max_parallelism in (None, m):
            r = records[records["operator"] == name]
            if len(r):
                rec = pd.array(np.rint(np.bincount(r["key_group"].to_numpy().astype(np.int64),
                                                   weights=r["records"].to_numpy(dtype=np.float64), minlength=m)
                                       ).astype(np.int64), dtype="Int64")
        frame["records"] = rec
        out[name] = frame
    return out


def key_group_aggregates(source: Any, *, operator: str | Iterable[str] | None = None,
                         state: str | Iterable[str] | None = None, max_parallelism: int | None = None,
                         spark: Any = None, **options: Any) -> pd.DataFrame:
    """One row per (operator, key group) for every key group: ``entries, bytes, keys, records``
    (:func:`explorer.analysis.key_group_aggregates`; timers left out)."""
    src = _Source(source, LOAD_COLUMNS, operator, state, spark, options)
    lays = src.layouts(None, max_parallelism)
    return _concat(list(_aggregates(src, lays, max_parallelism).values()), ["operator", "key_group", *METRICS])


def key_group_distribution(source: Any, parallelism: int | None = None, *,
                           operator: str | Iterable[str] | None = None, state: str | Iterable[str] | None = None,
                           max_parallelism: int | None = None, spark: Any = None, **options: Any) -> pd.DataFrame:
    """Entries, bytes, keys and records per key group with the subtask owning it at ``parallelism``
    (:func:`explorer.analysis.key_group_distribution`)."""
    src = _Source(source, LOAD_COLUMNS, operator, state, spark, options)
    lays = src.layouts(parallelism, max_parallelism)
    parts = []
    for name, agg in _aggregates(src, lays, max_parallelism).items():
        p, m = lays[name]
        agg.insert(2, "subtask", operator_indices_for_key_groups(m, p, agg["key_group"].to_numpy()))
        parts.append(agg)
    return _concat(parts, ["operator", "key_group", "subtask", *METRICS])


def subtask_distribution(source: Any, parallelism: int | None = None, **kw: Any) -> pd.DataFrame:
    """Entries, bytes, keys and records per subtask (:func:`explorer.analysis.subtask_distribution`): the
    operators' totals, one row per subtask."""
    return subtask_loads(key_group_distribution(source, parallelism, **kw))


def state_sizes(source: Any, *, spark: Any = None, **options: Any) -> pd.DataFrame:
    """Per (operator, state): ``kind, entries, bytes, keys`` (:func:`explorer.analysis.state_sizes`; timers
    count as entries of their timer state), sorted by operator and state."""
    from pyspark.sql import functions as F

    src = _Source(source, LOAD_COLUMNS, None, None, spark, options)
    got = collect(src.df.groupBy("operator", "state").agg(
        F.first("kind").alias("kind"), F.count(F.lit(1)).alias("entries"), F.sum("size_bytes").alias("bytes"),
        F.countDistinct("key").alias("keys")))
    cols = ["operator", "state", "kind", "entries", "bytes", "keys"]
    if not len(got):
        return pd.DataFrame({c: pd.Series(dtype=object if c in cols[:3] else np.int64) for c in cols})
    for c in ("entries", "bytes", "keys"):
        got[c] = got[c].fillna(0).astype(np.int64)
    return got.sort_values(["operator", "state"]).reset_index(drop=True)[cols]


# --- hot keys -----------------------------------------------------------------------------------------
def _ranked(df, metric: str, n: int):
    """The ``n`` top rows of per-key sums per operator: ``metric`` falling, then entries, then the key
    (numbers by value, other keys by their text)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    number = F.expr("try_cast(key AS double)")
    text = F.when(F.col("key").startswith('"'), F.expr("substring(key, 2, length(key) - 2)")).otherwise(F.col("key"))
    w = Window.partitionBy("operator").orderBy(F.desc(metric), F.desc("entries"), number.asc_nulls_last(), text.asc())
    return df.withColumn("rank", F.row_number().over(w)).where(F.col("rank") <= n)


def _per_key(df):
    from pyspark.sql import functions as F

    return _non_timer(df).groupBy("operator", "key").agg(
        F.min("key_group").alias("key_group"), F.count(F.lit(1)).alias("entries"),
        F.sum("size_bytes").alias("bytes"))


def hot_keys(source: Any, n: int = 10, by: str = "auto", *, operator: str | Iterable[str] | None = None,
             state: str | Iterable[str] | None = None, parallelism: int | None = None,
             max_parallelism: int | None = None, spark: Any = None, **options: Any) -> pd.DataFrame:
    """The ``n`` hottest keys of each operator ``by`` traffic, bytes or entries, and the subtask each overloads
    (:func:`explorer.analysis.hot_keys`, the same columns and figures).

    Spark sums every key's entries and bytes and ranks them per operator; the driver gets the
    ``n`` top keys, the per-key-group sums (for the subtask loads) and the snapshot's traffic
    sketch (keys ranked by traffic are the sketch's, looked up in the state).
    """
    from pyspark import StorageLevel

    if by not in BY:
        raise AnalysisError(f"unknown ranking by={by!r}; expected one of {list(BY)}")
    metric = BY[by]

    src = _Source(source, LOAD_COLUMNS, operator, state, spark, options)
    lays = src.layouts(parallelism, max_parallelism)
    if src.can_aggregate():  # the partitions rank their own keys: only aggregates leave them
        return _hot_keys(src, None, lays, metric, n, max_parallelism)
    per_key = _per_key(src.df).persist(StorageLevel.MEMORY_AND_DISK)  # the snapshot is read once, not per question
    try:
        return _hot_keys(src, per_key, lays, metric, n, max_parallelism)
    finally:
        per_key.unpersist()


def _hot_keys(src: _Source, per_key, lays: dict[str, tuple[int, int]], metric: str, n: int,
              max_parallelism: int | None) -> pd.DataFrame:
    from pyspark.sql import functions as F

    hh = src.sketch()
    hh = hh[hh["operator"].isin(list(lays))] if len(hh) else hh
    sketch_json = {}
    if len(hh):
        hh = hh.assign(_json=[to_json(k) for k in hh["key"]])
        sketch_json = {(op, j): (int(c), int(e)) for op, j, c, e in zip(hh["operator"], hh["_json"], hh["count"],
                                                                        hh["error"])}
    pushed = None
    if per_key is None:  # one read: key-group sums, each partition's top keys, and the sketch's keys
        ranks = {"auto": ["bytes"], "records": []}.get(metric, [metric])
        pushed = src.aggregated("hot_keys", top=n, by=",".join(ranks) or None,
                                keys=sorted({j for _, j in sketch_json}) or None)
        per_key = pushed
    aggs = _aggregates(src, lays, max_parallelism, per_key)
    # the sketch's keys that hold state (for by=auto and by=traffic), and the per-metric top keys
    held = pd.DataFrame(columns=["operator", "key", "key_group", "entries", "bytes"])
    if pushed is not None:
        held = pushed[pushed["row"] == "key"][held.columns]
        held = held[np.array([(op, k) in sketch_json for op, k in zip(held["operator"], held["key"])], dtype=bool)]
    elif sketch_json:
        held = collect(per_key.where(F.col("key").isin(sorted({j for _, j in sketch_json}))))
        held = held[np.array([(op, k) in sketch_json for op, k in zip(held["operator"], held["key"])], dtype=bool)]
    metrics_used: dict[str, str] = {}
    for name in lays:
        known = metric == "records" or (metric == "auto" and (held["operator"] == name).any())
        metrics_used[name] = "records" if known else ("bytes" if metric == "auto" else metric)
    tops = {}
    for m in sorted(set(metrics_used.values()) - {"records"}):
        ops = [k for k, v in metrics_used.items() if v == m]
        if pushed is not None:
            rows = pushed[(pushed["row"] == f"top:{m}") & pushed["operator"].isin(ops)]
            tops[m] = rank_hot_keys(rows[["operator", "key", "key_group", "entries", "bytes"]], m, n)
            continue
        got = collect(_ranked(per_key.where(F.col("operator").isin(ops)), m, n))
        tops[m] = got
    rec_kg = src.metrics()
    parts = []
    for name, (p, mp) in sorted(lays.items()):
        m = metrics_used[name]
        agg = aggs[name]
        sub_of_kg = operator_indices_for_key_groups(mp, p, agg["key_group"].to_numpy())
        if m == "records":
            top = _traffic_top(src, name, hh, held, n, p, mp)
        else:
            top = tops[m][tops[m]["operator"] == name].sort_values("rank")
            top = top[["operator", "key", "key_group", "entries", "bytes"]].reset_index(drop=True)
        if not len(top):
            continue
        top["key_group"] = top["key_group"].astype(np.int64)
        top["subtask"] = operator_indices_for_key_groups(mp, p, top["key_group"].to_numpy())
        for c in ("entries", "bytes"):
            top[c] = top[c].astype(np.int64)
        rec = [sketch_json.get((name, k)) for k in top["key"]]
        top["records"] = pd.array([None if r is None else r[0] for r in rec], dtype="Int64")
        top["records_error"] = pd.array([None if r is None else r[1] for r in rec], dtype="Int64")
        loads = _loads(agg, sub_of_kg, p, m, rec_kg, name, mp)
        if m == "records" and (rec_kg is None or not len(rec_kg)):
            loads = _sketch_loads(held, sketch_json, name, p, mp)
        total = float(loads.sum()) or float(top[m].astype("float64").sum())
        has_records = rec_kg is not None and len(rec_kg) and \
            rec_kg[rec_kg["operator"] == name]["records"].sum() > 0
        ov_by = "records" if has_records else "bytes"
        top = rank_hot_key_rows(top, m, loads, total, _loads(agg, sub_of_kg, p, ov_by, rec_kg, name, mp), ov_by)
        top["key"] = pd.Series([src.key(k) for k in top["key"]], dtype=object)
        parts.append(top)
    return _concat(parts, HOT_KEY_COLUMNS)


def _loads(agg: pd.DataFrame, sub_of_kg: np.ndarray, p: int, metric: str, rec_kg: pd.DataFrame | None,
           name: str, m: int) -> np.ndarray:
    """Per-subtask loads of ``metric`` at parallelism ``p`` (traffic from the snapshot's per-key-group counts)."""
    if metric == "records" and rec_kg is not None and len(rec_kg):
        r = rec_kg[rec_kg["operator"] == name]
        sub = operator_indices_for_key_groups(m, p, r["key_group"].to_numpy())
        return np.bincount(sub, weights=r["records"].to_numpy(dtype=np.float64), minlength=p)
    return np.bincount(sub_of_kg, weights=agg[metric].to_numpy(dtype=np.float64), minlength=p)


def _traffic_top(src: _Source, name: str, hh: pd.DataFrame, held: pd.DataFrame, n: int, p: int,
                 m: int) -> pd.DataFrame:
    """The ``n`` keys of one operator with the most traffic in the sketch, with their state (none for a key the
    sketch counts whose state is gone)."""
    mine = hh[hh["operator"] == name]
    if not len(mine):
        return pd.DataFrame(columns=["operator", "key", "key_group", "entries", "bytes"])
    state = held[held["operator"] == name].set_index("key")
    with_state, without = [], []
    for k, j, c in zip(mine["key"], mine["_json"], mine["count"]):
        if j in state.index:
            s = state.loc[j]
            with_state.append((name, j, int(s["key_group"]), int(s["entries"]), int(s["bytes"]), int(c)))
        else:  # counted by the sketch, its state cleared or expired: its key group from its hash
            kg = int(key_groups_for([k], m, src.partitioner())[0])
            without.append((name, j, kg, 0, 0, int(c)))
    cols = ["operator", "key", "key_group", "entries", "bytes", "_count"]
    held_rows = pd.DataFrame(with_state, columns=cols)
    if len(held_rows):  # as the local ranking: count, entries, then the key (numbers by value, else by text)
        keys = [from_json(j) for j in held_rows["key"]]
        numeric = all(isinstance(k, (int, float)) and not isinstance(k, bool) for k in keys)
        held_rows["_k"] = [float(k) for k in keys] if numeric else [str(k) for k in keys]
        held_rows = held_rows.sort_values(["_count", "entries", "_k"], ascending=[False, False, True],
                                          kind="stable").head(n).drop(columns="_k")
    out = pd.concat([held_rows, pd.DataFrame(without, columns=cols)], ignore_index=True)
    out = out.sort_values(["_count", "entries"], ascending=False, kind="stable").head(n)
    return out.drop(columns="_count").reset_index(drop=True)


def _sketch_loads(top_source: pd.DataFrame, sketch_json: dict, name: str, p: int, m: int) -> np.ndarray:
    """Per-subtask traffic of the keys the sketch counts that hold state (when the snapshot has no per-key-group
    counts), as the local analyses sum them."""
    mine = top_source[top_source["operator"] == name]
    counts = np.array([sketch_json[(name, k)][0] for k in mine["key"]], dtype=np.float64)
    sub = operator_indices_for_key_groups(m, p, mine["key_group"].to_numpy().astype(np.int64))
    return np.bincount(sub, weights=counts, minlength=p)


# --- TTL ----------------------------------------------------------------------------------------------
def _now(src: _Source, now: Any):
    if now is not None:
        if isinstance(now, (int, np.integer)):
            return pd.Timestamp(int(now), unit="ms", tz="UTC")
        ts = pd.Timestamp(now)
        return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
    if src.snap is not None and src.snap.created_at is not None:
        return pd.Timestamp(src.snap.created_at).tz_convert("UTC")
    from pyspark.sql import functions as F

    last = collect(src.df.agg(F.max("last_access").alias("t")))["t"].iloc[0]
    if last is not None and not pd.isna(last):
        ts = pd.Timestamp(last)
        return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
    raise AnalysisError("now= is needed: the data has no snapshot time and no last-access times")


def _ttl_rows(src: _Source):
    from pyspark.sql import functions as F

    return _non_timer(src.df).where(F.col("expires_at").isNotNull()).withColumn(
        "_exp", F.expr("unix_millis(expires_at)"))


def _has_ttl(src: _Source) -> bool:
    return bool(len(collect(_ttl_rows(src).select("operator").limit(1))))


def ttl_expiry(source: Any, now: Any = None, freq: str | pd.Timedelta = "1h", *,
               operator: str | Iterable[str] | None = None, state: str | Iterable[str] | None = None,
               horizon: str | pd.Timedelta | None = None, spark: Any = None, **options: Any) -> pd.DataFrame:
    """Expiry timeline of the states with TTL (:func:`explorer.analysis.ttl_expiry`): per (operator, state)
    the entries already expired at ``now`` (``window = -1``) and those expiring in each ``freq`` after it."""
    from pyspark.sql import functions as F

    src = _Source(source, ("operator", "state", "kind", "key", "last_access", "expires_at", "size_bytes"),
                  operator, state, spark, options)
    if now is None and not _has_ttl(src):
        return pd.DataFrame({c: pd.Series(dtype=object) for c in TIMELINE_COLUMNS})
    t_now = _now(src, now)
    step = pd.Timedelta(freq)
    if step <= pd.Timedelta(0):
        raise AnalysisError(f"freq must be a positive duration, found {freq!r}")
    now_ms = int(t_now.value // 1_000_000)
    step_ms = max(1, int(step.value // 1_000_000))
    rows = _ttl_rows(src)
    expired = collect(rows.where(F.col("_exp") <= now_ms).groupBy("operator", "state").agg(
        F.min("_exp").alias("oldest"), F.count(F.lit(1)).alias("entries"), F.sum("size_bytes").alias("bytes")))
    alive = rows.where(F.col("_exp") > now_ms)
    if horizon is not None:
        alive = alive.where(F.col("_exp") - now_ms < int(pd.Timedelta(horizon).value // 1_000_000))
    windows = collect(alive.withColumn("window", F.floor((F.col("_exp") - now_ms) / step_ms).cast("long"))
                      .groupBy("operator", "state", "window")
                      .agg(F.count(F.lit(1)).alias("entries"), F.sum("size_bytes").alias("bytes")))
    parts = []
    for r in expired.itertuples(index=False):
        parts.append(pd.DataFrame({
            "operator": [r.operator], "state": [r.state], "status": ["expired"], "window": [-1],
            "window_start": [pd.Timestamp(int(r.oldest), unit="ms", tz="UTC")], "window_end": [t_now],
            "entries": [int(r.entries)], "bytes": [int(r.bytes)]}))
    if len(windows):
        w = windows["window"].to_numpy().astype(np.int64)
        parts.append(pd.DataFrame({
            "operator": windows["operator"], "state": windows["state"], "status": "expiring", "window": w,
            "window_start": t_now + pd.to_timedelta(w * step_ms, unit="ms"),
            "window_end": t_now + pd.to_timedelta((w + 1) * step_ms, unit="ms"),
            "entries": windows["entries"].to_numpy().astype(np.int64),
            "bytes": windows["bytes"].to_numpy().astype(np.int64)}))
    return timeline_frame(parts, sort=True)


def expired_not_cleaned(source: Any, now: Any = None, *, operator: str | Iterable[str] | None = None,
                        state: str | Iterable[str] | None = None, spark: Any = None, **options: Any) -> pd.DataFrame:
    """Per state with TTL: entries already expired at ``now`` but still stored
    (:func:`explorer.analysis.expired_not_cleaned`), sorted by operator and state."""
    from pyspark.sql import functions as F

    src = _Source(source, ("operator", "state", "kind", "key", "last_access", "expires_at", "size_bytes"),
                  operator, state, spark, options)
    if now is None and not _has_ttl(src):
        return pd.DataFrame(columns=EXPIRED_COLUMNS)
    t_now = _now(src, now)
    now_ms = int(t_now.value // 1_000_000)
    is_exp = F.col("_exp") <= now_ms
    got = collect(_ttl_rows(src).groupBy("operator", "state").agg(
        F.count(F.lit(1)).alias("entries"), F.sum("size_bytes").alias("bytes"),
        F.count(F.when(is_exp, 1)).alias("expired_entries"),
        F.sum(F.when(is_exp, F.col("size_bytes")).otherwise(0)).alias("expired_bytes"),
        F.countDistinct(F.when(is_exp, F.col("key"))).alias("keys_with_expired"),
        F.min(F.when(is_exp, F.col("_exp"))).alias("oldest"),
        F.first(F.expr("unix_millis(expires_at) - unix_millis(last_access)"), ignorenulls=True).alias("_ttl")))
    ttl: dict[tuple[str, str], int | None] = {}
    if src.snap is not None:
        ttl = {(r.operator, r.state): (None if pd.isna(r.ttl_ms) else int(r.ttl_ms))
               for r in src.snap.states.itertuples()}
    out = []
    for r in got.sort_values(["operator", "state"]).itertuples(index=False):
        entries = int(r.entries)
        expired_entries = int(r.expired_entries)
        out.append({
            "operator": r.operator, "state": r.state,
            "ttl_ms": ttl.get((r.operator, r.state)) if src.snap is not None else
            (None if pd.isna(r._ttl) else int(r._ttl)),
            "entries": entries, "bytes": int(r.bytes), "expired_entries": expired_entries,
            "expired_bytes": int(r.expired_bytes),
            "expired_share": expired_entries / entries if entries else 0.0,
            "keys_with_expired": int(r.keys_with_expired),
            "oldest_expiry": pd.NaT if pd.isna(r.oldest) else pd.Timestamp(int(r.oldest), unit="ms", tz="UTC"),
        })
    result = pd.DataFrame(out, columns=EXPIRED_COLUMNS)
    result["oldest_expiry"] = pd.to_datetime(result["oldest_expiry"], utc=True)
    return result


# --- diff ---------------------------------------------------------------------------------------------
_DIFF_READ = ("operator", "state", "kind", "key", "namespace", "user_key", "value", "size_bytes")


def _side(source: Any, operator, state, spark, options: dict[str, Any]):
    from pyspark.sql import functions as F

    src = _Source(source, _DIFF_READ, operator, state, spark, dict(options))
    return src, src.df.groupBy("operator", "state", "key").agg(
        F.count(F.lit(1)).alias("entries"), F.sum("size_bytes").alias("bytes"),
        F.bit_xor(F.xxhash64("namespace", "user_key", "value")).alias("fp"))


def _diff_read(a: Any, b: Any, operator, state, spark, options: dict[str, Any], keys: str):
    """The ``aggregate=diff`` read of paths ``a`` and ``b`` (rows of
    :data:`explorer.distributed.datasource.DIFF_SCHEMA`): each partition diffs one key-group range of both snapshots,
    planned by the same ranges; None when the snapshots cannot be diffed range by range (a DataFrame given, a
    format whose subtasks overlap, an operator with another max parallelism on each side)."""
    if not (isinstance(a, (str, Path)) and isinstance(b, (str, Path))):
        return None
    src_a = _Source(a, _DIFF_READ, operator, state, spark, dict(options))
    src_b = _Source(b, _DIFF_READ, operator, state, spark, dict(options))
    if not (src_a.can_aggregate() and src_b.can_aggregate()):
        return None
    ma = dict(zip(src_a.snap.operators["operator"], src_a.snap.operators["max_parallelism"]))
    mb = dict(zip(src_b.snap.operators["operator"], src_b.snap.operators["max_parallelism"]))
    if any(ma[k] != mb[k] for k in set(ma) & set(mb) if not (pd.isna(ma[k]) or pd.isna(mb[k]))):
        return None
    opts = {k: v for k, v in options.items() if k != "json_keys"}
    return read_state(src_a.spark, a, aggregate="diff", other=str(b), diff_keys=keys,
                      operator=_listed(operator), state=_listed(state), **opts)


def diff(a: Any, b: Any, *, operator: str | Iterable[str] | None = None, state: str | Iterable[str] | None = None,
         unchanged: bool = True, spark: Any = None, **options: Any):
    """Per (operator, state, key): status and growth from snapshot ``a`` to ``b``
    (:func:`explorer.analysis.diff`), as a Spark DataFrame (one row per key: it stays on the cluster; keys as the
    data source's JSON text). A key is ``changed`` when its entries' count or their contents (namespace, map key
    or list index, value) differ.

    For two snapshot paths whose operators keep their max parallelism, each partition reads one key-group range
    of both snapshots and diffs it with the local diff (every entry of a key lies in one key group of both):
    nothing is joined across the cluster, and ``unchanged=False`` sends only the changed, added and removed keys.
    Otherwise (DataFrames, another max parallelism) the keys are joined in Spark. The DataFrame is computed again
    by each action: ``.cache()`` it to ask it several questions; :func:`diff_summary` of the two paths gives the
    counts without a row per key."""
    from pyspark.sql import functions as F

    agg = _diff_read(a, b, operator, state, spark, options, "all" if unchanged else "changes")
    if agg is not None:
        ea, eb, ba, bb = (F.col(c) for c in ("entries_a", "entries_b", "bytes_a", "bytes_b"))
        return agg.where(F.col("row") == "key").select(
            "operator", "state", "key", "status", ea, eb, (eb - ea).alias("entries_delta"), ba, bb,
            (bb - ba).alias("bytes_delta"))
    _, sa = _side(a, operator, state, spark, options)
    _, sb = _side(b, operator, state, spark, options)
    j = sa.alias("a").join(sb.alias("b"), on=["operator", "state", "key"], how="full_outer")
    ea, eb = F.coalesce(F.col("a.entries"), F.lit(0)), F.coalesce(F.col("b.entries"), F.lit(0))
    ba, bb = F.coalesce(F.col("a.bytes"), F.lit(0)), F.coalesce(F.col("b.bytes"), F.lit(0))
    status = (F.when(F.col("a.entries").isNull(), "added").when(F.col("b.entries").isNull(), "removed")
              .when((F.col("a.fp") != F.col("b.fp")) | (ea != eb), "changed").otherwise("unchanged"))
    out = j.select("operator", "state", "key", status.alias("status"),
                   ea.cast("long").alias("entries_a"), eb.cast("long").alias("entries_b"),
                   (eb - ea).cast("long").alias("entries_delta"), ba.cast("long").alias("bytes_a"),
                   bb.cast("long").alias("bytes_b"), (bb - ba).cast("long").alias("bytes_delta"))
    if not unchanged:
        out = out.where(F.col("status") != "unchanged")
    return out


#: the columns :func:`collect_diff` brings to the driver (the deltas are computed there; ``status`` as its
#: position in :data:`STATUSES`, a byte)
_DIFF_WIRE = ("operator", "state", "key", "status", "entries_a", "entries_b", "bytes_a", "bytes_b")


def collect_diff(d) -> pd.DataFrame:
    """The rows of a :func:`diff` DataFrame ``d`` on the driver, as :func:`explorer.analysis.diff` returns them on
    one machine: its columns and dtypes (``operator``, ``state`` str objects, ``key`` the Arrow-backed
    :data:`~explorer.analysis.diff.KEY_STRINGS` when every key is a str, else Python values decoded from the JSON
    text; ``status`` a Categorical of :data:`STATUSES`; the counts int64), sorted by operator, state and falling
    ``bytes_delta`` (ties in the partitions' order).

    Collected as Arrow batches, not Rows, with less on the wire than ``d.toPandas()`` (the status as a byte, the
    deltas computed here), each batch made compact as it arrives (:func:`_arrow_batches`: operator and state as
    codes, the keys' text in Arrow, the counts in NumPy) and the frame built column by column from them: a
    Python object per string cell (``toPandas()``) peaked at ~970 MB on the driver for 2 M changed rows of
    100 M keys (``benchmarks/results/scale.json``'s Spark section has the figures)."""
    from pyspark.sql import functions as F

    code = F.when(F.col("status") == STATUSES[0], 0)
    for i, s in enumerate(STATUSES[1:-1], start=1):
        code = code.when(F.col("status") == s, i)
    code = code.otherwise(len(STATUSES) - 1).cast("byte")
    wire = d.select(*[code.alias(c) if c == "status" else F.col(c).cast("long") if c.startswith(("entries", "bytes"))
                      else F.col(c) for c in _DIFF_WIRE])
    compact = _Compact()
    try:
        for _ in _arrow_batches(wire, compact.add):
            pass
    except Exception as exc:  # noqa: BLE001 - Spark's wrapping of an executor's StateExplorerError
        raise_state_error(exc)
        raise
    return compact.frame()


def _arrow_batches(df, fn):
    """``fn`` of each Arrow record batch of ``df`` as it reaches the driver, yielded in the partitions' order.

    What ``df.toArrow()`` does (the JVM's ``collectAsArrowToPython``, batches sent in the order the tasks end,
    then their order), except that a batch is handed to ``fn`` when it arrives instead of all batches being held
    until the last one: ``fn`` keeps what it needs of it and the batch's buffer goes. Through pyspark's internals
    (3.5 to 4.x); where they differ, ``toArrow()``'s batches."""
    try:
        from pyspark.errors.exceptions.captured import unwrap_spark_exception
        from pyspark.serializers import UTF8Deserializer, read_int
        from pyspark.sql.pandas.serializers import ArrowCollectSerializer, ArrowStreamSerializer
        from pyspark.traceback_utils import SCCallSiteSync
        from pyspark.util import _load_from_socket
    except ImportError:
        yield from (fn(b) for b in df.toArrow().to_batches())
        return

    class Arriving(ArrowCollectSerializer):
        def load_stream(self, stream):
            parts = [fn(b) for b in ArrowStreamSerializer.load_stream(self, stream)]
            num = read_int(stream)
            if num == -1:  # the JVM's error message follows (server.getResult() raises the exception itself)
                raise RuntimeError(f"collecting the rows failed in Spark: {UTF8Deserializer().loads(stream)}")
            for _ in range(num):
                i = read_int(stream)
                part, parts[i] = parts[i], None
                yield part

    with SCCallSiteSync(df._sc):
        port, secret, server = df._jdf.collectAsArrowToPython()
    try:
        with _load_from_socket((port, secret), Arriving()) as stream:
            yield from stream
    finally:
        with unwrap_spark_exception():
            server.getResult()  # the JVM's exception, if a task failed


class _Compact:
    """The columns of :data:`_DIFF_WIRE` batches (:func:`collect_diff`), made compact batch by batch: operator and
    state as codes into the names met, status as its byte, the keys as Arrow strings when plain JSON strings,
    else Python values, the counts as NumPy int64 (copies: nothing keeps the batch's buffer)."""

    def __init__(self) -> None:
        self.names: dict[str, dict[str, int]] = {"operator": {}, "state": {}}
        self.cols: dict[str, list] = {c: [] for c in _DIFF_WIRE}
        self.pending = 0  # batches added since the last _gather

    def add(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        for c in ("operator", "state"):
            enc = pc.dictionary_encode(batch.column(c))
            seen = self.names[c]
            remap = np.array([seen.setdefault(v, len(seen)) for v in enc.dictionary.to_pylist()], dtype=np.int32)
            self.cols[c].append(remap[enc.indices.to_numpy(zero_copy_only=False)])
        self.cols["key"].append(_keys_from_json(batch.column("key"), arrow=True))
        for c in ("status", "entries_a", "entries_b", "bytes_a", "bytes_b"):
            self.cols[c].append(np.array(batch.column(c).to_numpy(zero_copy_only=False), copy=True))
        self.pending += 1
        if self.pending == self.GATHER:
            self._gather()

    #: batches (Spark's ``maxRecordsPerBatch`` rows each, 10,000 by default) whose NumPy pieces are gathered into one
    #: array: the small pieces' memory is reused by the next batches' instead of staying in the C heap beside the
    #: frame's columns (2 M rows: the driver's peak 524 MB with the pieces kept, the frame itself 166 MB)
    GATHER = 64

    def _gather(self) -> None:
        k, self.pending = self.pending, 0
        for c, parts in self.cols.items():
            if k > 1 and c != "key":
                parts[-k:] = [np.concatenate(parts[-k:])]

    def frame(self) -> pd.DataFrame:
        self._gather()
        release_memory()  # the batches' and small pieces' pages: the frame's columns are new, large allocations
        cols, n = self.cols, sum(len(x) for x in self.cols["status"])
        if not n:
            out = pd.DataFrame({c: pd.Series(dtype=object) for c in ("operator", "state", "key")})
            out["status"] = pd.Categorical([], categories=list(STATUSES))
            for c in ("entries_a", "entries_b", "entries_delta", "bytes_a", "bytes_b", "bytes_delta"):
                out[c] = pd.Series(dtype=np.int64)
            return out[DIFF_COLUMNS]
        built: dict[str, Any] = {}
        rank = {}
        for c in ("operator", "state"):
            names = np.array(sorted(self.names[c]), dtype=object)  # by name: codes in sorted order
            to_sorted = np.empty(len(self.names[c]), dtype=np.int32)
            to_sorted[list(self.names[c].values())] = np.searchsorted(names, list(self.names[c]))
            rank[c] = (names, to_sorted[np.concatenate(cols.pop(c))])
        nbytes = {c: np.concatenate(cols.pop(c)) for c in ("bytes_a", "bytes_b")}
        # by operator, state and falling growth (a - b ascending); stable: ties keep the partitions' order
        order = np.lexsort((nbytes["bytes_a"] - nbytes["bytes_b"], rank["state"][1], rank["operator"][1]))
        for c in ("operator", "state"):
            names, codes = rank.pop(c)
            built[c] = names[codes[order]]
        keys = cols.pop("key")
        if all(isinstance(k, pa.Array) for k in keys):
            built["key"] = KEY_STRINGS.construct_array_type()(pa.chunked_array(keys).take(pa.array(order)))
        else:
            values = np.concatenate([k.to_numpy(zero_copy_only=False) if isinstance(k, pa.Array) else k for k in keys])
            values = values[order]
            strings = pd.api.types.infer_dtype(values, skipna=False) == "string"
            built["key"] = pd.array(values, dtype=KEY_STRINGS) if strings else values
        del keys
        release_memory()
        built["status"] = pd.Categorical.from_codes(np.concatenate(cols.pop("status"))[order].astype(np.int8),
                                                    categories=list(STATUSES))
        for what in ("entries", "bytes"):
            for side in ("a", "b"):
                c = f"{what}_{side}"
                built[c] = (nbytes.pop(c) if what == "bytes" else np.concatenate(cols.pop(c)))[order]
            built[f"{what}_delta"] = built[f"{what}_b"] - built[f"{what}_a"]
        # one frame of these arrays as they are (copy=False: no block of int64 columns copied together)
        return pd.DataFrame({c: built.pop(c) for c in DIFF_COLUMNS}, copy=False)


def diff_frame(parts: Iterable[pa.Table | pa.RecordBatch]) -> pd.DataFrame:
    """:func:`collect_diff`'s frame from Arrow tables or batches of :data:`_DIFF_WIRE` columns."""
    compact = _Compact()
    for part in parts:
        for batch in (part.to_batches() if isinstance(part, pa.Table) else [part]):
            compact.add(batch)
    return compact.frame()


def _keys_from_json(texts: pa.Array, arrow: bool = False):
    """Keys from the data source's JSON text: Arrow strings (``arrow``) or else :data:`KEY_STRINGS` when every one
    is a JSON string without escapes (the quotes cut off in Arrow), else :func:`from_json` of each (lists as
    tuples): an object array (``arrow``), or KEY_STRINGS when all are str."""
    plain = r'^"[^"\\\x00-\x1f]*"$'  # a JSON string without escapes
    if texts.null_count == 0 and len(texts) and pc.all(pc.match_substring_regex(texts, plain)).as_py():
        bare = pc.utf8_slice_codeunits(texts, 1, -1).cast(pa.large_string())  # a new buffer
        return bare if arrow else KEY_STRINGS.construct_array_type()(pa.chunked_array([bare]))
    values = np.empty(len(texts), dtype=object)
    values[:] = [from_json(t) for t in texts.to_pylist()]
    if not arrow and len(values) and pd.api.types.infer_dtype(values, skipna=False) == "string":
        return pd.array(values, dtype=KEY_STRINGS)
    return values


_SUMMARY_COLUMNS = ["operator", "state", "keys_added", "keys_removed", "keys_changed", "keys_unchanged", "entries_a",
                    "entries_b", "entries_growth", "bytes_a", "bytes_b", "bytes_growth", "growth_pct"]


def diff_summary(d, b: Any = None, *, operator: str | Iterable[str] | None = None,
                 state: str | Iterable[str] | None = None, spark: Any = None, **options: Any) -> pd.DataFrame:
    """Per (operator, state): keys added/removed/changed/unchanged and growth
    (:func:`explorer.analysis.diff_summary`), sorted by operator and state; of a :func:`diff` DataFrame ``d``,
    or of two snapshots ``diff_summary(a, b)``: then, where :func:`diff` diffs by key-group ranges, each
    partition sends its totals per (operator, state, status) only, no row per key."""
    from pyspark.sql import functions as F

    if b is not None:
        agg = _diff_read(d, b, operator, state, spark, options, "none")
        if agg is None:
            return diff_summary(diff(d, b, operator=operator, state=state, spark=spark, **options))
        got = collect(agg.where(F.col("row") == "status").groupBy("operator", "state").agg(
            *[F.sum(F.when(F.col("status") == s, F.col("keys")).otherwise(0)).alias(f"keys_{s}") for s in STATUSES],
            *[F.sum(c).alias(c) for c in ("entries_a", "entries_b", "bytes_a", "bytes_b")]))
    else:
        got = collect(d.groupBy("operator", "state").agg(
            *[F.count(F.when(F.col("status") == s, 1)).alias(f"keys_{s}") for s in STATUSES],
            *[F.sum(c).alias(c) for c in ("entries_a", "entries_b", "bytes_a", "bytes_b")]))
    cols = _SUMMARY_COLUMNS
    if not len(got):
        return pd.DataFrame(columns=cols)
    for c in got.columns[2:]:
        got[c] = got[c].fillna(0).astype(np.int64)
    got["entries_growth"] = got["entries_b"] - got["entries_a"]
    got["bytes_growth"] = got["bytes_b"] - got["bytes_a"]
    with np.errstate(divide="ignore", invalid="ignore"):
        got["growth_pct"] = np.where(got["bytes_a"] > 0, 100.0 * got["bytes_growth"] / got["bytes_a"], np.nan)
    return got.sort_values(["operator", "state"]).reset_index(drop=True)[cols]


def growth_by_key(d, n: int = 10) -> pd.DataFrame:
    """Per (operator, key) of a :func:`diff`, summed over states: the ``n`` keys that grew most
    (:func:`explorer.analysis.growth_by_key`; ties by entries, then by operator and key)."""
    from pyspark.sql import functions as F

    cols = ["entries_a", "entries_b", "entries_delta", "bytes_a", "bytes_b", "bytes_delta"]
    g = d.groupBy("operator", "key").agg(*[F.sum(c).alias(c) for c in cols])
    got = collect(g.orderBy(F.desc("bytes_delta"), F.desc("entries_delta"), F.asc("operator"), F.asc("key"))
                  .limit(int(n)))
    for c in cols:
        got[c] = got[c].astype(np.int64)
    got["key"] = pd.Series([from_json(k) if isinstance(k, str) else k for k in got["key"]], dtype=object)
    return got.reset_index(drop=True)[["operator", "key", *cols]]
