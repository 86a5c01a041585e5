"""What every view shares: the model in traitlets, children built once, errors shown, close() closes all.

A view is an ``ipywidgets.VBox`` whose model is its own traitlets (a
parallelism, a metric, a page...). Controls are linked to the model, the
model's observers recompute and update the figures *in place*
(``FigureWidget.batch_update``), and every observer runs under the shared
:class:`~widgets._errors.ErrorArea`. ``close()`` closes every widget the view
made, figures included, so re-running a notebook cell leaves no comms behind.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any, Callable, Iterable, TypeVar

import ipywidgets as w
import plotly.graph_objects as go

from explorer.plots import PALETTE

from ._errors import ErrorArea

W = TypeVar("W", bound=w.Widget)

#: one colour per subtask, the same in every view and chart
SUBTASK_COLOURS = PALETTE
TEMPLATE = "plotly_white"


def subtask_colour(subtask: int) -> str:
    return SUBTASK_COLOURS[int(subtask) % len(SUBTASK_COLOURS)]


def sync_figure(fig: go.FigureWidget) -> None:
    """Copy a FigureWidget's current data and layout into its synced model state.

    plotly's FigureWidget sends later changes as one-off messages and refreshes the
    state a new view starts from only when the figure itself is displayed. A figure
    inside a container is displayed by its container, so a view created after an
    update (a tab opened later, a notebook re-rendered) would start from the empty
    figure the constructor made. The views call this after every update.
    """
    fig._widget_layout = deepcopy(fig._layout_obj._props)
    fig._widget_data = deepcopy(fig._data)


def figure(height: int = 320, **layout: Any) -> go.FigureWidget:
    """An empty FigureWidget with the dashboards' common look."""
    fig = go.FigureWidget()
    fig.update_layout(template=TEMPLATE, height=height, margin=dict(l=60, r=20, t=50, b=50),
                      title=dict(font=dict(size=15)))
    fig.update_layout(**layout)
    return fig


def replace_figure(target: go.FigureWidget, source: go.Figure) -> None:
    """Make ``target`` show ``source`` (traces and layout), keeping the same widget."""
    height = target.layout.height
    with target.batch_update():
        target.data = ()
        target.layout.shapes = ()
        target.layout.annotations = ()
        target.add_traces(list(source.data))
        layout = source.layout.to_plotly_json()
        layout.pop("template", None)  # the target has the dashboards' template; validating one costs seconds
        target.update_layout(layout)
        target.update_layout(height=height, margin=dict(l=60, r=20, t=50, b=50))


#: CSS for the views' HTML tables (included once per dashboard, in its header)
TABLE_CSS = ("<style>.sx-table{border-collapse:collapse;font-size:12px;margin:4px 0}"
             ".sx-table th{background:#f5f5f5;text-align:left;padding:3px 8px;border-bottom:1px solid #ccc}"
             ".sx-table td{padding:2px 8px;border-bottom:1px solid #eee;text-align:left}</style>")


def html_table(df, max_rows: int = 20, **kw: Any) -> str:
    """A compact HTML table of a DataFrame."""
    return (TABLE_CSS + '<div style="max-height:360px;overflow:auto;font-size:12px">'
            + df.head(max_rows).to_html(index=False, border=0, classes="sx-table", na_rep="", **kw) + "</div>")


class View(w.VBox):
    """Base of the tabs and teaching views."""

    def __init__(self, errors: ErrorArea | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.errors = errors if errors is not None else ErrorArea()
        self._owns_errors = errors is None
        self._owned: list[w.Widget] = []

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every view's constructor ends with :meth:`sync_figures`, whatever path it returns by."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return

        def __init__(self: "View", *args: Any, **kw: Any) -> None:
            init(self, *args, **kw)
            if type(self) is cls:
                self.sync_figures()

        __init__.__doc__ = init.__doc__
        __init__.__wrapped__ = init  # type: ignore[attr-defined]
        cls.__init__ = __init__  # type: ignore[method-assign]

    def own(self, widget: W) -> W:
        """Remember ``widget`` to close it with the view."""
        self._owned.append(widget)
        return widget

    def owned(self) -> list[w.Widget]:
        return list(self._owned)

    def sync_figures(self) -> None:
        """Make every figure's synced state current (see :func:`sync_figure`)."""
        for widget in self._owned:
            if isinstance(widget, go.FigureWidget):
                sync_figure(widget)

    def guarded(self, fn: Callable[..., Any], where: str) -> Callable[..., Any]:
        return self.errors.guard(where)(fn)

    def on_change(self, names: Iterable[str], fn: Callable[[], Any], where: str) -> None:
        """Run ``fn()`` (guarded) when any of the model traits ``names`` change."""
        def run_and_sync() -> None:
            fn()
            self.sync_figures()

        run = self.guarded(run_and_sync, where)
        self.observe(lambda _change: run(), names=list(names))

    def close(self) -> None:
        owned = getattr(self, "_owned", [])
        for widget in reversed(owned):
            widget.close()
        owned.clear()
        if getattr(self, "_owns_errors", False):
            self.errors.close()
        super().close()
