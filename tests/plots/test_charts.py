"""Figures tested by structure (traces, x and y, layout), never as images, on planted snapshots."""

from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

import explorer
import explorer.plots as plots
from explorer.analysis import key_stats
from explorer.errors import AnalysisError
from explorer.keygroups import assign_to_key_group
from explorer.snapshot import checkpoints_in

from tests.support.fixtures import PLANT_HOT_KEYS

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"


@pytest.fixture(scope="module")
def snap(planted_job):
    return explorer.open(planted_job.savepoint)


def test_key_group_bars_one_trace_per_subtask(snap):
    fig = plots.key_group_bars(snap.key_group_distribution())
    assert isinstance(fig, go.Figure)
    assert [t.name for t in fig.data] == ["subtask 0", "subtask 1"]
    assert list(fig.data[0].x) == list(range(64)) and list(fig.data[1].x) == list(range(64, 128))
    hot_kg = assign_to_key_group("hot-a", 128)
    trace = fig.data[hot_kg * 2 // 128]
    assert trace.y[list(trace.x).index(hot_kg)] >= 8 * 250
    assert fig.layout.title.text == "serialized bytes per key group of planted"
    assert fig.layout.xaxis.tickformat == ",d"  # key groups are whole numbers
    assert fig.to_plotly_json()["layout"]["bargap"] == 0


def test_key_group_bars_at_another_parallelism_and_metric(snap):
    fig = plots.key_group_bars(snap.key_group_distribution(parallelism=4), y="records", title="t")
    assert len(fig.data) == 4 and fig.layout.title.text == "t"
    assert sum(sum(t.y) for t in fig.data) == 1500


def test_subtask_bars_and_salting(snap):
    fig = plots.subtask_bars(snap.subtask_distribution())
    assert list(fig.data[0].x) == [0, 1] and sum(fig.data[0].y) == snap.subtask_distribution()["bytes"].sum()
    fig = plots.subtask_bars(snap.salting_whatif("hot-a", 4))
    assert [t.name for t in fig.data] == ["before", "after"]
    assert fig.layout.barmode == "group"
    assert len(fig.layout.shapes) == 2  # the two mean lines


def test_rescale_comparison_lines_per_metric(snap):
    w = snap.rescale_whatif([1, 2, 3, 4])
    fig = plots.rescale_comparison(w)
    assert {t.name for t in fig.data} == {"entries", "bytes", "keys", "records"}
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["bytes"].x) == [1, 2, 3, 4]
    assert by_name["bytes"].y[0] == 1.0
    assert any(s.x0 == 2 for s in fig.layout.shapes)  # the current parallelism
    other = plots.rescale_comparison(snap.rescale_whatif([2, 4], max_parallelism=[128, 256]), max_parallelism=256)
    assert "256" in other.layout.title.text and list(other.data[0].x) == [2, 4]


def test_hot_key_bars_put_planted_keys_first(snap):
    fig = plots.hot_key_bars(snap.hot_keys(5))
    order = list(fig.layout.xaxis.categoryarray)
    assert set(order[:2]) == set(PLANT_HOT_KEYS) and len(order) == 5
    assert all(t.name.startswith("subtask ") for t in fig.data)
    traffic = plots.hot_key_bars(snap.hot_keys(3, by="traffic"), y="records")
    assert max(max(t.y) for t in traffic.data) == 250


def test_lorenz_curve(snap):
    ks = key_stats(snap)
    fig = plots.lorenz_curve(ks)
    assert fig.data[0].name == "equality"
    curve = fig.data[1]
    assert curve.x[0] == 0 and curve.x[-1] == 1 and curve.y[-1] == pytest.approx(1.0)
    assert np.all(np.diff(curve.y) >= 0) and "Gini" in curve.name
    assert curve.y[len(curve.y) // 2] < 0.5  # skewed: half the keys hold less than half the bytes


def test_ttl_timeline(planted_ttl):
    snap = explorer.open(planted_ttl.savepoint)
    tl = snap.ttl_expiry(freq="15min")
    fig = plots.ttl_timeline(tl)
    names = [t.name for t in fig.data]
    assert names == ["last_seen", "expired, not cleaned"]
    assert sum(fig.data[0].y) == tl.loc[tl["status"] == "expiring", "bytes"].sum()
    assert sum(fig.data[1].y) == tl.loc[tl["status"] == "expired", "bytes"].sum()
    assert fig.layout.barmode == "stack"


def test_checkpoint_history(planted_job):
    h = explorer.history([*checkpoints_in(planted_job.checkpoint_dir), planted_job.savepoint])
    fig = plots.checkpoint_history(h)
    names = [t.name for t in fig.data]
    assert {"planted/events", "planted/last_seen", "planted/buckets"} <= set(names)
    assert "duration" in names and "new file bytes (incremental)" in names
    events = fig.data[names.index("planted/events")]
    assert list(events.x) == sorted(h["checkpoint_id"].unique())
    layout = fig.to_plotly_json()["layout"]
    assert layout["yaxis2"]["overlaying"] == "y"
    assert layout["yaxis2"]["title"]["text"] == "checkpoint duration"
    assert layout["yaxis"]["title"]["text"] == "file bytes per checkpoint"
    assert all(t.endswith(("ms", " s", "min")) for t in layout["yaxis2"]["ticktext"])


def test_diff_waterfall(planted_job):
    a = explorer.open(checkpoints_in(planted_job.checkpoint_dir)[0])
    b = explorer.open(planted_job.savepoint)
    d = explorer.diff(a, b)
    fig = plots.diff_waterfall(d)
    wf = fig.data[0]
    assert wf.type == "waterfall"
    assert wf.x[0] == "a" and wf.x[-1] == "b"
    assert wf.y[0] + sum(wf.y[1:-1]) == wf.y[-1] == d["bytes_b"].sum()
    assert "planted/events: added" in wf.x and "planted/events: changed" in wf.x


def test_diff_waterfall_has_one_bar_per_operator_and_state():
    """url-count and url-stats both have a state named count: two bars, not one merged bar."""
    chks = checkpoints_in(SAMPLES / "url_counts" / "checkpoints")
    d = explorer.diff(str(chks[0]), str(chks[-1]))  # paths, as explorer.history takes them
    x = list(plots.diff_waterfall(d).data[0].x)
    assert "url-count/count: added" in x and "url-stats/count: added" in x
    assert not [label for label in x if label.startswith("count:")]
    per = d[d["status"] == "added"].groupby(["operator", "state"], observed=True)["bytes_delta"].sum()
    wf = plots.diff_waterfall(d).data[0]
    bars = dict(zip(wf.x, wf.y))
    assert bars["url-count/count: added"] == per[("url-count", "count")]
    assert bars["url-stats/count: added"] == per[("url-stats", "count")]


def test_plots_explain_bad_input(snap):
    with pytest.raises(AnalysisError, match="lacks the columns"):
        plots.key_group_bars(snap.rescale_whatif([1]))
    with pytest.raises(AnalysisError, match="no operator"):
        plots.key_group_bars(snap.key_group_distribution(), operator="nope")


def test_shared_parameter_docs():
    for name in plots.__all__:
        doc = getattr(plots, name).__doc__
        assert "Parameters\n----------" in doc and "title : str or None" in doc, name


# Issue 30, "answers, not non-answers": how every figure reads (structure, not images)


def _every_figure(snap, planted_job):
    a = explorer.open(checkpoints_in(planted_job.checkpoint_dir)[0])
    h = explorer.history([*checkpoints_in(planted_job.checkpoint_dir), planted_job.savepoint])
    return {
        "key_group_bars": plots.key_group_bars(snap.key_group_distribution()),
        "key_group_bars(entries)": plots.key_group_bars(snap.key_group_distribution(), y="entries"),
        "subtask_bars": plots.subtask_bars(snap.subtask_distribution()),
        "subtask_bars(keys)": plots.subtask_bars(snap.subtask_distribution(), y="keys"),
        "salting": plots.subtask_bars(snap.salting_whatif("hot-a", 4)),
        "rescale_comparison": plots.rescale_comparison(snap.rescale_whatif([1, 2, 3, 4])),
        "hot_key_bars": plots.hot_key_bars(snap.hot_keys(5)),
        "hot_key_bars(records)": plots.hot_key_bars(snap.hot_keys(3, by="traffic"), y="records"),
        "lorenz_curve": plots.lorenz_curve(key_stats(snap)),
        "ttl_timeline": plots.ttl_timeline(snap.ttl_expiry()),
        "checkpoint_history": plots.checkpoint_history(h),
        "checkpoint_history(entries)": plots.checkpoint_history(h, y="entries"),
        "diff_waterfall": plots.diff_waterfall(explorer.diff(a, snap)),
    }


@pytest.fixture(scope="module")
def figures(snap, planted_job):
    return _every_figure(snap, planted_job)


@pytest.fixture(scope="module")
def every_figure(figures):
    return {name: f.to_plotly_json() for name, f in figures.items()}


def _axes(layout):
    return {k: v for k, v in layout.items() if k.startswith(("xaxis", "yaxis"))}


def test_legends_sit_above_the_plot_clear_of_axis_titles(every_figure):
    """A legend below the plot (y < 0) was drawn over the x axis title, one at the right over a second axis."""
    for name, fig in every_figure.items():
        legend, layout = fig["layout"]["legend"], fig["layout"]
        assert legend["orientation"] == "h" and legend["y"] >= 1 and legend["yanchor"] == "bottom", name
        assert layout["margin"]["t"] >= 56 + 24 or len([t for t in fig["data"] if t.get("name")]) <= 1, name
        assert layout["title"]["yref"] == "container" and layout["title"]["yanchor"] == "top", name


def test_count_axes_have_whole_number_ticks(every_figure):
    """14.5 entries is no count: count axes format ticks as integers from 0, a step of 1 on small ranges."""
    for name in ("key_group_bars(entries)", "subtask_bars(keys)", "hot_key_bars(records)",
                 "checkpoint_history(entries)"):
        y = every_figure[name]["layout"]["yaxis"]
        assert y["tickformat"] == ",d" and y["rangemode"] == "tozero", name
    x = every_figure["rescale_comparison"]["layout"]["xaxis"]
    assert x["tickformat"] == ",d" and x["dtick"] == 1  # parallelisms 1..4, never 2.5


def test_byte_axes_and_hover_read_in_kb_and_mb(every_figure, figures):
    for name in ("key_group_bars", "subtask_bars", "salting", "hot_key_bars", "ttl_timeline", "checkpoint_history",
                 "diff_waterfall"):
        fig = every_figure[name]
        y = fig["layout"]["yaxis"]
        assert y["tickmode"] == "array" and y["ticktext"][0].endswith("B"), name
        assert all(t.split()[-1] in ("B", "KB", "MB", "GB") for t in y["ticktext"]), (name, y["ticktext"])
        tops = [np.nanmax(np.asarray(t.y, dtype="float64")) for t in figures[name].data
                if t.type != "waterfall" and (t.yaxis or "y") == "y" and t.y is not None and len(t.y)]
        assert len(y["tickvals"]) >= 2 and y["tickvals"][-1] >= max(tops, default=0), name
        for t in fig["data"]:
            if t.get("type") in ("bar", "waterfall") and t.get("yaxis", "y") == "y":
                assert "%{customdata}" in t["hovertemplate"], name
                assert all(str(c).endswith("B") for c in t["customdata"]), name


def test_every_axis_says_what_it_counts_and_per_what(every_figure):
    expect = {
        "key_group_bars": "serialized bytes per key group",
        "key_group_bars(entries)": "entries per key group",
        "subtask_bars": "serialized bytes per subtask",
        "subtask_bars(keys)": "keys per subtask",
        "hot_key_bars": "serialized bytes per key",
        "hot_key_bars(records)": "records (traffic) per key",
        "ttl_timeline": "serialized bytes per expiry window",
        "checkpoint_history": "file bytes per checkpoint",
        "checkpoint_history(entries)": "entries per checkpoint",
        "lorenz_curve": "share of serialized bytes (largest keys last)",
    }
    for name, title in expect.items():
        assert every_figure[name]["layout"]["yaxis"]["title"]["text"] == title, name
    for name, fig in every_figure.items():
        for key, axis in _axes(fig["layout"]).items():
            if axis.get("visible") is not False and key in ("xaxis", "yaxis"):
                assert (axis.get("title") or {}).get("text"), (name, key)


def test_one_palette_across_figures(every_figure):
    """Every colour a figure draws comes from plots.PALETTE (or the few named greys), none typed in place."""
    found = set()

    def walk(node, key=""):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, (list, tuple)):
            for v in node:
                walk(v, key)
        elif isinstance(node, str) and key in ("color", "marker_color", "line_color", "bgcolor") and \
                not node.startswith("rgba"):
            found.add(node)

    for name, fig in every_figure.items():
        walk({"data": fig["data"], "shapes": fig["layout"].get("shapes", [])})
        assert tuple(fig["layout"]["colorway"]) == plots.PALETTE, name
    assert found and found <= plots.COLOURS, found - plots.COLOURS


def test_salting_mean_labels_are_at_opposite_ends(every_figure):
    """"mean before" and "mean after" printed on top of each other when the means were close."""
    notes = {a["text"]: a for a in every_figure["salting"]["layout"]["annotations"]}
    before, after = notes["mean before"], notes["mean after"]
    assert (before["x"], before["xanchor"]) != (after["x"], after["xanchor"])
    assert {before["xanchor"], after["xanchor"]} == {"left", "right"}


def test_a_legend_that_wraps_is_counted_as_plotly_lays_it_out():
    """plotly.js puts a legend that does not fit one row in a grid of its widest entry: counted as packed
    entries, the History legend of a Flink job (9 states) was given 6 rows of room, drew 9, and ran into the
    title (the dashboard browser test caught it). The figure grows so the plot keeps its height."""
    import plotly.graph_objects as go

    names = ["user-activity/total", "user-activity/stats", "user-activity/per_category", "user-activity/amounts",
             "user-activity/_timer_state/processing_user-timers", "user-activity/_timer_state/event_user-timers",
             "category-windows/window-contents", "category-windows/_timer_state/processing_window-timers",
             "category-windows/_timer_state/event_window-timers"]
    fig = go.Figure([go.Bar(x=[1], y=[1], name=n) for n in names])
    plots.legend_above(fig)
    widest = 40 + 7 * max(len(n) for n in names)
    per_row = max(1, (640 - 40) // widest)
    rows = -(-len(names) // per_row)
    assert rows == 9 and fig.layout.margin.t == 56 + 24 * rows
    assert fig.layout.height - fig.layout.margin.t >= 240 + 80
    short = go.Figure([go.Bar(x=[1], y=[1], name=n) for n in ("a", "b")])
    plots.legend_above(short)
    assert short.layout.margin.t == 56 + 24 and short.layout.height is None  # one row: nothing grows
