"""Values read from Spark checkpoints in the form the fixtures' ``EXPECTED.json`` writes them.

Shared by ``tests/spark/test_real_checkpoints.py`` and ``tools/spark/check_fixtures.py``:
timestamps as UTC ISO strings to the millisecond, NumPy scalars as Python ones, NaN as None,
decimals as floats; nested values flattened into ``(path, value)`` leaves, Spark ``Row``s
positionally by field name (names may repeat).
"""

from __future__ import annotations

import math
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd


def _iso(dt: datetime) -> str:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)  # naive datetimes are UTC here (TZ=UTC, session UTC)
    dt = dt.astimezone(timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def scalar(v: Any) -> Any:
    if v is None or v is pd.NaT:
        return None
    if isinstance(v, pd.Timestamp):
        return None if pd.isna(v) else _iso(v.to_pydatetime())
    if isinstance(v, datetime):
        return _iso(v)
    if isinstance(v, date):
        return v.isoformat()
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, Decimal):
        return float(v)
    return v


def leaves(v: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(path, value) of every leaf, in order."""
    if isinstance(v, tuple) and hasattr(v, "__fields__"):  # a pyspark Row (not imported: no JVM needed)
        return [x for n, y in zip(v.__fields__, tuple(v)) for x in leaves(y, f"{prefix}{n}.")]
    if isinstance(v, dict):
        return [x for n, y in v.items() for x in leaves(y, f"{prefix}{n}.")]
    if isinstance(v, (list, tuple)):
        return [x for i, y in enumerate(v) for x in leaves(y, f"{prefix}{i}.")]
    return [(prefix[:-1], scalar(v))]
