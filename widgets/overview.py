"""The Overview tab: what the snapshot is, its operators and states, their sizes and the timings."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w
import pandas as pd

from ._base import View, figure, html_table, subtask_colour
from ._data import SnapshotData
from ._errors import ErrorArea


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


class OverviewTab(View):
    """Static facts: header, operators, states, state sizes per subtask, checkpoint timings."""

    def __init__(self, data: SnapshotData, errors: ErrorArea | None = None, **kwargs: Any) -> None:
        super().__init__(errors, **kwargs)
        self.data = data
        snap = data.snapshot
        timings = snap.timings() or {}
        states = snap.states
        ops = snap.operators
        facts = {
            "path": str(snap.path), "format": snap.format, "kind": snap.kind, "checkpoint id": snap.checkpoint_id,
            "created": snap.created_at, "operators": len(ops), "keyed states": len(states),
            "state entries": int(states["entries"].sum()) if "entries" in states and len(states) else 0,
            "size": _human(float(timings.get("bytes", ops["bytes"].sum() if "bytes" in ops else 0))),
        }
        facts.update({k.replace("_", " "): v for k, v in timings.items() if k != "bytes"})
        rows = "".join(f"<tr><th style='text-align:left;padding-right:12px'>{html.escape(str(k))}</th>"
                       f"<td>{html.escape(str(v))}</td></tr>" for k, v in facts.items())
        self.facts = self.own(w.HTML(f"<table style='font-size:13px'>{rows}</table>"))
        self.operators_table = self.own(w.HTML("<h4>Operators</h4>" + html_table(ops)))
        self.states_table = self.own(w.HTML("<h4>States</h4>" + html_table(states)))
        self.size_figure = self.own(figure(320, barmode="stack"))
        self._draw_sizes()
        notes = snap.notes
        self.notes = self.own(w.HTML("".join(f"<div>note: {html.escape(n)}</div>" for n in notes)))
        self.children = [self.facts, self.size_figure, self.operators_table, self.states_table, self.notes]

    def _draw_sizes(self) -> None:
        df = self.data.frame
        fig = self.size_figure
        if not len(df):
            fig.layout.title.text = "no keyed state"
            return
        df = df.assign(label=df["operator"].astype(str) + " / " + df["state"].astype(str))
        sizes = df.groupby(["label", "subtask"], sort=True)["size_bytes"].sum().reset_index()
        with fig.batch_update():
            for s, g in sizes.groupby("subtask", sort=True):
                fig.add_bar(y=g["label"].to_numpy(), x=g["size_bytes"].to_numpy(), orientation="h",
                            name=f"subtask {s}", marker_color=subtask_colour(int(s)),
                            hovertemplate="%{y}<br>%{x:,} bytes<extra>subtask " + str(s) + "</extra>")
            fig.update_layout(title_text="State size per state (bytes, stacked by subtask)",
                              legend_title_text="subtask", height=max(220, 90 + 40 * sizes["label"].nunique()))
            fig.update_xaxes(title_text="serialized bytes")
            fig.update_yaxes(automargin=True)
