"""Figures tested by structure (traces, x and y, layout), never as images, on planted snapshots."""

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
    assert fig.layout.title.text == "bytes per key group of planted"
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
    assert "duration (ms)" in names and "incremental bytes" in names
    events = fig.data[names.index("planted/events")]
    assert list(events.x) == sorted(h["checkpoint_id"].unique())
    layout = fig.to_plotly_json()["layout"]
    assert layout["yaxis2"]["overlaying"] == "y"
    assert layout["yaxis2"]["title"]["text"] == "duration (ms)" and layout["yaxis"]["title"]["text"] == "bytes"


def test_diff_waterfall(planted_job):
    a = explorer.open(checkpoints_in(planted_job.checkpoint_dir)[0])
    b = explorer.open(planted_job.savepoint)
    d = explorer.diff(a, b)
    fig = plots.diff_waterfall(d)
    wf = fig.data[0]
    assert wf.type == "waterfall"
    assert wf.x[0] == "a" and wf.x[-1] == "b"
    assert wf.y[0] + sum(wf.y[1:-1]) == wf.y[-1] == d["bytes_b"].sum()
    assert "events: added" in wf.x and "events: changed" in wf.x


def test_plots_explain_bad_input(snap):
    with pytest.raises(AnalysisError, match="lacks the columns"):
        plots.key_group_bars(snap.rescale_whatif([1]))
    with pytest.raises(AnalysisError, match="no operator"):
        plots.key_group_bars(snap.key_group_distribution(), operator="nope")


def test_shared_parameter_docs():
    for name in plots.__all__:
        doc = getattr(plots, name).__doc__
        assert "Parameters\n----------" in doc and "title : str or None" in doc, name
