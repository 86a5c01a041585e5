"""What every view shares: the model in traitlets, children built once, errors shown, close() closes all.

A view is an ``ipywidgets.VBox`` whose model is its own traitlets (a
parallelism, a metric, a page...). Controls are linked to the model, the
model's observers recompute and update the figures *in place*
(``FigureWidget.batch_update``), and every observer runs under the shared
:class:`~widgets._errors.ErrorArea`. ``close()`` closes every widget the view
made, figures included, so re-running a notebook cell leaves no comms behind.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w
import pandas as pd
import plotly.graph_objects as go

from explorer.plots.palette import GUIDE, MUTED, PALETTE, RULE, SURFACE
from explorer.plots.format import format_frame

from ._plotly import figure_widget_class
from ._view import View, loading_html, sync_figure

__all__ = ["View", "loading_html", "sync_figure"]  # re-exported: the tabs take everything they share from here

#: one colour per subtask, the same in every view and chart
SUBTASK_COLOURS = PALETTE
TEMPLATE = "plotly_white"


def subtask_colour(subtask: int) -> str:
    return SUBTASK_COLOURS[int(subtask) % len(SUBTASK_COLOURS)]


def figure(height: int = 320, **layout: Any) -> go.FigureWidget:
    """An empty FigureWidget with the dashboards' common look."""
    fig = figure_widget_class()()
    fig.update_layout(template=TEMPLATE, height=height, margin=dict(l=60, r=20, t=50, b=50),
                      title=dict(font=dict(size=15)))
    fig.update_layout(**layout)
    return fig


def replace_figure(target: go.FigureWidget, source: go.Figure) -> None:
    """Make ``target`` show ``source`` (traces and layout), keeping the same widget."""
    # the taller of the two: a figure whose legend needs rows more keeps its plot's height (legend_above)
    height = max(target.layout.height or 0, source.layout.height or 0) or None
    top = source.layout.margin.t  # room for the legend above the plot (explorer.plots.legend_above)
    with target.batch_update():
        target.data = ()
        target.layout.shapes = ()
        target.layout.annotations = ()
        target.add_traces(list(source.data))
        layout = source.layout.to_plotly_json()
        layout.pop("template", None)  # the target has the dashboards' template; validating one costs seconds
        target.update_layout(layout)
        target.update_layout(height=height, margin=dict(l=60, r=20, t=max(top or 50, 50), b=50))


#: CSS for the views' HTML tables (included with every table: a tab may be shown on its own).
#: Tables scroll inside their box instead of being clipped; a header is aligned as its column is.
TABLE_CSS = ("<style>.sx-scroll{max-height:360px;max-width:100%;overflow:auto;margin:4px 0}"
             ".sx-table{border-collapse:collapse;font-size:12px;white-space:nowrap}"
             f".sx-table th{{background:{SURFACE};padding:3px 8px;border-bottom:1px solid {GUIDE};position:sticky;top:0}}"
             f".sx-table td{{padding:2px 8px;border-bottom:1px solid {RULE}}}"
             ".sx-table .sx-num{text-align:right;font-variant-numeric:tabular-nums}"
             ".sx-table .sx-text{text-align:left}</style>")


def _is_numeric(series: pd.Series) -> bool:
    return (pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype))


def html_table(df: pd.DataFrame, max_rows: int = 20, caption: str | None = None) -> str:
    """A compact HTML table of a DataFrame for people to read.

    Cells are formatted by :func:`explorer.plots.format.format_frame` (counts without decimals,
    bytes, durations, shares, UTC times; a missing value as an en dash, never None/NaN/NaT).
    Numeric columns are right-aligned, header included; the table scrolls inside its box.
    """
    shown = df.head(max_rows)
    text = format_frame(shown)
    cols = [str(c) for c in shown.columns]
    align = ["sx-num" if _is_numeric(shown[c]) else "sx-text" for c in shown.columns]
    head = "".join(f"<th class='{a}'>{html.escape(c)}</th>" for c, a in zip(cols, align))
    body = "".join("<tr>" + "".join(f"<td class='{a}'>{html.escape(str(v))}</td>" for v, a in zip(row, align))
                   + "</tr>" for row in text.itertuples(index=False, name=None))
    more = (f"<div style='font-size:11px;color:{MUTED}'>first {max_rows:,} of {len(df):,} rows</div>"
            if len(df) > max_rows else "")
    cap = f"<div style='font-size:12px;color:{MUTED};margin-top:2px'>{html.escape(caption)}</div>" if caption else ""
    return (TABLE_CSS + cap + f"<div class='sx-scroll'><table class='sx-table'><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table></div>" + more)


def show_empty(fig: go.FigureWidget, message: str) -> None:
    """Make ``fig`` say ``message`` instead of drawing empty -1..1 axes."""
    with fig.batch_update():
        for tr in fig.data:
            tr.visible = False
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        fig.layout.annotations = [dict(text=message, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                                       font=dict(size=14, color=MUTED))]


def show_drawn(fig: go.FigureWidget) -> None:
    """Undo :func:`show_empty`: axes and traces visible again, the message gone."""
    with fig.batch_update():
        for tr in fig.data:
            tr.visible = True
        fig.update_xaxes(visible=True)
        fig.update_yaxes(visible=True)
        fig.layout.annotations = ()
