"""``widgets.explore``: every tab built, errors shown in the dashboard, ``close()`` closes everything."""

from __future__ import annotations

import io

import explorer
import plotly.graph_objects as go
import pytest
import widgets
from tests.support.widgets import all_widgets
from explorer import ipython as ext
from explorer.snapshot import checkpoints_in


def test_public_surface_is_sorted_and_importable():
    assert widgets.__all__ == sorted(widgets.__all__)
    for name in widgets.__all__:
        assert getattr(widgets, name) is not None


def test_explore_a_checkpoint_directory_builds_every_tab(planted_heap):
    dash = widgets.explore(planted_heap.checkpoint_dir)
    try:
        assert isinstance(dash, widgets.Dashboard)
        assert dash.titles == ["Overview", "Keys", "Key groups", "Hot keys", "TTL", "History", "Diff"]
        assert dash.tab.titles == tuple(dash.titles)
        chks = checkpoints_in(planted_heap.checkpoint_dir)
        assert dash.data.snapshot.path == chks[-1]  # the newest checkpoint
        assert sorted(dash.history_tab.summary["checkpoint_id"]) == [int(p.name[4:]) for p in chks]
        assert (dash.diff_tab.a, dash.diff_tab.b) == (str(chks[-2]), str(chks[-1]))
        assert dash.errors.last_error is None
        for title in dash.titles:
            dash.view(title)
        made = all_widgets(dash)
        assert all("_model_module" in x.get_state() for x in made)  # no model trait shadows a widget's own
        figures = [x for x in made if isinstance(x, go.FigureWidget)]
        assert len(figures) >= 8 and all(len(f.data) for f in figures)
    finally:
        dash.close()


def test_figures_sync_their_current_state_for_views_made_later(planted_heap):
    # FigureWidget sends updates as one-off messages; a browser view made after them starts from the
    # synced _widget_data/_widget_layout, which must therefore follow every update
    dash = widgets.explore(planted_heap.savepoint, tab="Key groups")
    try:
        fig = dash.key_groups_tab.key_group_figure
        assert len(fig._widget_data) == 1 and len(fig._widget_data[0]["x"]) == 128
        assert "2 subtasks" in fig._widget_layout["title"]["text"]
        dash.key_groups_tab.parallelism_slider.value = 5
        assert "5 subtasks" in fig._widget_layout["title"]["text"]
        assert list(fig._widget_data[0]["customdata"]) == [kg * 5 // 128 for kg in range(128)]
    finally:
        dash.close()


def test_tabs_are_built_when_first_shown(planted_heap):
    dash = widgets.explore(planted_heap.savepoint)
    try:
        assert list(dash.tabs) == ["Overview"]  # each figure carries plotly.js: build only what is seen
        dash.tab.selected_index = 3
        assert list(dash.tabs) == ["Overview", "Hot keys"]
        assert dash._panes["Hot keys"].children == (dash.hot_keys_tab,)
        dash.tab.selected_index = 0
        dash.tab.selected_index = 3
        assert list(dash.tabs) == ["Overview", "Hot keys"]  # built once
        with pytest.raises(ValueError, match="no tab 'Nope'"):
            widgets.explore(planted_heap.savepoint, tab="Nope")
    finally:
        dash.close()


def test_explore_a_snapshot_without_history(planted_heap):
    dash = widgets.explore(explorer.open(planted_heap.savepoint), tab="Key groups")
    try:
        assert dash.tab.selected_index == 2
        assert dash.history_tab.history is None and "checkpoint directory" in dash.history_tab.children[0].value
        assert dash.key_groups_tab.operator == "planted"
    finally:
        dash.close()


def test_close_closes_every_widget_and_figure(planted_heap):
    dash = widgets.explore(planted_heap.checkpoint_dir)
    for title in dash.titles:
        dash.view(title)
    made = all_widgets(dash)
    assert len(made) > 50 and all(x.comm is not None for x in made)
    dash.close()
    assert [x for x in made if x.comm is not None] == []


def test_callback_errors_land_in_the_error_area_and_clear_on_success(planted_heap, monkeypatch):
    dash = widgets.explore(planted_heap.savepoint)
    try:
        tab = dash.key_groups_tab

        def broken(operator):
            raise RuntimeError("aggregates unavailable")

        monkeypatch.setattr(tab.data, "key_group_aggregates", broken)
        tab.parallelism_slider.value = 3  # must not raise: the error is shown
        assert isinstance(dash.errors.last_error, RuntimeError)
        assert "aggregates unavailable" in dash.errors.value and "key-group" in dash.errors.value
        assert dash.errors.layout.display is None  # visible
        monkeypatch.undo()
        tab.parallelism_slider.value = 4
        assert dash.errors.last_error is None and dash.errors.value == ""
        assert dash.errors.layout.display == "none"
    finally:
        dash.close()


def test_percent_explore_opens_the_dashboard(planted_heap):
    dash = ext.explore(str(planted_heap.savepoint))
    try:
        assert isinstance(dash, widgets.Dashboard)
        assert isinstance(dash.snapshot, explorer.Snapshot) and dash.snapshot.path == planted_heap.savepoint
    finally:
        dash.close()


def test_a_snapshot_that_is_not_there_fails_clearly(tmp_path):
    with pytest.raises(explorer.SnapshotNotFoundError, match="no such file"):
        widgets.explore(tmp_path / "missing")


def test_a_deferred_dashboard_shows_its_loading_line_before_opening_the_snapshot(planted_heap, tmp_path):
    dash = widgets.Dashboard(planted_heap.savepoint, defer=True)
    try:
        assert dash._data is None  # nothing read yet: not even the metadata
        assert "opening" in dash.header.value and "sx-loading" in dash._panes["Overview"].children[0].value
        tab = dash.view("Overview")
        assert dash.data.snapshot.path == planted_heap.savepoint and "opening" not in dash.header.value
        times = dash.timings["Overview"]
        assert times["asked"] <= times["first answer"] <= times["complete"]
        assert tab.size_figure is not None and "counting" not in tab.facts.value
    finally:
        dash.close()
    with pytest.raises(explorer.SnapshotNotFoundError, match="no such file"):  # still fails at once
        widgets.Dashboard(tmp_path / "missing", defer=True)


def test_a_dashboard_on_a_folder_that_is_no_snapshot_ends_its_loading_line_with_the_error(tmp_path):
    """issue 30: the spinner and the "opening" header of a deferred dashboard on a non-snapshot must not stay."""
    (tmp_path / "notes.txt").write_text("not a snapshot")
    dash = widgets.Dashboard(tmp_path, defer=True)
    try:
        assert "sx-loading" in dash._panes["Overview"].children[0].value
        dash.guarded(dash.build_selected, "building the Overview tab")()  # what the deferred build does
        line = dash._panes["Overview"].children[0].value
        assert "sx-loading" not in line and "sx-failed" in line and "opening the snapshot failed" in line
        assert str(type(dash.errors.last_error).__name__) in line
        assert "could not open" in dash.header.value and "opening ·" not in dash.header.value
    finally:
        dash.close()


def test_the_overview_answers_from_the_metadata_before_reading_the_keyed_state(planted_heap):
    from widgets._data import SnapshotData

    data = SnapshotData.from_any(planted_heap.savepoint)
    tab = widgets.OverviewTab(data, staged=True)
    try:
        assert "frame" not in data.__dict__  # the keyed state is not read for the first answer
        assert tab.fact_values["operators"] != "counting…" and tab.fact_values["state entries"] == "counting…"
        assert tab.pending in tab.children and tab.size_figure is None
        tab.fill()
        assert "frame" in data.__dict__
        assert tab.fact_values["state entries"] == f"{len(data.frame):,}"
        assert tab.pending not in tab.children and tab.size_figure in tab.children and tab.size_figure.data
    finally:
        tab.close()


def test_the_loading_line_says_how_far_a_read_has_got():
    import ipywidgets as w
    from tqdm.std import tqdm

    from widgets._base import loading_html
    from widgets._progress import ProgressLine

    sink = io.StringIO()
    old = tqdm(total=5, desc="a bar from before", disable=False, file=sink)
    line = ProgressLine("Reading the snapshot's keyed state…", loading_html)
    html = w.HTML()
    try:
        with tqdm(total=10, desc="reading Spark state through Spark", unit="state", disable=False,
                  file=sink) as bar:
            bar.set_postfix_str("agg/default", refresh=False)
            bar.update(3)
            line.poll(html)
            assert "reading Spark state through Spark: 3/10 state (agg/default)" in html.value
            assert "Reading the snapshot" in html.value and "a bar from before" not in html.value
        line.poll(html)
        assert "reading Spark state" not in html.value  # a finished bar leaves the line
        with tqdm(total=1, desc="starting Spark", disable=False, file=sink):
            line.poll(html)
            assert "starting Spark" in html.value and "0/1" not in html.value  # a step, not a count
    finally:
        old.close()
        html.close()
