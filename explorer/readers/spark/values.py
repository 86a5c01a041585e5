"""Spark state values as columns a person reads: one column per value field.

``keyed_state()`` keeps each value as one dict (the contract's ``value``); Spark's
values are structs: an aggregation's buffer (``count, sum, count_2, ...``: Spark
names buffer slots by function, repeats made unique), an input row of a join side,
a ``GroupState``. :func:`flatten_values` spreads them out, nested fields joined
with dots (``groupState.events``); a field whose name is a contract column gets a
``value.`` prefix. Spark's metadata does not keep the query's aliases (``n``,
``avg_amount``) for built-in aggregations, so the buffer names are what there is.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..base import CONTRACT_COLUMNS

__all__ = ["flatten_values"]


def _flat(v: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(v, dict):
        for k, x in v.items():
            _flat(x, f"{prefix}{k}.", out)
    else:
        out[prefix[:-1]] = v


def flatten_values(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (keyed_state rows) with ``value`` replaced by one column per value field; scalar values stay in
    ``value``. Integer fields keep an integer dtype (``Int64`` where some rows lack them)."""
    records = []
    scalar = []
    for v in df["value"]:
        if isinstance(v, dict):
            row: dict[str, Any] = {}
            _flat(v, "", row)
            records.append(row)
            scalar.append(None)
        else:
            records.append({})
            scalar.append(v)
    fields = pd.DataFrame.from_records(records, index=df.index)
    fields.columns = [f"value.{c}" if c in CONTRACT_COLUMNS else c for c in fields.columns]
    for c in fields.columns:
        col = fields[c]
        ints = col.dropna()
        if len(ints) and col.isna().any() and all(isinstance(x, int) and not isinstance(x, bool) for x in ints):
            fields[c] = col.astype("Int64")
    out = df.drop(columns=["value"]).copy()
    if any(v is not None for v in scalar):
        out["value"] = pd.Series(scalar, index=df.index, dtype=object)
    return pd.concat([out, fields], axis=1)
