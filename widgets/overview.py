"""The Overview tab: what the snapshot is, its operators and states, their sizes and the timings.

The totals are counted from the state the snapshot holds (rows and their serialized bytes), so
they are right on every format, also where the metadata has no per-state sizes (Flink, Spark).
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w

from explorer.plots.format import MISSING, human_bytes, human_count, human_duration, human_time

from ._base import View, figure, html_table, show_empty, subtask_colour
from ._data import SnapshotData
from ._errors import ErrorArea


def facts(data: SnapshotData) -> dict[str, str]:
    """The header facts of a snapshot, each as the text shown."""
    snap = data.snapshot
    df = data.frame
    timings = dict(snap.timings() or {})
    stored = timings.pop("bytes", None)
    out = {
        "path": str(snap.path), "format": snap.format, "kind": snap.kind,
        "checkpoint id": MISSING if snap.checkpoint_id is None else str(snap.checkpoint_id),
        "created": human_time(snap.created_at) if snap.created_at is not None else "unknown (not in the snapshot)",
        "operators": human_count(len(snap.operators)),
        "keyed states": human_count(len(snap.states)),
        "state entries": human_count(len(df)),
        "keys": human_count(df.groupby("operator", sort=False)["key"].nunique().sum()) if len(df) else "0",
        "state size (serialized values)": human_bytes(float(df["size_bytes"].sum()) if len(df) else 0),
    }
    if stored is not None:
        out["stored size (files)"] = human_bytes(stored)
    for k, v in timings.items():
        name = k.removesuffix("_ms").replace("_", " ")
        out[name] = human_duration(v) if k.endswith("_ms") else human_count(v)
    return out


class OverviewTab(View):
    """Static facts: header, operators, states, state sizes per subtask, checkpoint timings."""

    def __init__(self, data: SnapshotData, errors: ErrorArea | None = None, **kwargs: Any) -> None:
        super().__init__(errors, **kwargs)
        self.data = data
        snap = data.snapshot
        self.fact_values = facts(data)
        rows = "".join(f"<tr><th style='text-align:left;padding-right:12px;font-weight:600'>{html.escape(k)}</th>"
                       f"<td>{html.escape(v)}</td></tr>" for k, v in self.fact_values.items())
        self.facts = self.own(w.HTML(f"<table style='font-size:13px'>{rows}</table>"))
        self.operators_table = self.own(w.HTML("<h4>Operators</h4>" + html_table(snap.operators)))
        self.states_table = self.own(w.HTML("<h4>States</h4>" + html_table(self._states())))
        self.size_figure = self.own(figure(320, barmode="stack"))
        self._draw_sizes()
        self.notes = self.own(w.HTML("".join(f"<div>note: {html.escape(n)}</div>" for n in snap.notes)))
        self.children = [self.facts, self.size_figure, self.operators_table, self.states_table, self.notes]

    def _states(self):
        """The states table, with entries and bytes counted from the data where the metadata has none."""
        states = self.data.snapshot.states.copy()
        df = self.data.frame
        if len(states) and len(df):
            counted = df.groupby(["operator", "state"], sort=False)["size_bytes"].agg(["size", "sum"])
            idx = list(zip(states["operator"], states["state"]))
            entries = [int(counted["size"].get(i, 0)) for i in idx]
            size = [int(counted["sum"].get(i, 0)) for i in idx]
            if "entries" not in states or states["entries"].isna().all() or not states["entries"].any():
                states["entries"] = entries
            if "bytes" not in states or states["bytes"].isna().all() or not states["bytes"].any():
                states["bytes"] = size
        return states

    def _draw_sizes(self) -> None:
        df = self.data.frame
        fig = self.size_figure
        if not len(df):
            show_empty(fig, "no keyed state in this snapshot")
            return
        df = df.assign(label=df["operator"].astype(str) + " / " + df["state"].astype(str))
        sizes = df.groupby(["label", "subtask"], sort=True)["size_bytes"].sum().reset_index()
        with fig.batch_update():
            for s, g in sizes.groupby("subtask", sort=True):
                fig.add_bar(y=g["label"].to_numpy(), x=g["size_bytes"].to_numpy(), orientation="h",
                            name=f"subtask {s}", marker_color=subtask_colour(int(s)),
                            hovertemplate="%{y}<br>%{x:,} bytes<extra>subtask " + str(s) + "</extra>")
            fig.update_layout(title_text="State size per state (serialized bytes, stacked by subtask)",
                              legend_title_text="subtask", legend_traceorder="normal",
                              height=max(220, 90 + 40 * sizes["label"].nunique()))
            fig.update_xaxes(title_text="bytes", tickformat="~s", ticksuffix="B")
            fig.update_yaxes(automargin=True)
