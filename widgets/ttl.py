"""The TTL tab: what expires when, seen from a "now" you move, and what has expired but is still stored."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w
import numpy as np
import pandas as pd
import traitlets as t

from explorer.analysis import expired_not_cleaned, ttl_expiry
from explorer.plots import ttl_timeline

from ._base import View, figure, html_table, replace_figure
from ._data import SnapshotData
from ._errors import ErrorArea

FREQS = ("10min", "1h", "6h", "1D")


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
        rows = df[df["expires_at"].notna()]
        self.ttl_rows = rows
        self.base = self._base_time(rows)
        lo, hi = -24.0, 48.0
        if len(rows):
            span = (rows["expires_at"] - self.base) / pd.Timedelta(hours=1)
            lo = float(np.floor(min(span.min(), 0.0))) - 1
            hi = float(np.ceil(max(span.max(), 1.0))) + 1
        self.now_slider = self.own(w.FloatSlider(value=0.0, min=lo, max=hi, step=0.5, description="now + hours",
                                                 continuous_update=False, readout_format=".1f",
                                                 layout=w.Layout(width="520px"), style={"description_width": "90px"}))
        self.freq_select = self.own(w.ToggleButtons(options=list(FREQS), value="1h", description="window",
                                                    style={"button_width": "60px"}))
        self.now_label = self.own(w.HTML())
        self.timeline_figure = self.own(figure(360))
        self.table = self.own(w.HTML())
        t.link((self.now_slider, "value"), (self, "offset_hours"))
        t.link((self.freq_select, "value"), (self, "freq"))
        self.on_change(["offset_hours", "freq"], self.update, "updating the TTL timeline")
        if not len(rows):
            self.now_slider.disabled = self.freq_select.disabled = True
            self.children = [self.own(w.HTML("<i>No state in this snapshot has a time-to-live.</i>"))]
            return
        self.children = [self.own(w.HBox([self.now_slider, self.freq_select])), self.now_label,
                         self.timeline_figure, self.table]
        self.update()

    def _base_time(self, rows: pd.DataFrame) -> pd.Timestamp:
        created = self.data.snapshot.created_at
        if created is not None:
            return pd.Timestamp(created).tz_convert("UTC")
        if len(rows) and rows["last_access"].notna().any():
            return pd.Timestamp(rows["last_access"].max()).tz_convert("UTC")
        return pd.Timestamp(0, tz="UTC")

    @property
    def now(self) -> pd.Timestamp:
        return self.base + pd.Timedelta(hours=self.offset_hours)

    def update(self) -> None:
        rows = self.ttl_rows
        now = self.now
        timeline = ttl_expiry(rows, now=now, freq=self.freq)
        self.timeline = timeline
        labelled = timeline.assign(label=timeline["operator"].astype(str) + " / " + timeline["state"].astype(str))
        fig = ttl_timeline(labelled.drop(columns=["operator"]), color="label",
                           title=f"Bytes expiring per {self.freq} after now = {now:%Y-%m-%d %H:%M} UTC")
        fig.add_vline(x=now, line_dash="dot", line_color="black")
        replace_figure(self.timeline_figure, fig)
        self.timeline_figure.update_layout(legend_title_text="state", xaxis_title="expiry time (UTC)")
        expired = expired_not_cleaned(rows, now=now)
        self.expired = expired
        n = int(expired["expired_entries"].sum()) if len(expired) else 0
        b = int(expired["expired_bytes"].sum()) if len(expired) else 0
        self.set_trait("expired_entries", n)
        shift = "" if self.offset_hours == 0 else f" ({self.offset_hours:+.1f} h from the snapshot's time)"
        self.now_label.value = (f"now = <b>{html.escape(f'{now:%Y-%m-%d %H:%M:%S} UTC')}</b>{shift}: "
                                f"<b>{n:,}</b> entries ({b:,} bytes) have expired but are still stored "
                                "(not yet cleaned up: Flink drops them on access, in a full snapshot or in "
                                "background cleanup, depending on the cleanup strategy).")
        self.table.value = "<h4>Expired, not cleaned up</h4>" + html_table(expired)
