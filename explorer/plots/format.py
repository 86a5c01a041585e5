"""Figures for people: counts without decimals, bytes, durations, shares, timestamps and nulls.

One home for how a number is shown, used by the terminal summary, the HTML report and
the dashboards, so the same figure reads the same everywhere:

* counts as integers with thousands separators (``994``, never ``994.000``);
* bytes in B / KB / MB / GB (powers of 1024);
* durations from milliseconds in the largest unit that fits (``147 ms``, ``1.5 s``,
  ``30 min``, ``1 d``);
* shares as percentages, ratios with two decimals (``1.73x``);
* timestamps as UTC to the second;
* a missing value (None, NaN, NaT, pandas NA) as an en dash ``–``, never ``None`` or ``nan``.

:func:`format_frame` applies these per column by name, for tables; in a table of one row per
``metric`` (``entries``, ``bytes``, ``records``) its ``total``/``mean``/``max``/``min`` per row, in
that metric's unit.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

#: what a missing value is shown as
MISSING = "–"

_BYTE_COLUMNS = ("bytes", "size_bytes", "checkpoint_bytes", "incremental_bytes", "delta_bytes", "expired_bytes",
                 "bytes_a", "bytes_b", "bytes_delta", "first_bytes", "last_bytes", "bytes_growth", "cum_bytes",
                 "subtask_load_bytes", "state_bytes")
_DURATION_COLUMNS = ("ttl_ms", "duration_ms", "sync_ms", "async_ms", "alignment_ms")
_SHARE_COLUMNS = ("share", "subtask_share", "expired_share", "top_1pct_share", "top_key_share", "known_share",
                  "records_known_share")
_RATIO_COLUMNS = ("overload", "max_over_mean", "cv", "gini")


def is_missing(value: Any) -> bool:
    """None, NaN, NaT and pandas NA."""
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    try:
        return bool(pd.isna(value)) if np.ndim(value) == 0 else False
    except (TypeError, ValueError):
        return False


def human_count(n: Any) -> str:
    """An integer count with thousands separators (a float count is rounded)."""
    if is_missing(n):
        return MISSING
    return f"{int(round(float(n))):,}"


def human_bytes(n: Any) -> str:
    """``512 B``, ``1.5 KB``, ``3.2 MB`` (powers of 1024); negative for a shrink."""
    if is_missing(n):
        return MISSING
    n = float(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.1f} {unit}"
        n /= 1024
    return f"{sign}{n:.1f} TB"  # pragma: no cover - the loop returns


def human_duration(ms: Any) -> str:
    """Milliseconds in the largest unit that fits: ``0.4 ms``, ``147 ms``, ``1.5 s``, ``30 min``, ``2 h``, ``1 d``."""
    if is_missing(ms):
        return MISSING
    ms = float(ms)
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 1:
        return f"{sign}{ms:.1f} ms"
    if ms < 1000:
        return f"{sign}{ms:.0f} ms"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms >= size:
            v = ms / size
            return f"{sign}{v:.0f} {unit}" if math.isclose(v, round(v), abs_tol=0.05) else f"{sign}{v:.1f} {unit}"
    return f"{sign}{ms:.0f} ms"  # pragma: no cover


def human_share(x: Any) -> str:
    """A fraction as a percentage: ``0.505353`` is ``50.5 %``."""
    if is_missing(x):
        return MISSING
    return f"{float(x) * 100:.1f} %"


def human_ratio(x: Any) -> str:
    """A ratio with two decimals: ``1.73``."""
    if is_missing(x):
        return MISSING
    return f"{float(x):.2f}"


def human_time(ts: Any) -> str:
    """A timestamp as ``YYYY-MM-DD HH:MM:SS UTC``."""
    if is_missing(ts):
        return MISSING
    t = pd.Timestamp(ts)
    t = t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def human_value(value: Any) -> str:
    """Any other cell: integers with separators, floats to three significant decimals, text as is."""
    if is_missing(value):
        return MISSING
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return f"{int(v):,}" if v.is_integer() else f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.1f}"
    if isinstance(value, pd.Timestamp):
        return human_time(value)
    return str(value)


def human_traffic(n: Any) -> str:
    """A traffic count (``records``): ``unknown`` where the snapshot did not count it, never 0 or a dash."""
    return "unknown" if is_missing(n) else human_count(n)


def formatter_for(column: str, series: pd.Series | None = None):
    """The function that shows the values of ``column`` (by its name, then by its dtype)."""
    if column in _BYTE_COLUMNS or column.endswith("_bytes"):
        return human_bytes
    if column in _DURATION_COLUMNS or column.endswith("_ms"):
        return human_duration
    if column in _SHARE_COLUMNS or column.endswith("_share"):
        return human_share
    if column in _RATIO_COLUMNS:
        return human_ratio
    if series is not None and pd.api.types.is_datetime64_any_dtype(series.dtype):
        return human_time
    if column in ("records", "records_error"):
        return human_traffic
    if column in ("entries", "keys", "rank", "expired_entries", "cum_entries"):
        return human_count
    return human_value


def format_frame(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every cell turned into the text a person reads (see the module doc)."""
    out = pd.DataFrame(index=df.index)
    for c in df.columns:
        f = formatter_for(str(c), df[c])
        out[c] = [f(v) for v in df[c].tolist()]
    if "metric" in df.columns:  # one row per measure (a subtask or rescale table): its figures in its unit
        per_row = [formatter_for(str(m)) for m in df["metric"].tolist()]
        for c in _PER_METRIC_COLUMNS:
            if c in df.columns and pd.api.types.is_numeric_dtype(df[c].dtype):
                out[c] = [f(v) if f is not human_value else out[c].iloc[i]
                          for i, (f, v) in enumerate(zip(per_row, df[c].tolist()))]
    return out


#: the columns of a table with a ``metric`` column whose figures are in that metric's unit (bytes in KB/MB)
_PER_METRIC_COLUMNS = ("total", "mean", "max", "min")


_BYTE_UNITS = (("TB", 1024 ** 4), ("GB", 1024 ** 3), ("MB", 1024 ** 2), ("KB", 1024), ("B", 1))
_DURATION_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000), ("ms", 1))


def _nice_step(span: float, n: int) -> float:
    """A step of 1, 2, 2.5 or 5 times a power of ten giving about ``n`` intervals over ``span``."""
    raw = span / max(n, 1)
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def _ticks(lo: float, hi: float, units: tuple[tuple[str, int], ...], n: int) -> tuple[list[float], list[str]]:
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    top = max(abs(lo), abs(hi), 1.0)
    name, size = next((u for u in units if top >= u[1]), units[-1])
    step = max(_nice_step((hi - lo) / size or 1.0, n), 1.0 if size == 1 else 0.0)
    first, last = math.floor(lo / size / step), math.ceil(hi / size / step)
    vals = [k * step * size for k in range(first, last + 1)]
    texts = [f"{round(k * step, 2):,.2f}".rstrip("0").rstrip(".") + f" {name}" for k in range(first, last + 1)]
    return vals, texts


def byte_ticks(lo: float, hi: float, n: int = 5) -> tuple[list[float], list[str]]:
    """Tick values from ``lo`` (or 0) to past ``hi`` with their labels in one unit: ``0 KB, 2 KB, 4 KB``
    (powers of 1024, like :func:`human_bytes`), about ``n`` intervals, whole bytes below 1 KB."""
    return _ticks(lo, hi, _BYTE_UNITS, n)


def duration_ticks(lo: float, hi: float, n: int = 5) -> tuple[list[float], list[str]]:
    """Tick values for milliseconds from ``lo`` (or 0) to past ``hi``, labelled in the largest unit that
    fits (``0 s, 0.5 s, 1 s``), about ``n`` intervals, whole milliseconds below 1 s."""
    return _ticks(lo, hi, _DURATION_UNITS, n)
