"""Every tab on every format the explorer opens: right totals, no empty figures, no None/NaN/NaT.

One snapshot of each format from ``sample_data`` (the engine's heap and RocksDB savepoints and a
checkpoint directory, Apache Flink heap, RocksDB and SQL savepoints, a Spark checkpoint). Each
test here was written against a defect of issue 18 and failed before its fix.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import explorer
import ipywidgets as w
import plotly.graph_objects as go
import pytest
import widgets
from tests.support.widgets import figure_problems, null_words, shown_widgets, visible_text

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"

FORMATS = {
    "engine-heap": SAMPLE / "url_counts" / "savepoint-heap",
    "engine-rocksdb": SAMPLE / "url_counts" / "savepoint-rocksdb",
    "engine-checkpoints": SAMPLE / "url_counts" / "checkpoints",
    "flink-heap": SAMPLE / "flink" / "heap-canonical-savepoint",
    "flink-rocksdb": SAMPLE / "flink" / "rocksdb-native-savepoint",
    "flink-sql": SAMPLE / "flink" / "sql-groupby-savepoint",
}


@pytest.fixture(scope="module", params=list(FORMATS))
def dash(request):
    d = widgets.explore(FORMATS[request.param])
    for title in d.titles:
        d.view(title)
    yield d
    d.close()


def problems(dash) -> list[str]:
    out = []
    for x in shown_widgets(dash):
        if isinstance(x, go.FigureWidget):
            out += figure_problems(x)
        elif isinstance(x, (w.HTML, w.Label)):
            bad = null_words(visible_text(x.value))
            if bad:
                out.append(f"{bad} in {visible_text(x.value)[:200]!r}")
        elif isinstance(x, w.Select):
            out += [f"null in key list: {o!r}" for o, _ in x.options if null_words(str(o))]
    return out


def test_every_tab_builds_without_an_error_empty_figure_or_null_cell(dash):
    assert dash.errors.last_error is None
    assert set(dash.tabs) == set(dash.titles)
    assert problems(dash) == []


def test_overview_totals_are_counted_from_the_state(dash):
    # issue 18: a Flink savepoint showed "state entries 0, size 0 B" beside a chart of 150 kB
    df = dash.snapshot.keyed_state(columns=["operator", "key", "size_bytes"])
    facts = dash.overview_tab.fact_values
    assert facts["state entries"] == f"{len(df):,}"
    assert len(df) > 0 and facts["state size (serialized values)"] != "0 B"
    assert "None" not in facts.values()


def test_hot_keys_rank_by_traffic_where_counted_else_by_bytes(dash):
    tab = dash.hot_keys_tab
    if tab.has_traffic():
        assert tab.by == "traffic"
        ks = dash.data.key_stats(tab.operator)
        counted = ks["records"].notna()
        assert set(tab.top["key"]) <= set(ks.loc[counted, "key"])  # unknown is not zero: never ranked
    else:
        assert tab.by == "bytes"
        tab.by_select.value = "traffic"
        try:
            # issue 18: empty -1..1 axes and "hottest key None"; now it says there is no traffic data
            assert "no traffic data" in tab.stats.value and "None" not in visible_text(tab.stats.value)
            for fig in (tab.hot_figure, tab.lorenz_figure, tab.salt_figure):
                assert figure_problems(fig) == []
                assert any("no traffic data" in a.text for a in fig.layout.annotations)
            assert problems(dash) == []
        finally:
            tab.by_select.value = "bytes"
        assert not tab.hot_figure.layout.annotations and len(tab.hot_figure.data[0].x)


def test_the_key_list_reads_as_english(dash):
    labels = [label for label, _ in dash.keys_tab.key_list.options]
    assert labels and not [x for x in labels if " 1 entries" in x]  # seen in the browser test's screenshot


def test_tables_scroll_and_align_headers_with_their_columns(dash):
    html = dash.overview_tab.states_table.value
    assert "sx-scroll" in html and "overflow:auto" in html
    assert 'style="text-align: right;"' not in html  # pandas' right-aligned header row over left-aligned cells
    import re

    heads = re.findall(r"<th class='(sx-\w+)'", html)
    first_row = re.findall(r"<td class='(sx-\w+)'", html)[: len(heads)]
    assert heads and heads == first_row


def test_flink_ttl_states_without_a_length_show_how_to_give_it():
    # issue 18: "no state has a TTL", with no hint to pass ttl=
    d = widgets.explore(FORMATS["flink-heap"], tab="TTL")
    try:
        text = visible_text(d.ttl_tab.children[0].value)
        assert "ttl=" in text and "last_seen" in text and "timedelta" in text
    finally:
        d.close()
    d = widgets.explore(FORMATS["flink-heap"], tab="TTL", ttl={"last_seen": timedelta(hours=1)})
    try:
        tab = d.ttl_tab
        assert len(tab.ttl_rows) > 0 and tab.timeline_figure.data
        assert problems(d) == []
    finally:
        d.close()


def test_the_ttl_window_buttons_are_wide_enough_for_their_labels(dash):
    tab = dash.ttl_tab
    width = int(tab.freq_select.style.button_width.removesuffix("px"))
    assert width >= 14 * max(len(o) for o in tab.freq_select.options)  # with padding: "10min" read "10…" at 60px


@pytest.mark.spark
def test_a_spark_checkpoint_opens_in_every_tab():
    d = widgets.explore(SAMPLE / "spark" / "tws-rows")
    try:
        for title in d.titles:
            d.view(title)
        assert d.errors.last_error is None
        assert problems(d) == []
        assert d.overview_tab.fact_values["state entries"] != "0"
    finally:
        d.close()


# --- the History and Diff tabs take what explorer.history takes (issue 28) -----------------------------------
def _history_ids(tab) -> list[int]:
    return sorted(int(i) for i in tab.summary["checkpoint_id"])


def test_history_tab_reads_a_flink_checkpoint_folder_as_explorer_history_does():
    from widgets._data import SnapshotData
    from widgets.history import HistoryTab

    folder = SAMPLE / "flink" / "heap-checkpoint-compressed"  # a job's folder with one retained chk-N
    data = SnapshotData.from_any(folder)
    tab = HistoryTab(data)
    try:
        assert data.checkpoint_dir == folder
        assert tab.history is not None
        want = sorted(int(i) for i in explorer.history(folder)["checkpoint_id"].unique())
        assert _history_ids(tab) == want == [19]
        assert problems(tab) == []  # Flink stores no durations: no empty figure for them
    finally:
        tab.close()


def test_history_tab_reads_a_spark_checkpoint_as_explorer_history_does():
    from widgets._data import SnapshotData
    from widgets.history import HistoryTab

    path = SAMPLE / "spark" / "agg-rocksdb"  # read from its files: no JVM
    data = SnapshotData.from_any(path)
    tab = HistoryTab(data)
    try:
        assert data.checkpoint_dir == path
        assert tab.history is not None
        want = sorted(int(i) for i in explorer.history(path)["checkpoint_id"].unique())
        assert _history_ids(tab) == want and len(want) > 1
        assert problems(tab) == []
    finally:
        tab.close()


def test_diff_tab_offers_the_retained_checkpoints_of_a_flink_job_folder(tmp_path):
    import shutil

    from widgets._data import SnapshotData
    from widgets.diff import DiffTab

    chk = SAMPLE / "flink" / "heap-checkpoint-compressed" / "chk-19"
    for name in ("chk-19", "chk-20"):  # a job that retained two checkpoints (the same state twice)
        shutil.copytree(chk, tmp_path / name)
    data = SnapshotData.from_any(tmp_path)
    tab = DiffTab(data)
    try:
        assert data.checkpoint_dir == tmp_path
        assert [p for _, p in tab.a_select.options] == [str(tmp_path / "chk-19"), str(tmp_path / "chk-20")]
        assert (tab.a, tab.b) == (str(tmp_path / "chk-19"), str(tmp_path / "chk-20"))
        assert tab.result is not None
    finally:
        tab.close()
