"""Issue 30, "answers, not non-answers", in the dashboards: what a figure measures is named, and the
Overview's size figure is never left as empty axes (checked without a browser: what the kernel sends)."""

from __future__ import annotations

from pathlib import Path

import ipywidgets as w
import pytest

from widgets._data import SnapshotData
from widgets.history import HistoryTab
from widgets.overview import OverviewTab, facts

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"
FLINK = SAMPLES / "flink" / "heap-canonical-savepoint"


@pytest.fixture
def sent(monkeypatch):
    """Every state update the kernel sends: (model id, the state's keys and values)."""
    log: list[tuple[str, dict]] = []
    original = w.Widget._send

    def record(self, msg, buffers=None):
        if msg.get("method") == "update" and self.comm is not None:
            log.append((self.model_id, dict(msg.get("state") or {})))
        return original(self, msg, buffers)

    monkeypatch.setattr(w.Widget, "_send", record)
    return log


def test_the_overview_figure_has_its_data_before_it_is_shown_on_a_flink_savepoint(sent):
    """The staged Overview drew its size figure after the tab was on screen, put it in the tab, then sent its
    state: its traces went only as one-off messages, which the page drops while plotly.js loads, so a view
    drawn in between stayed empty grey axes (-1 B..6 B). The full state must go before the figure is shown."""
    tab = OverviewTab(SnapshotData.from_any(FLINK), staged=True)
    try:
        assert tab.size_figure is None
        tab.fill()
        fig = tab.size_figure
        assert fig is not None and len(fig.data) >= 1 and sum(len(t.x) for t in fig.data) > 0
        state = fig.get_state()
        assert state["_widget_data"] and all(len(t["x"]) for t in state["_widget_data"])
        shown = next(i for i, (mid, st) in enumerate(sent)
                     if mid == tab.model_id and f"IPY_MODEL_{fig.model_id}" in (st.get("children") or []))
        data_sent = [i for i, (mid, st) in enumerate(sent) if mid == fig.model_id and st.get("_widget_data")]
        assert data_sent and data_sent[0] < shown, "the figure was shown before its data was sent"
    finally:
        tab.close()


def test_overview_and_history_name_what_their_sizes_measure():
    """History's sizes are the checkpoint's files, Overview's the serialized values: each says which."""
    data = SnapshotData.from_any(SAMPLES / "url_counts" / "checkpoints")
    overview, history = OverviewTab(data), HistoryTab(data)
    try:
        shown = facts(data)
        assert "state size (serialized values)" in shown
        assert "serialized values" in overview.size_figure.layout.title.text
        assert "serialized" in overview.size_figure.layout.xaxis.title.text
        assert "files on disk" in history.size_figure.layout.title.text
        assert "file bytes" in history.size_figure.layout.yaxis.title.text
        assert "files on disk" in history.delta_figure.layout.yaxis.title.text
        history.metric = "entries"
        assert history.size_figure.layout.yaxis.title.text == "entries per checkpoint"
        assert "files on disk" not in history.size_figure.layout.title.text
    finally:
        overview.close()
        history.close()


def test_key_group_charts_name_their_measure_and_keep_the_legend_off_the_axis_title():
    from widgets.keygroups import KeyGroupsTab

    tab = KeyGroupsTab(SnapshotData.from_any(FLINK))
    try:
        y = tab.key_group_figure.layout.yaxis
        assert y.title.text == "serialized bytes per key group" and y.tickmode == "array"
        assert all(t.split()[-1] in ("B", "KB", "MB") for t in y.ticktext)
        assert tab.subtask_figure.layout.yaxis.title.text == "serialized bytes per subtask"
        tab.metric = "entries"
        assert tab.key_group_figure.layout.yaxis.title.text == "entries per key group"
        assert tab.key_group_figure.layout.yaxis.tickformat == ",d"
        legend = tab.whatif_figure.layout.legend
        assert legend.orientation == "h" and legend.y >= 1  # was y=-0.28, on the x axis title
    finally:
        tab.close()


def test_a_dashboard_axis_keeps_no_tick_setting_of_the_measure_before():
    """The Hot keys axis took dtick=1 from a small count and kept it for 2,000 records: a wall of ticks."""
    import plotly.graph_objects as go
    from explorer.plots import value_axis

    fig = go.Figure(go.Bar(x=["a", "b"], y=[1, 3]))
    value_axis(fig, "entries", [1, 3], per="key")
    assert fig.layout.yaxis.dtick == 1
    value_axis(fig, "records", [2000, 1300], per="key")
    assert fig.layout.yaxis.dtick is None and fig.layout.yaxis.tickmode == "auto"
    value_axis(fig, "bytes", [2000, 1300], per="key")
    assert fig.layout.yaxis.tickmode == "array" and fig.layout.yaxis.tickformat is None
    value_axis(fig, "entries", [2000, 1300], per="key")
    assert fig.layout.yaxis.tickvals is None and fig.layout.yaxis.tickformat == ",d"
