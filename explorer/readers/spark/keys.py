"""Keys of Spark state as the user writes them (leaf tuples to match, Spark types to hash), and
field names made unique (Spark names aggregation buffers by function, so they repeat)."""

from __future__ import annotations

import datetime as _dt
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["key_leaves", "leaf_types", "timestamp_micros", "unique_names"]


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_MICRO = _dt.timedelta(microseconds=1)


def timestamp_micros(v: Any) -> int:
    """Epoch microseconds of a timestamp (naive ones are UTC), exact over Spark's whole range: years 1 to 9999
    as ``datetime``, ``pd.Timestamp`` of any unit or ``np.datetime64``, never through nanoseconds (a
    ``pd.Timestamp`` of 9999-12-31 has no nanosecond value: ``.value`` overflows)."""
    if isinstance(v, np.datetime64):
        return int(v.astype("datetime64[us]").astype(np.int64))
    if isinstance(v, pd.Timestamp):
        if v.tzinfo is not None:
            v = v.tz_convert("UTC").tz_localize(None)
        return int(v.asm8.astype("datetime64[us]").astype(np.int64))
    if v.tzinfo is None:
        v = v.replace(tzinfo=_dt.timezone.utc)
    return (v - _EPOCH) // _MICRO


def key_leaves(key: Any) -> tuple:
    """A key as the tuple of its leaf values, in order: struct fields (dicts: a window as ``{"start", "end"}``)
    and tuples flattened, timestamps as epoch microseconds (so a ``pd.Timestamp``, a ``datetime`` or an
    ``np.datetime64`` matches Spark's timestamp, far-future ones too), numbers exact."""
    out: list[Any] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (tuple, list)):
            for x in v:
                walk(x)
        elif isinstance(v, (pd.Timestamp, _dt.datetime, np.datetime64)):
            if v is pd.NaT or (isinstance(v, np.datetime64) and np.isnat(v)):
                out.append(None)
            else:
                out.append(("ts", timestamp_micros(v)))
        elif isinstance(v, np.generic):
            out.append(v.item())
        else:
            out.append(v)

    walk(key)
    return tuple(out)


_SPARK_TYPE_NAMES = {"string": "string", "bigint": "long", "int": "int", "smallint": "short", "tinyint": "byte",
                     "boolean": "boolean", "double": "double", "float": "float", "binary": "binary", "date": "date",
                     "timestamp": "timestamp", "timestamp_ntz": "timestamp"}


def leaf_types(t) -> list[str]:
    """Spark type names of a key struct's leaves, in order (nested structs flattened)."""
    from pyspark.sql.types import StructType

    if isinstance(t, StructType):
        out = []
        for f in t.fields:
            out += leaf_types(f.dataType)
        return out
    return [_SPARK_TYPE_NAMES.get(t.simpleString(), t.simpleString())]


def unique_names(names: list[str]) -> list[str]:
    """The n-th repeat of a name gets ``_<n>``: ``count, sum, count_2, sum_2, sum_3, min, max``."""
    seen: dict[str, int] = {}
    taken = set(names)
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        if seen[n] == 1:
            out.append(n)
            continue
        i = seen[n]
        while f"{n}_{i}" in taken:
            i += 1
        taken.add(f"{n}_{i}")
        out.append(f"{n}_{i}")
    return out
