"""TTL: when state expires, what has expired but is still stored, and what has no TTL at all.

The rule is the engine's (:func:`explorer.engine.ttl.is_expired`): an entry is
expired at ``now`` exactly when ``expires_at <= now`` (``expires_at`` =
last access + TTL). Timelines bucket the entries still alive into windows
``[now + i * freq, now + (i + 1) * freq)`` counted from the chosen ``now``
(default: the snapshot's creation time), so "the next hour" means the hour
after ``now``, not a clock hour.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from ..errors import AnalysisError
from . import _ranges
from ._columns import state_rows
from ._common import TIMER_KINDS, Source, frame, is_snapshot, now_of
from ._keys import key_codes
from .history import history

TTL_COLUMNS = ("operator", "state", "kind", "key", "last_access", "expires_at", "size_bytes")

TIMELINE_COLUMNS = ["operator", "state", "status", "window", "window_start", "window_end", "entries", "bytes",
                    "cum_entries", "cum_bytes"]


EXPIRED_COLUMNS = ["operator", "state", "ttl_ms", "entries", "bytes", "expired_entries", "expired_bytes",
                   "expired_share", "keys_with_expired", "oldest_expiry"]


def _ttl_rows(df: pd.DataFrame) -> pd.DataFrame:
    rows = df[~df["kind"].isin(TIMER_KINDS)]
    return rows[rows["expires_at"].notna()]


def _ms(series: pd.Series) -> np.ndarray:
    """UTC timestamps as int64 epoch milliseconds (NaT as the smallest int64)."""
    values = series.to_numpy(dtype="datetime64[ms]") if len(series) else np.zeros(0, "datetime64[ms]")
    return values.view(np.int64)


def _ttl_groups(df: pd.DataFrame):
    """``(operator, state, rows)`` of the entries with an expiry, rows as positions."""
    exp = _ms(df["expires_at"]) if len(df) else np.zeros(0, np.int64)
    for op, st, rows in state_rows(df):
        e = exp[rows]
        has = e != np.iinfo(np.int64).min
        if not has.any():
            continue
        idx = np.arange(len(df))[rows] if isinstance(rows, slice) else rows
        if "kind" in df and str(df["kind"].iloc[idx[0]]) in TIMER_KINDS:
            continue
        yield op, st, idx if has.all() else idx[has]


def ttl_expiry(source: Source, now: Any = None, freq: str | pd.Timedelta = "1h", *,
               operator: str | Iterable[str] | None = None, state: str | Iterable[str] | None = None,
               horizon: str | pd.Timedelta | None = None) -> pd.DataFrame:
    """Expiry timeline of the states with TTL: entries and bytes that expire per ``freq`` after ``now``.

    One row per (operator, state, window). ``status`` is ``"expired"`` for the entries
    already expired at ``now`` but still in the snapshot (``window = -1``, the window
    running from the oldest expiry to ``now``), ``"expiring"`` for windows ``0, 1, ...``
    (only windows with entries are listed; ``horizon`` caps how far ahead). ``cum_*`` add
    up the expiring windows from ``now`` on (the expired row is not in them).
    """
    if _ranges.needs_ranges(source, operator, state):
        return _expiry_streamed(source, now, freq, operator, state, horizon)
    df = frame(source, TTL_COLUMNS, operator, state)
    if now is None and not df["expires_at"].notna().any():  # no TTL state: nothing expires, no "now" needed
        return pd.DataFrame({c: pd.Series(dtype=object) for c in TIMELINE_COLUMNS})
    t_now = now_of(source, df, now)
    step = pd.Timedelta(freq)
    if step <= pd.Timedelta(0):
        raise AnalysisError(f"freq must be a positive duration, found {freq!r}")
    now_ms = int(t_now.value // 1_000_000)
    step_ms = max(1, int(step.value // 1_000_000))
    horizon_ms = None if horizon is None else int(pd.Timedelta(horizon).value // 1_000_000)
    exp_all = _ms(df["expires_at"])
    size_all = df["size_bytes"].to_numpy(dtype=np.int64)
    parts = []
    for op, st, idx in _ttl_groups(df):
        exp, size = exp_all[idx], size_all[idx]
        expired = exp <= now_ms
        if expired.any():
            parts.append(pd.DataFrame({
                "operator": [op], "state": [st], "status": ["expired"], "window": [-1],
                "window_start": [pd.Timestamp(int(exp[expired].min()), unit="ms", tz="UTC")], "window_end": [t_now],
                "entries": [int(expired.sum())], "bytes": [int(size[expired].sum())]}))
        alive = ~expired
        delta = exp[alive] - now_ms
        alive_size = size[alive]
        if horizon_ms is not None:
            keep = delta < horizon_ms
            delta, alive_size = delta[keep], alive_size[keep]
        if len(delta):
            window = delta // step_ms
            if window.max() < 10_000_000:
                entries = np.bincount(window)
                w = np.flatnonzero(entries)
                nbytes = np.bincount(window, weights=alive_size.astype(np.float64))[w]
                entries = entries[w]
            else:  # a very fine freq far ahead: only the windows that occur
                w, inv = np.unique(window, return_inverse=True)
                entries = np.bincount(inv)
                nbytes = np.bincount(inv, weights=alive_size.astype(np.float64))
            parts.append(pd.DataFrame({
                "operator": op, "state": st, "status": "expiring", "window": w.astype(np.int64),
                "window_start": t_now + pd.to_timedelta(w * step_ms, unit="ms"),
                "window_end": t_now + pd.to_timedelta((w + 1) * step_ms, unit="ms"),
                "entries": entries.astype(np.int64), "bytes": np.rint(nbytes).astype(np.int64)}))
    return timeline_frame(parts)


def timeline_frame(parts: list[pd.DataFrame], sort: bool = False) -> pd.DataFrame:
    """The expiry timeline from its per-state parts: cumulative entries and bytes of the expiring
    windows per (operator, state), times in UTC (``sort``: by operator, state and window first).
    Shared by the local and the Spark analyses."""
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in TIMELINE_COLUMNS})
    out = pd.concat(parts, ignore_index=True)
    if sort:
        out = out.sort_values(["operator", "state", "window"], kind="stable").reset_index(drop=True)
    expiring = out["status"] == "expiring"
    out["cum_entries"] = 0
    out["cum_bytes"] = 0
    out.loc[expiring, "cum_entries"] = out[expiring].groupby(["operator", "state"], observed=True)["entries"].cumsum()
    out.loc[expiring, "cum_bytes"] = out[expiring].groupby(["operator", "state"], observed=True)["bytes"].cumsum()
    for c in ("window_start", "window_end"):
        out[c] = pd.to_datetime(out[c], utc=True)
    return out[TIMELINE_COLUMNS]


def expired_not_cleaned(source: Source, now: Any = None, *, operator: str | Iterable[str] | None = None,
                        state: str | Iterable[str] | None = None) -> pd.DataFrame:
    """Per state with TTL: entries already expired at ``now`` but still stored.

    Columns: ``operator, state, ttl_ms, entries, bytes, expired_entries, expired_bytes,``
    ``expired_share, keys_with_expired, oldest_expiry``.
    """
    if _ranges.needs_ranges(source, operator, state):
        return _expired_streamed(source, now, operator, state)
    df = frame(source, TTL_COLUMNS, operator, state)
    if now is None and not df["expires_at"].notna().any():  # no TTL state: nothing expired, no "now" needed
        return pd.DataFrame(columns=EXPIRED_COLUMNS)
    t_now = now_of(source, df, now)
    ttl = _ttl_by_state(source, df)
    now_ms = int(t_now.value // 1_000_000)
    exp_all = _ms(df["expires_at"])
    size_all = df["size_bytes"].to_numpy(dtype=np.int64)
    codes_all = None
    out = []
    for op, st, idx in _ttl_groups(df):
        exp, size = exp_all[idx], size_all[idx]
        expired = exp <= now_ms
        keys_with = 0
        if expired.any():
            if codes_all is None:
                codes_all, _ = key_codes(df)
            keys_with = len(np.unique(codes_all[idx][expired]))
        out.append({
            "operator": op, "state": st, "ttl_ms": ttl.get((op, st)),
            "entries": len(idx), "bytes": int(size.sum()),
            "expired_entries": int(expired.sum()), "expired_bytes": int(size[expired].sum()),
            "expired_share": float(expired.mean()) if len(idx) else 0.0,
            "keys_with_expired": int(keys_with),
            "oldest_expiry": pd.Timestamp(int(exp[expired].min()), unit="ms", tz="UTC") if expired.any() else pd.NaT,
        })
    result = pd.DataFrame(out, columns=EXPIRED_COLUMNS)
    result["oldest_expiry"] = pd.to_datetime(result["oldest_expiry"], utc=True)  # UTC even when none expired
    return result


def _ttl_by_state(source: Source, rows: pd.DataFrame) -> dict[tuple[str, str], int | None]:
    if is_snapshot(source):
        st = source.states
        return {(r.operator, r.state): (None if pd.isna(r.ttl_ms) else int(r.ttl_ms)) for r in st.itertuples()}
    out = {}
    for (op, s), g in rows.groupby(["operator", "state"], observed=True):
        d = (g["expires_at"] - g["last_access"]).dropna()
        out[(op, s)] = int(d.iloc[0] / pd.Timedelta(milliseconds=1)) if len(d) else None
    return out


def missing_ttls(source: Source) -> pd.DataFrame:
    """The states that have a TTL whose duration the snapshot does not store: ``operator, state,
    value_type``. Apache Flink keeps each entry's last access (its values are ``Ttl<...>``) but
    not the TTL itself; give it with ``explorer.open(path, ttl={"state": timedelta(...)})`` or
    ``state-explorer ... --ttl state=1h``. Empty for the formats that store their TTLs."""
    cols = ["operator", "state", "value_type"]
    st = source.states if is_snapshot(source) else pd.DataFrame(columns=cols)
    if "has_ttl" not in st or "ttl_ms" not in st:
        return pd.DataFrame(columns=cols)
    rows = st[st["has_ttl"].fillna(False).astype(bool) & st["ttl_ms"].isna()]
    return rows.reindex(columns=cols).reset_index(drop=True)


def ttl_hint(source: Source) -> str | None:
    """How to give the TTL durations a snapshot does not store (None when nothing is missing)."""
    missing = missing_ttls(source)
    if not len(missing):
        return None
    names = sorted(set(missing["state"]))
    example = ", ".join(f'"{n}": timedelta(hours=1)' for n in names[:2])
    cli = " ".join(f"--ttl {n}=1h" for n in names[:2])
    return (f"{len(names)} state(s) have a TTL whose duration Flink does not store ({', '.join(names)}); "
            f"give it to see expiry: explorer.open(path, ttl={{{example}}}) or state-explorer ... {cli}")


def ttl_summary(source: Source, now: Any = None) -> pd.DataFrame:
    """Per state: ``operator, state, kind, ttl_ms, entries, bytes, keys, expired_entries, expired_bytes,``
    ``has_ttl``.

    States without TTL have ``ttl_ms`` null, ``has_ttl`` False and no expired entries: nothing
    but the job's own code ever removes them. A state with ``has_ttl`` True and ``ttl_ms`` null
    has a TTL the snapshot does not store (:func:`missing_ttls`).
    """
    if _ranges.needs_ranges(source):
        return _summary_streamed(source, now)
    df = frame(source, TTL_COLUMNS)
    t_now = now_of(source, df, now) if len(df) else None
    df = df[~df["kind"].isin(TIMER_KINDS)]
    ttl = _ttl_by_state(source, df)
    out = []
    for (op, st), g in df.groupby(["operator", "state"], sort=True, observed=True):
        has = g["expires_at"].notna().to_numpy()
        expired = has & (g["expires_at"] <= t_now).to_numpy() if t_now is not None else np.zeros(len(g), bool)
        out.append({"operator": op, "state": st, "kind": g["kind"].iloc[0],
                    "ttl_ms": ttl.get((op, st)) if has.any() or is_snapshot(source) else None,
                    "entries": len(g), "bytes": int(g["size_bytes"].sum()), "keys": int(g["key"].nunique()),
                    "expired_entries": int(expired.sum()),
                    "expired_bytes": int(g["size_bytes"].to_numpy()[expired].sum())})
    result = pd.DataFrame(out, columns=["operator", "state", "kind", "ttl_ms", "entries", "bytes", "keys",
                                        "expired_entries", "expired_bytes"])
    flagged = set(map(tuple, missing_ttls(source)[["operator", "state"]].to_numpy())) if len(result) else set()
    result["has_ttl"] = [not pd.isna(t) or (o, s_) in flagged
                         for o, s_, t in zip(result["operator"], result["state"], result["ttl_ms"])]
    return result


def unbounded_growth(snapshots: Sequence[Source] | str | Any, *, min_points: int = 2) -> pd.DataFrame:
    """States without TTL whose size only grows over a series of snapshots (oldest first).

    ``snapshots`` is a checkpoint directory (all its complete ``chk-N``) or a list of
    snapshots or paths. Reads snapshot metadata only (entries per state and file bytes).
    Columns: ``operator, state, ttl_ms, points, first_entries, last_entries, entries_growth,``
    ``first_bytes, last_bytes, bytes_growth, entries_per_checkpoint, monotonic, unbounded``
    where ``unbounded`` means no TTL and entries never shrank and grew overall.
    """
    h = history(snapshots, keys=False)
    h = h[h["state"].notna()]
    out = []
    for (op, st), g in h.groupby(["operator", "state"], sort=True, observed=True):
        g = g.sort_values("checkpoint_id")
        e = g["entries"].to_numpy()
        b = g["bytes"].to_numpy()
        if len(g) < min_points:
            continue
        steps = np.diff(e)
        mono = bool((steps >= 0).all())
        ttl = g["ttl_ms"].iloc[-1]
        no_ttl = ttl is None or pd.isna(ttl)
        out.append({"operator": op, "state": st, "ttl_ms": None if no_ttl else int(ttl), "points": len(g),
                    "first_entries": int(e[0]), "last_entries": int(e[-1]), "entries_growth": int(e[-1] - e[0]),
                    "first_bytes": int(b[0]), "last_bytes": int(b[-1]), "bytes_growth": int(b[-1] - b[0]),
                    "entries_per_checkpoint": float(steps.mean()) if len(steps) else 0.0,
                    "monotonic": mono, "unbounded": bool(no_ttl and mono and e[-1] > e[0])})
    return pd.DataFrame(out, columns=["operator", "state", "ttl_ms", "points", "first_entries", "last_entries",
                                      "entries_growth", "first_bytes", "last_bytes", "bytes_growth",
                                      "entries_per_checkpoint", "monotonic", "unbounded"])


# --- streamed over key-group ranges (a Snapshot over its memory budget, explorer.analysis._ranges) ---------

def _streamed_now(source: Source, now: Any, operator, state) -> tuple[pd.Timestamp | None, bool]:
    """``now`` as :func:`._common.now_of` picks it for the whole snapshot (the latest last access needs a
    pass), and whether any entry has an expiry (known after that pass only; True otherwise)."""
    try:
        return now_of(source, None, now), True
    except AnalysisError:
        pass
    latest, any_expiry = None, False
    for (v,) in _ranges.ranges("last access", source, operator=operator, state=state):
        df = frame(v, TTL_COLUMNS, operator, state)
        any_expiry = any_expiry or bool(df["expires_at"].notna().any())
        if df["last_access"].notna().any():
            m = pd.Timestamp(df["last_access"].max())
            latest = m if latest is None or m > latest else latest
    if latest is None:
        if any_expiry:
            raise AnalysisError("now= is needed: the data has no snapshot time and no last-access times")
        return None, False
    return latest.tz_convert("UTC"), any_expiry


def _expiry_streamed(source: Source, now: Any, freq: Any, operator, state, horizon) -> pd.DataFrame:
    t_now, any_expiry = _streamed_now(source, now, operator, state)
    if t_now is None or not any_expiry:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in TIMELINE_COLUMNS})
    parts = [ttl_expiry(v, t_now, freq, operator=operator, state=state, horizon=horizon)
             for (v,) in _ranges.ranges("expiry", source, operator=operator, state=state)]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in TIMELINE_COLUMNS})
    both = pd.concat(parts, ignore_index=True)
    keys = ["operator", "state", "status", "window"]
    out = both.groupby(keys, sort=False, observed=True).agg(
        window_start=("window_start", "min"), window_end=("window_end", "max"), entries=("entries", "sum"),
        bytes=("bytes", "sum")).reset_index()
    out["_expired_first"] = (out["status"] != "expired").astype(np.int8)
    out = out.sort_values(["operator", "state", "_expired_first", "window"], kind="stable").reset_index(drop=True)
    out = out.drop(columns="_expired_first")
    expiring = out["status"] == "expiring"
    out["cum_entries"] = 0
    out["cum_bytes"] = 0
    out.loc[expiring, "cum_entries"] = out[expiring].groupby(["operator", "state"], observed=True)["entries"].cumsum()
    out.loc[expiring, "cum_bytes"] = out[expiring].groupby(["operator", "state"], observed=True)["bytes"].cumsum()
    return out[TIMELINE_COLUMNS]


def _expired_streamed(source: Source, now: Any, operator, state) -> pd.DataFrame:
    t_now, any_expiry = _streamed_now(source, now, operator, state)
    if t_now is None or not any_expiry:
        return pd.DataFrame(columns=EXPIRED_COLUMNS)
    parts = [expired_not_cleaned(v, t_now, operator=operator, state=state)
             for (v,) in _ranges.ranges("expired entries", source, operator=operator, state=state)]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=EXPIRED_COLUMNS)
    both = pd.concat(parts, ignore_index=True)
    both["ttl_ms"] = both["ttl_ms"].astype(object)
    out = both.groupby(["operator", "state"], sort=True, observed=True, dropna=False).agg(
        ttl_ms=("ttl_ms", "first"), entries=("entries", "sum"), bytes=("bytes", "sum"),
        expired_entries=("expired_entries", "sum"), expired_bytes=("expired_bytes", "sum"),
        keys_with_expired=("keys_with_expired", "sum"), oldest_expiry=("oldest_expiry", "min")).reset_index()
    out["ttl_ms"] = pd.Series(list(out["ttl_ms"]), index=out.index)  # the dtype the in-memory answer has
    out["expired_share"] = np.where(out["entries"] > 0, out["expired_entries"] / out["entries"].clip(lower=1), 0.0)
    out["oldest_expiry"] = pd.to_datetime(out["oldest_expiry"], utc=True)
    return out[EXPIRED_COLUMNS]


def _summary_streamed(source: Source, now: Any) -> pd.DataFrame:
    t_now, _ = _streamed_now(source, now, None, None)
    cols = ["operator", "state", "kind", "ttl_ms", "entries", "bytes", "keys", "expired_entries", "expired_bytes"]
    parts = [ttl_summary(v, t_now) for (v,) in _ranges.ranges("TTL summary", source)]
    parts = [p for p in parts if len(p)]
    if not parts:
        result = pd.DataFrame(columns=cols)
    else:
        both = pd.concat(parts, ignore_index=True)
        both["ttl_ms"] = both["ttl_ms"].astype(object)
        result = both.groupby(["operator", "state"], sort=True, observed=True, dropna=False).agg(
            kind=("kind", "first"), ttl_ms=("ttl_ms", "first"), entries=("entries", "sum"), bytes=("bytes", "sum"),
            keys=("keys", "sum"), expired_entries=("expired_entries", "sum"),
            expired_bytes=("expired_bytes", "sum")).reset_index()[cols]
        result["ttl_ms"] = pd.Series(list(result["ttl_ms"]), index=result.index)
    flagged = set(map(tuple, missing_ttls(source)[["operator", "state"]].to_numpy())) if len(result) else set()
    result["has_ttl"] = [not pd.isna(t) or (o, s_) in flagged
                         for o, s_, t in zip(result["operator"], result["state"], result["ttl_ms"])]
    return result
