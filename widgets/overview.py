"""The Overview tab: what the snapshot is, its operators and states, their sizes and the timings.

The totals are counted from the state the snapshot holds (rows and their serialized bytes), so
they are right on every format, also where the metadata has no per-state sizes (Flink, Spark).
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w

from explorer.escape import plot_text
from explorer.plots import legend_above, value_axis
from explorer.plots.format import MISSING, human_bytes, human_count, human_duration, human_time

from ._base import View, figure, html_table, loading_html, show_empty, subtask_colour
from ._data import SnapshotData
from ._errors import ErrorArea


#: the facts counted from the keyed state, shown as this while it is read
COUNTING = "counting…"


#: a key held by two operators is two keys of state (one per operator): the count says so
KEYS_FACT = "keys (distinct per operator, summed)"


def _metadata_facts(data: SnapshotData) -> dict[str, str]:
    """The header facts the snapshot's metadata gives, at once; the counted ones say :data:`COUNTING`."""
    snap = data.snapshot
    return {
        "path": str(snap.path), "format": snap.format, "kind": snap.kind,
        "checkpoint id": MISSING if snap.checkpoint_id is None else str(snap.checkpoint_id),
        "created": human_time(snap.created_at) if snap.created_at is not None else "unknown (not in the snapshot)",
        "operators": human_count(len(snap.operators)),
        "keyed states": human_count(len(snap.states)),
        "state entries": COUNTING,
        KEYS_FACT: COUNTING,
        "state size (serialized values)": COUNTING,
    }


def _timing_facts(data: SnapshotData) -> dict[str, str]:
    timings = dict(data.snapshot.timings() or {})
    stored = timings.pop("bytes", None)
    out = {}
    if stored is not None:
        out["stored size (files on disk)"] = human_bytes(stored)
    for k, v in timings.items():
        name = k.removesuffix("_ms").replace("_", " ")
        out[name] = human_duration(v) if k.endswith("_ms") else human_count(v)
    return out


def facts(data: SnapshotData) -> dict[str, str]:
    """The header facts of a snapshot, each as the text shown."""
    df = data.frame
    out = _metadata_facts(data)
    out.update({
        "state entries": human_count(len(df)),
        KEYS_FACT: human_count(df.groupby("operator", sort=False)["key"].nunique().sum()) if len(df) else "0",
        "state size (serialized values)": human_bytes(float(df["size_bytes"].sum()) if len(df) else 0),
    })
    out.update(_timing_facts(data))
    return out


def _facts_html(values: dict[str, str]) -> str:
    rows = "".join(f"<tr><th style='text-align:left;padding-right:12px;font-weight:600'>{html.escape(k)}</th>"
                   f"<td>{html.escape(v)}</td></tr>" for k, v in values.items())
    return f"<table style='font-size:13px'>{rows}</table>"


class OverviewTab(View):
    """Static facts: header, operators, states, state sizes per subtask, checkpoint timings.

    ``staged=True`` builds only what the metadata answers (the snapshot's facts, operators and states as
    the metadata lists them) and says "counting…" for the rest until :meth:`fill` reads the keyed state:
    the dashboard shows that first, since reading a million keys takes seconds.
    """

    #: the dashboard shows this tab's metadata part before calling :meth:`fill`
    STAGED = True
    #: what :attr:`pending` says while :meth:`fill` runs
    PENDING = "Counting entries, keys and bytes in the keyed state…"

    def __init__(self, data: SnapshotData, errors: ErrorArea | None = None, staged: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(errors, **kwargs)
        self.data = data
        snap = data.snapshot
        self.fact_values = {**_metadata_facts(data), **_timing_facts(data)}
        self.facts = self.own(w.HTML(_facts_html(self.fact_values)))
        self.operators_table = self.own(w.HTML("<h4>Operators</h4>" + html_table(snap.operators)))
        self.states_table = self.own(w.HTML("<h4>States</h4>" + html_table(snap.states)))
        #: the loading line in place of the size chart until :meth:`fill` has run
        self.pending = self.own(w.HTML(loading_html(self.PENDING)))
        self.size_figure = None
        self.notes = self.own(w.HTML("".join(f"<div>note: {html.escape(n)}</div>" for n in snap.notes)))
        self.children = [self.facts, self.pending, self.operators_table, self.states_table, self.notes]
        if not staged:
            self.fill()

    def fill(self) -> None:
        """Read the keyed state and show the counted facts, the states' totals and the size chart."""
        if self.size_figure is not None:
            return
        self.fact_values = facts(self.data)
        self.facts.value = _facts_html(self.fact_values)
        self.states_table.value = "<h4>States</h4>" + html_table(self._states())
        # The figure is drawn and its whole state sent before it is shown. It used to be shown first and
        # synced after: its traces went as one-off messages, which the page drops while plotly.js is still
        # loading (this is the dashboard's first figure), and a view drawn before the state sync came
        # stayed empty grey axes (-1 B..6 B) until the notebook was run again.
        self.size_figure = self.own(figure(320, barmode="stack"))
        self._draw_sizes()
        self.sync_figures()
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
        df = df.assign(label=[plot_text(f"{o} / {s}") for o, s in zip(df["operator"], df["state"])])
        sizes = df.groupby(["label", "subtask"], sort=True)["size_bytes"].sum().reset_index()
        with fig.batch_update():
            for s, g in sizes.groupby("subtask", sort=True):
                fig.add_bar(y=g["label"].to_numpy(), x=g["size_bytes"].to_numpy(), orientation="h",
                            name=f"subtask {s}", marker_color=subtask_colour(int(s)),
                            hovertemplate="%{y}<br>%{x:,} bytes<extra>subtask " + str(s) + "</extra>")
            fig.update_layout(title_text="State size (serialized values) per state, stacked by subtask",
                              legend_traceorder="normal")
            legend_above(fig, "subtask")
            fig.update_layout(height=max(220, fig.layout.margin.t + 60 + 40 * sizes["label"].nunique()))
            value_axis(fig, "size_bytes", sizes.groupby("label")["size_bytes"].sum(), per="state", axis="x",
                       title="serialized bytes (values) per state")
            fig.update_yaxes(automargin=True)
