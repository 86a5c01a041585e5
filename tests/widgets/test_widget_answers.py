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


def test_flink_history_names_its_per_state_bytes_serialized_not_file_bytes():
    """Flink stores no file size per state: its History bars are the values' serialized sizes, and were
    labelled "file bytes", with the new-file-bytes markers drawn on the same axis as if they were comparable."""
    from explorer.analysis import history

    flink = SAMPLES / "flink" / "rocksdb-incremental-checkpoint"
    assert history(flink).attrs["bytes_measure"] == "serialized bytes"
    assert history(flink, per_state=False).attrs["bytes_measure"] == "file bytes"
    assert history(SAMPLES / "url_counts" / "checkpoints").attrs["bytes_measure"] == "file bytes"
    tab = HistoryTab(SnapshotData.from_any(flink))
    try:
        fig = tab.size_figure
        assert fig.layout.yaxis.title.text == "serialized bytes per checkpoint"
        assert "serialized bytes (values, not files)" in fig.layout.title.text and "files on disk" not in fig.layout.title.text
        assert not any("new file bytes" in (t.name or "") for t in fig.data)
        assert fig.layout.yaxis.tickmode == "array" and all(t.split()[-1] in ("B", "KB", "MB") for t in fig.layout.yaxis.ticktext)
        assert tab.delta_figure.layout.yaxis.title.text == "bytes (files on disk) per checkpoint"  # these are files
    finally:
        tab.close()


def test_the_ttl_axis_reads_as_bytes_per_window(planted_ttl_heap):
    """The TTL tab's axis was titled "bytes" with raw ticks (12000, 14000) and hover "12,345 bytes"."""
    from widgets.ttl import TTLTab

    tab = TTLTab(SnapshotData.from_any(planted_ttl_heap.savepoint))
    try:
        y = tab.timeline_figure.layout.yaxis
        assert y.title.text == "serialized bytes per 1 h window"
        legend = tab.timeline_figure.layout.legend
        assert legend.orientation == "h" and legend.y >= 1 and legend.title.text == "state"
        (now,) = tab.timeline_figure.layout.annotations  # inside the plot: above it, it sat on the legend
        assert now.text == "now" and now.y == 1 and now.yanchor == "top"
        assert y.tickmode == "array" and y.ticktext and all(t.split()[-1] in ("B", "KB", "MB") for t in y.ticktext)
        assert any(len(t.y) for t in tab.timeline_figure.data)
        for trace in tab.timeline_figure.data:
            assert len(trace.customdata or ()) == len(trace.y)
            assert all(c.split()[-1] in ("B", "KB", "MB") for c in trace.customdata or ())
            assert "%{customdata}" in trace.hovertemplate and "%{y:,}" not in trace.hovertemplate
        tab.freq = "6h"
        assert tab.timeline_figure.layout.yaxis.title.text.startswith("serialized bytes per 6 h window")
        assert "serialized bytes expiring per 6 h window" in tab.timeline_figure.layout.title.text.lower()
        assert " bytes)" not in tab.now_label.value  # "(12,345 bytes)" read as a raw count
    finally:
        tab.close()


def test_hot_keys_figures_say_what_they_count_per_subtask_and_key():
    """The salting figure's axis said "bytes per subtask" with raw ticks; the hottest keys' hover "12,345"."""
    from widgets.hotkeys import HotKeysTab

    tab = HotKeysTab(SnapshotData.from_any(SAMPLES / "url_counts" / "savepoint-heap"))
    try:
        tab.by = "bytes"
        y = tab.salt_figure.layout.yaxis
        assert y.title.text == "serialized bytes per subtask"
        assert y.tickmode == "array" and all(t.split()[-1] in ("B", "KB", "MB") for t in y.ticktext)
        assert all(c.split()[-1] in ("B", "KB", "MB") for tr in tab.salt_figure.data for c in tr.customdata)
        assert tab.lorenz_figure.layout.title.text == "Lorenz curve of serialized bytes per key"
        hot = tab.hot_figure.data[0]
        assert "%{y:,}" not in hot.hovertemplate
        assert [sub for sub, _ in hot.customdata] == list(tab.top["subtask"])
        assert all(text.split()[-1] in ("B", "KB", "MB") for _, text in hot.customdata)
        tab.by = "entries"
        assert tab.salt_figure.layout.yaxis.title.text == "entries per subtask"
        assert tab.salt_figure.layout.yaxis.tickformat == ",d"
    finally:
        tab.close()


def test_a_long_legend_leaves_the_history_plot_its_height():
    """On a Flink job's folder (ten states with long names, one checkpoint) the legend above the History plot
    took 240 of its 340 px: the bars were a strip 80 px high under a scrolling legend (the dashboard
    screenshot showed it), and the line above said "1 checkpoints"."""
    job = SAMPLES / "flink" / "production" / "plain-filemerging-rocksdb-incremental-checkpoint"
    tab = HistoryTab(SnapshotData.from_any(job))
    try:
        layout = tab.size_figure.layout
        assert len(tab.size_figure.data) >= 6
        assert layout.height - layout.margin.t - layout.margin.b >= 240
        assert "<b>1</b> checkpoint in" in tab.children[0].value
    finally:
        tab.close()


def test_spark_states_sharing_one_store_are_not_each_given_the_whole_store():
    """A transformWithState operator keeps its states in one store: each state was given the store's bytes,
    so History stacked 4 x 20 KB = 80 KB over a batch that wrote 20 KB (the dashboard screenshot showed it)."""
    from explorer.analysis import history

    h = history(SAMPLES / "spark" / "tws-rows")
    ok = h[h["reconstructable"]]
    assert ok["state"].nunique() >= 2 and ok["bytes"].isna().all()
    assert any("one state store" in n for n in h.attrs["notes"])
    single = history(SAMPLES / "spark" / "agg-hdfs")  # one state, its own store: its bytes are the batch's
    assert (single["bytes"].dropna() == single.loc[single["bytes"].notna(), "incremental_bytes"]).all()
    assert single["bytes"].notna().all()
    tab = HistoryTab(SnapshotData.from_any(SAMPLES / "spark" / "tws-rows"))
    try:
        stacked = sum(float(sum(t.y)) for t in tab.size_figure.data if t.type == "bar")
        assert stacked == 0 and any(t.type == "scatter" and "new file bytes" in t.name for t in tab.size_figure.data)
        assert not any(t.type == "bar" for t in tab.size_figure.data)  # no legend entries for bars never drawn
        tab.metric = "entries"  # entries are per state: stacked
        assert sum(t.type == "bar" for t in tab.size_figure.data) == ok["state"].nunique()
        assert "one state store" in tab.children[0].value
    finally:
        tab.close()
