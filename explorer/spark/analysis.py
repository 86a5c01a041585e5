"""Analyses on Spark, for keyed state bigger than memory.

The same answers as :mod:`explorer.analysis`, computed with Spark SQL over
Parquet files that hold the keyed-state contract columns (a snapshot's
exported pieces), and returned as the same small pandas DataFrames for
plotting. Only aggregates travel back to the driver, never the rows.

::

    from explorer.spark.analysis import key_group_aggregates, top_keys
    key_group_aggregates("state/*.parquet", max_parallelism=128)
    top_keys("state/*.parquet", n=20, by="bytes")
"""

from __future__ import annotations

import glob
from functools import reduce
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from ..errors import AnalysisError
from .session import get_spark

__all__ = ["export_parquet", "key_group_aggregates", "top_keys"]

TIMER_KINDS = ("event_timer", "processing_timer")


def _files(paths) -> list[Path]:
    if isinstance(paths, (str, Path)):
        paths = [paths]
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(p.rglob("*.parquet")))
        elif p.exists():
            files.append(p)
        else:  # a glob such as state/*.parquet
            files.extend(sorted(Path(f) for f in glob.glob(str(p), recursive=True)))
    if not files:
        raise AnalysisError(f"no Parquet files at {[str(p) for p in paths]}")
    return files


def _frames(spark, paths, operator=None, state=None) -> list:
    """One Spark DataFrame per key type: pieces of different states may store keys of different types."""
    from pyspark.sql import functions as F

    groups: dict[str, list[str]] = {}
    for f in _files(paths):
        schema = pq.read_schema(f)
        missing = [c for c in ("operator", "state", "kind", "key", "key_group", "size_bytes") if c not in schema.names]
        if missing:
            raise AnalysisError(f"{f} lacks the contract columns {missing}; found {schema.names}")
        groups.setdefault(str(schema.field("key").type), []).append(str(f))
    out = []
    for files in groups.values():
        df = spark.read.parquet(*files).where(~F.col("kind").isin(list(TIMER_KINDS)))
        if operator is not None:
            df = df.where(F.col("operator").isin([operator] if isinstance(operator, str) else list(operator)))
        if state is not None:
            df = df.where(F.col("state").isin([state] if isinstance(state, str) else list(state)))
        out.append(df)
    return out


def key_group_aggregates(paths, max_parallelism: int | Mapping[str, int], *, operator=None, state=None,
                         spark=None) -> pd.DataFrame:
    """Per (operator, key group ``0..M-1``): ``entries, bytes, keys, records`` (timers left out).

    Equal to :func:`explorer.analysis.distribution.key_group_aggregates` of the same rows
    (``records`` is 0: traffic counts are snapshot metadata, not keyed-state rows).
    ``max_parallelism`` is one number, or one per operator.
    """
    from pyspark.sql import functions as F

    spark = spark or get_spark()
    aggs = [df.groupBy("operator", "key_group")
            .agg(F.count(F.lit(1)).alias("entries"), F.sum("size_bytes").alias("bytes"),
                 F.countDistinct("key").alias("keys"))
            .toPandas() for df in _frames(spark, paths, operator, state)]
    agg = pd.concat(aggs, ignore_index=True).groupby(["operator", "key_group"], as_index=False).sum()
    parts = []
    for op in sorted(agg["operator"].unique()):
        m = max_parallelism[op] if isinstance(max_parallelism, Mapping) else int(max_parallelism)
        g = agg[agg["operator"] == op]
        kg = g["key_group"].to_numpy().astype(np.int64)
        if len(kg) and (kg.min() < 0 or kg.max() >= m):
            raise AnalysisError(f"operator {op!r}: key group {int(kg.max())} is outside 0..{m - 1}")
        out = pd.DataFrame({"operator": op, "key_group": np.arange(m, dtype=np.int64)})
        for col in ("entries", "bytes", "keys"):
            full = np.zeros(m, dtype=np.int64)
            full[kg] = g[col].fillna(0).to_numpy().astype(np.int64)
            out[col] = full
        out["records"] = np.zeros(m, dtype=np.int64)
        parts.append(out)
    cols = ["operator", "key_group", "entries", "bytes", "keys", "records"]
    if not parts:
        return pd.DataFrame(columns=cols)
    return pd.concat(parts, ignore_index=True)[cols]


def top_keys(paths, n: int = 10, by: str = "bytes", *, operator=None, state=None, spark=None) -> pd.DataFrame:
    """The ``n`` keys of each operator holding the most state: ``operator, key, key_group, entries, bytes, share``.

    ``by`` is ``"bytes"`` or ``"entries"``; ties go to more entries, then to the key.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if by not in ("bytes", "entries"):
        raise AnalysisError(f"unknown ranking by={by!r}; expected 'bytes' or 'entries'")
    spark = spark or get_spark()
    frames = _frames(spark, paths, operator, state)
    if len(frames) > 1:
        frames = [reduce(lambda a, b: a.unionByName(b.withColumn("key", F.col("key").cast("string"))),
                         frames[1:], frames[0].withColumn("key", F.col("key").cast("string")))]
    df = frames[0]
    per_key = df.groupBy("operator", "key").agg(F.first("key_group").alias("key_group"),
                                                 F.count(F.lit(1)).alias("entries"),
                                                 F.sum("size_bytes").alias("bytes"))
    total = per_key.groupBy("operator").agg(F.sum(by).alias("_total"))
    w = Window.partitionBy("operator").orderBy(F.desc(by), F.desc("entries"), F.asc("key"))
    ranked = (per_key.withColumn("rank", F.row_number().over(w)).where(F.col("rank") <= n)
              .join(total, "operator").withColumn("share", F.col(by) / F.col("_total")).drop("_total"))
    out = ranked.toPandas().sort_values(["operator", "rank"]).reset_index(drop=True)
    out["bytes"] = out["bytes"].astype(np.int64)
    return out[["operator", "rank", "key", "key_group", "entries", "bytes", "share"]]


def export_parquet(pieces: Iterable, directory: str | Path) -> Path:
    """Write contract pieces (Arrow tables, e.g. ``reader.keyed_pieces(...)``) as Parquet files for Spark.

    Pieces with differently typed ``key``/``value`` columns go to separate files; the
    ``value``, ``user_key`` and ``namespace`` columns are dropped (the analyses do not need them
    and their types differ between states).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    i = 0
    for t in pieces:
        t = t.drop_columns([c for c in ("value", "user_key", "namespace") if c in t.column_names])
        if t.num_rows:
            pq.write_table(t, directory / f"piece-{i:05d}.parquet")
            i += 1
    return directory
