"""plotly.js goes to the page once per kernel, and a figure's module is small (widgets._plotly).

plotly's own FigureWidget sends the 5 MB bundle as every figure's module; anywidget then
evaluates it once per figure and gives up on a model (dropping its updates, the figure left
empty) when that takes over 2 s. The browser test (tests/ui/test_dashboard_formats.py) checks
the figures draw; here: what the kernel sends.
"""

from __future__ import annotations

from widgets._base import figure, sync_figure
from widgets._plotly import PlotlyLibrary, plotly_bundle_path, plotly_library


def test_a_figure_carries_a_small_module_not_plotly_js():
    fig = figure(300)
    try:
        fig.add_bar(x=[1, 2], y=[3, 4])
        sync_figure(fig)
        state = fig.get_state()
        assert len(state["_esm"]) < 5_000
        assert "plotlyRegistry" in state["_esm"]
        assert state["_widget_data"][0]["y"] == [3, 4]  # the data itself still goes with the figure
    finally:
        fig.close()


def test_the_bundle_goes_once_in_one_library_widget_opened_before_the_figures():
    figures = [figure(300) for _ in range(3)]
    try:
        library = plotly_library()
        assert isinstance(library, PlotlyLibrary)
        assert all(plotly_library() is library for _ in figures)
        assert library.bundle == plotly_bundle_path().read_text(encoding="utf-8")
        assert len(library.bundle) > 1_000_000
        assert "export" in library.bundle and "FigureModel" in library.bundle  # plotly's widget module
        assert library.comm is not None
    finally:
        for fig in figures:
            fig.close()


def test_a_closed_library_is_made_again():
    first = plotly_library()
    first.close()
    fig = figure(300)
    try:
        second = plotly_library()
        assert second is not first and second.comm is not None
    finally:
        fig.close()
