"""``widgets.explore``: every tab built, errors shown in the dashboard, ``close()`` closes everything."""

from __future__ import annotations

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
    shown = []
    snap = ext.explore(str(planted_heap.savepoint), display=shown.append)
    try:
        assert isinstance(snap, explorer.Snapshot)
        assert len(shown) == 1 and isinstance(shown[0], widgets.Dashboard)
        assert shown[0].data.snapshot.path == snap.path
    finally:
        for d in shown:
            d.close()


def test_a_snapshot_that_is_not_there_fails_clearly(tmp_path):
    with pytest.raises(explorer.SnapshotNotFoundError, match="no such file"):
        widgets.explore(tmp_path / "missing")
