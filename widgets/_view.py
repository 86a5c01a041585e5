"""The base of every view, and the loading line: light (ipywidgets only), so a dashboard's loading line
shows before pandas, plotly or the readers are imported.

A view is an ``ipywidgets.VBox`` whose model is its own traitlets (a parallelism, a metric, a
page...). Controls are linked to the model, the model's observers recompute and update the
figures *in place*, and every observer runs under the shared :class:`~widgets._errors.ErrorArea`.
``close()`` closes every widget the view made, figures included, so re-running a notebook cell
leaves no comms behind.
"""

from __future__ import annotations

import html
import sys
from copy import deepcopy
from typing import Any, Callable, Iterable, TypeVar

import ipywidgets as w

from explorer.plots.palette import GUIDE, MUTED, PALETTE

from ._errors import ErrorArea

W = TypeVar("W", bound=w.Widget)


def sync_figure(fig: Any) -> None:
    """Copy a FigureWidget's current data and layout into its synced model state.

    plotly's FigureWidget sends later changes as one-off messages and refreshes the
    state a new view starts from only when the figure itself is displayed. A figure
    inside a container is displayed by its container, so a view created after an
    update (a tab opened later, a notebook re-rendered) would start from the empty
    figure the constructor made. The views call this after every update.
    """
    fig._widget_layout = deepcopy(fig._layout_obj._props)
    fig._widget_data = deepcopy(fig._data)
    # Sent whether or not traitlets saw a change: plotly appends to ``_widget_data`` in place, so
    # the assignment above may compare equal and send nothing. A figure's browser model applies the
    # one-off messages only once plotly.js is in the page (widgets._plotly); until then its view
    # waits and draws from this state.
    if fig.comm is not None:
        fig.send_state(["_widget_data", "_widget_layout"])


def loading_html(what: str) -> str:
    """A small spinner and a line saying what is being read or computed."""
    return ("<style>@keyframes sx-spin{to{transform:rotate(360deg)}}</style>"
            f"<div class='sx-loading' style='padding:12px;color:{MUTED};font-size:13px'>"
            f"<span style='display:inline-block;width:12px;height:12px;border:2px solid {GUIDE};"
            f"border-top-color:{PALETTE[0]};border-radius:50%;animation:sx-spin 0.8s linear infinite;"
            f"vertical-align:middle;margin-right:8px'></span>{html.escape(what)}</div>")


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
        # plotly's FigureWidget class is imported only where a figure was made: its first import costs
        # seconds (nbformat, jsonschema), which must not delay a dashboard's loading line
        module = sys.modules.get("plotly.graph_objs._figurewidget")
        cls = getattr(module, "FigureWidget", None)
        if cls is None:
            return
        for widget in self._owned:
            if isinstance(widget, cls):
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
