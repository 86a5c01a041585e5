"""The TTL tab: what expires when, seen from a "now" you move, and what has expired but is still stored.

Moving "now" must stay fast on a million entries, so the tab sorts each state's expiry
times once and answers every "now" with binary searches and cumulative sums over them.
The results are the frames of :func:`explorer.analysis.ttl_expiry` and
:func:`explorer.analysis.expired_not_cleaned` (the tests check they are equal).
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w
import numpy as np
import pandas as pd
import traitlets as t

from explorer.analysis.ttl import TIMELINE_COLUMNS
from explorer.plots import legend_above, value_axis
from explorer.plots.format import human_bytes
from explorer.plots.palette import EXPIRED_COLOR, INK, PALETTE, VEIL, WARNING, WARNING_SURFACE
from explorer.escape import plot_text

from ._base import View, figure, html_table
from ._data import SnapshotData
from ._errors import ErrorArea

FREQS = ("10min", "1h", "6h", "1D")
#: a window's width as people read it
FREQ_NAMES = {"10min": "10 min", "1h": "1 h", "6h": "6 h", "1D": "1 day"}


def ttl_hint(data: SnapshotData) -> str:
    """Where states have a TTL the snapshot does not store the length of (Apache Flink's), how to give it.

    Flink's snapshots say that a state has a TTL (its values are wrapped with their last access
    time) but not how long the TTL is; ``explorer.open(path, ttl={state: timedelta})`` supplies it.
    Empty when nothing is missing.
    """
    states = data.snapshot.states
    if "has_ttl" not in states or not len(states):
        return ""
    ttl_ms = states["ttl_ms"] if "ttl_ms" in states else pd.Series([None] * len(states))
    missing = states[states["has_ttl"].fillna(False).astype(bool) & ttl_ms.isna()]
    if not len(missing):
        return ""
    names = sorted(set(missing["state"].astype(str)))
    example = ", ".join(f"{n!r}: timedelta(hours=1)" for n in names[:3])
    path = html.escape(repr(str(data.snapshot.path)))
    return (f"<div style='border-left:4px solid {WARNING};background:{WARNING_SURFACE};padding:6px 10px;margin:4px 0;"
            f"font-size:13px'><b>{len(names)} state{'s' * (len(names) != 1)} have a TTL whose length the snapshot "
            f"does not store</b> ({html.escape(', '.join(names[:8]))}{', …' if len(names) > 8 else ''}): Flink keeps "
            "each value's last access time but not the TTL itself. Give it to see expiry:<br>"
            f"<code>from datetime import timedelta<br>widgets.explore({path}, ttl={{{html.escape(example)}}})</code>"
            " &nbsp;(or <code>explorer.open(..., ttl=...)</code>)</div>")


class TTLTab(View):
    """Expiry timeline of the states with TTL, from ``now`` = snapshot time + ``offset_hours``."""

    offset_hours = t.Float(0.0, help="'now' relative to the snapshot's time, in hours")
    freq = t.Enum(FREQS, default_value="1h", help="width of the timeline's windows")
    #: entries expired at ``now`` but still stored
    expired_entries = t.Int(0, read_only=True)

    def __init__(self, data: SnapshotData, errors: ErrorArea | None = None, **kwargs: Any) -> None:
        super().__init__(errors, **kwargs)
        self.data = data
        df = data.frame
        with_ttl = df["expires_at"].notna().to_numpy()
        rows = df[with_ttl]
        self.ttl_rows = rows
        self.base = self._base_time(rows)
        # the keys as the other tabs' codes (hashed once per snapshot); equal keys, equal codes
        self._sorted = self._sort_expiries(rows, data.coded["key"].to_numpy()[with_ttl] if len(rows) else None)
        lo, hi = -24.0, 48.0
        if len(rows):
            span = (rows["expires_at"] - self.base) / pd.Timedelta(hours=1)
            lo = float(np.floor(min(span.min(), 0.0))) - 1
            hi = float(np.ceil(max(span.max(), 1.0))) + 1
        self.now_slider = self.own(w.FloatSlider(value=0.0, min=lo, max=hi, step=0.5, description="now + hours",
                                                 continuous_update=False, readout_format=".1f",
                                                 layout=w.Layout(width="520px"), style={"description_width": "90px"}))
        self.freq_select = self.own(w.ToggleButtons(options=list(FREQS), value="1h", description="window",
                                                    style={"button_width": "72px"}))
        self.now_label = self.own(w.HTML())
        self.timeline_figure = self.own(figure(360))
        self.table = self.own(w.HTML())
        t.link((self.now_slider, "value"), (self, "offset_hours"))
        t.link((self.freq_select, "value"), (self, "freq"))
        self.on_change(["offset_hours", "freq"], self.update, "updating the TTL timeline")
        self.hint = self.own(w.HTML(ttl_hint(data)))
        if not len(rows):
            self.now_slider.disabled = self.freq_select.disabled = True
            self.children = [self.hint] if self.hint.value else [self.own(w.HTML(
                "<i>No state in this snapshot has a time-to-live.</i>"))]
            return
        self.children = [self.hint, self.own(w.HBox([self.now_slider, self.freq_select])), self.now_label,
                         self.timeline_figure, self.table]
        self._draw_static()
        self.update()

    def _draw_static(self) -> None:
        """One bar trace per state with TTL and one for what has expired: updated in place afterwards."""
        fig = self.timeline_figure
        with fig.batch_update():
            for i, g in enumerate(self._sorted):
                fig.add_bar(x=[], y=[], name=plot_text(f"{g['operator']} / {g['state']}"), marker_color=PALETTE[i % len(PALETTE)],
                            hovertemplate="window from %{x}<br>%{customdata} expiring<extra>%{fullData.name}</extra>")
            fig.add_bar(x=[], y=[], name="expired, not cleaned", marker_color=EXPIRED_COLOR,
                        hovertemplate="%{text}<br>%{customdata} expired, still stored<extra></extra>")
            fig.update_layout(barmode="stack", xaxis_title="expiry time (UTC)", xaxis_type="date")
            legend_above(fig, "state")  # above the plot, as the other figures' (on the right it narrowed the plot)

    def _base_time(self, rows: pd.DataFrame) -> pd.Timestamp:
        created = self.data.snapshot.created_at
        if created is not None:
            return pd.Timestamp(created).tz_convert("UTC")
        if len(rows) and rows["last_access"].notna().any():
            return pd.Timestamp(rows["last_access"].max()).tz_convert("UTC")
        return pd.Timestamp(0, tz="UTC")

    def _sort_expiries(self, rows: pd.DataFrame, key_codes: np.ndarray | None = None) -> list[dict[str, Any]]:
        """Per (operator, state): expiry times (ns, sorted), cumulative bytes, keys in the same order.

        ``key_codes``: an integer code per row, equal for equal keys (else the keys are factorized here).
        """
        out = []
        ttl = {}
        states = self.data.snapshot.states
        for r in states.itertuples(index=False):
            ttl[(r.operator, r.state)] = None if pd.isna(r.ttl_ms) else int(r.ttl_ms)
        if not len(rows):
            return out
        # the groups of (operator, state), sorted, as row positions: no copy of a million-row frame per group
        op_codes, op_names = pd.factorize(rows["operator"], sort=True)
        st_codes, st_names = pd.factorize(rows["state"], sort=True)
        group = op_codes.astype(np.int64) * max(len(st_names), 1) + st_codes
        group[(op_codes < 0) | (st_codes < 0)] = -1  # as groupby: rows without an operator or state left out
        present = np.flatnonzero(np.bincount(group + 1)) - 1  # the groups with rows, sorted (-1: none)
        expires = rows["expires_at"].dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
        expires = expires.astype("datetime64[ns]").astype(np.int64)
        sizes = rows["size_bytes"].to_numpy(np.int64)
        if key_codes is None:  # keys as codes in row order (in expiry order hashing is twice as slow)
            keys, _ = pd.factorize(rows["key"].to_numpy())
        else:
            keys = np.where(rows["key"].isna().to_numpy(), -1, key_codes)  # a null key: no code, as factorize
        n_keys = int(keys.max()) + 1 if len(keys) else 1
        for gi in present[present >= 0]:
            op, st = op_names[gi // max(len(st_names), 1)], st_names[gi % max(len(st_names), 1)]
            pos = slice(None) if len(present) == 1 else np.flatnonzero(group == gi)
            exp = expires[pos]
            order = np.argsort(exp, kind="stable")
            size = sizes[pos][order]
            exp = exp[order]
            # each key's earliest expiry, sorted: how many keys have something expired is one binary search
            codes = keys[pos][order]
            first_at = np.full(n_keys, len(codes), dtype=np.int64)
            known = codes >= 0  # a null key (code -1) has no first expiry of its own
            np.minimum.at(first_at, codes[known], np.flatnonzero(known))
            first = np.sort(first_at[first_at < len(codes)])  # distinct: one first row per key
            if not len(first) or first[0]:
                first = np.concatenate([[0], first])  # the first row counts, as before (even a null key's)
            out.append({"operator": op, "state": st, "ttl_ms": ttl.get((op, st)), "exp": exp,
                        "cum": np.concatenate([[0], np.cumsum(size)]), "key_first_expiry": exp[first]})
        return out

    def _timeline(self, now: pd.Timestamp, step: pd.Timedelta) -> tuple[pd.DataFrame, pd.DataFrame]:
        """``(ttl_expiry(now, freq), expired_not_cleaned(now))`` from the sorted expiries."""
        t, width = now.value, step.value
        parts, expired_rows = [], []
        for g in self._sorted:
            exp, cum = g["exp"], g["cum"]
            k = int(np.searchsorted(exp, t, side="right"))  # expired: expires_at <= now
            n = len(exp)
            if k:
                parts.append(pd.DataFrame({
                    "operator": [g["operator"]], "state": [g["state"]], "status": ["expired"], "window": [-1],
                    "window_start": [pd.Timestamp(int(exp[0]), tz="UTC")], "window_end": [now],
                    "entries": [k], "bytes": [int(cum[k])]}))
            if k < n:
                w = (exp[k:] - t) // width
                starts = np.flatnonzero(np.concatenate([[True], w[1:] != w[:-1]]))
                ends = np.concatenate([starts[1:], [len(w)]])
                wins = w[starts]
                parts.append(pd.DataFrame({
                    "operator": g["operator"], "state": g["state"], "status": "expiring", "window": wins,
                    "window_start": now + pd.to_timedelta(wins * width, unit="ns"),
                    "window_end": now + pd.to_timedelta((wins + 1) * width, unit="ns"),
                    "entries": (ends - starts).astype(np.int64),
                    "bytes": (cum[k + ends] - cum[k + starts]).astype(np.int64)}))
            expired_rows.append({
                "operator": g["operator"], "state": g["state"], "ttl_ms": g["ttl_ms"], "entries": n,
                "bytes": int(cum[n]), "expired_entries": k, "expired_bytes": int(cum[k]),
                "expired_share": k / n if n else 0.0,
                "keys_with_expired": int(np.searchsorted(g["key_first_expiry"], t, side="right")),
                "oldest_expiry": pd.Timestamp(int(exp[0]), tz="UTC") if k else pd.NaT})
        expired = pd.DataFrame(expired_rows, columns=["operator", "state", "ttl_ms", "entries", "bytes",
                                                      "expired_entries", "expired_bytes", "expired_share",
                                                      "keys_with_expired", "oldest_expiry"])
        if not parts:
            return pd.DataFrame({c: pd.Series(dtype=object) for c in TIMELINE_COLUMNS}), expired
        out = pd.concat(parts, ignore_index=True)
        expiring = out["status"] == "expiring"
        out["cum_entries"] = 0
        out["cum_bytes"] = 0
        out.loc[expiring, "cum_entries"] = out[expiring].groupby(["operator", "state"])["entries"].cumsum()
        out.loc[expiring, "cum_bytes"] = out[expiring].groupby(["operator", "state"])["bytes"].cumsum()
        return out[TIMELINE_COLUMNS], expired

    @property
    def now(self) -> pd.Timestamp:
        return self.base + pd.Timedelta(hours=self.offset_hours)

    def update(self) -> None:
        now = self.now
        timeline, expired = self._timeline(now, pd.Timedelta(self.freq))
        self.timeline = timeline
        fig = self.timeline_figure
        expiring = timeline[timeline["status"] == "expiring"]
        gone = timeline[timeline["status"] == "expired"]
        with fig.batch_update():
            for i, g in enumerate(self._sorted):
                sel = expiring[(expiring["operator"] == g["operator"]) & (expiring["state"] == g["state"])]
                fig.data[i].x = sel["window_start"].dt.strftime("%Y-%m-%d %H:%M:%S").tolist()  # ISO: drawn as dates
                fig.data[i].y = sel["bytes"].to_numpy()
                fig.data[i].customdata = [human_bytes(b) for b in sel["bytes"]]
            last = fig.data[len(self._sorted)]
            last.x = gone["window_end"].dt.strftime("%Y-%m-%d %H:%M:%S").tolist()
            last.y = gone["bytes"].to_numpy()
            last.customdata = [human_bytes(b) for b in gone["bytes"]]
            last.text = [plot_text(f"{o} / {s}") for o, s in zip(gone["operator"], gone["state"])]
            stamp = now.strftime("%Y-%m-%d %H:%M:%S")
            fig.layout.shapes = [dict(type="line", x0=stamp, x1=stamp, yref="paper", y0=0, y1=1,
                                      line=dict(dash="dot", color=INK))]
            # inside the plot, right of its line: above the plot it sat on the legend (the browser test caught it)
            fig.layout.annotations = [dict(x=stamp, y=1, yref="paper", text="now", showarrow=False, yanchor="top",
                                           xanchor="left", xshift=4, bgcolor=VEIL)]
            width = FREQ_NAMES[self.freq]
            fig.layout.title.text = (f"Serialized bytes expiring per {width} window after now = "
                                     f"{now:%Y-%m-%d %H:%M} UTC")
            # the axis as the other figures': what it counts and per what, KB/MB ticks for the stacks' heights
            stacks = pd.concat([expiring.groupby("window_start")["bytes"].sum(),
                                gone.groupby("window_end")["bytes"].sum()]) if len(timeline) else []
            value_axis(fig, "bytes", stacks, per=f"{width} window", hover=False)  # grey: its legend says
        self.expired = expired
        n = int(expired["expired_entries"].sum()) if len(expired) else 0
        b = int(expired["expired_bytes"].sum()) if len(expired) else 0
        self.set_trait("expired_entries", n)
        shift = "" if self.offset_hours == 0 else f" ({self.offset_hours:+.1f} h from the snapshot's time)"
        self.now_label.value = (f"now = <b>{html.escape(f'{now:%Y-%m-%d %H:%M:%S} UTC')}</b>{shift}: "
                                f"<b>{n:,}</b> entries ({html.escape(human_bytes(b))} serialized) have expired but are still stored "
                                "(not yet cleaned up: Flink drops them on access, in a full snapshot or in "
                                "background cleanup, depending on the cleanup strategy).")
        self.table.value = "<h4>Expired, not cleaned up</h4>" + html_table(
            expired, caption="ttl_ms: the state's time-to-live; expired_share: expired entries of all its entries")
