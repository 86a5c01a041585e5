"""Each tab without a browser: set a control's ``.value``, check the model and the figure data."""

from __future__ import annotations

import explorer
import numpy as np
import pytest
import traitlets
import widgets
import pandas as pd
from explorer.analysis import expired_not_cleaned, subtask_distribution, ttl_expiry
from tests.support.fixtures import PLANT_HOT_KEYS


@pytest.fixture(scope="module")
def dash(planted_heap):
    d = widgets.explore(planted_heap.checkpoint_dir)
    yield d
    d.close()


def test_parallelism_slider_reassigns_key_groups_like_flink(dash):
    tab = dash.key_groups_tab
    assert (tab.operator, tab.metric, tab.parallelism, tab.max_parallelism) == ("planted", "bytes", 2, 128)
    colours_before = list(tab.key_group_figure.data[0].marker.color)
    total = tab.subtask_loads.sum()
    tab.parallelism_slider.value = 5
    assert tab.parallelism == 5
    expected = subtask_distribution(dash.data.snapshot, 5)["bytes"].to_numpy()
    np.testing.assert_array_equal(tab.subtask_loads, expected)
    assert tab.subtask_loads.sum() == total
    assert list(tab.subtask_figure.data[0].x) == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(tab.subtask_figure.data[0].y, expected)
    assert list(tab.key_group_figure.data[0].customdata) == [kg * 5 // 128 for kg in range(128)]
    assert list(tab.key_group_figure.data[0].marker.color) != colours_before
    assert "5 subtasks" in tab.key_group_figure.layout.title.text
    assert list(tab.whatif_figure.data[2].x) == [5]
    assert tab.imbalance == pytest.approx(expected.max() / expected.mean())


def test_parallelism_is_validated(dash):
    tab = dash.key_groups_tab
    for bad in (0, 129):
        with pytest.raises(traitlets.TraitError, match=r"parallelism must be in 1\.\.128"):
            tab.parallelism = bad


def test_metric_toggle_redraws_with_that_metric(dash):
    tab = dash.key_groups_tab
    tab.metric_select.value = "keys"
    agg = dash.data.key_group_aggregates("planted")
    np.testing.assert_array_equal(tab.key_group_figure.data[0].y, agg["keys"].to_numpy())
    assert tab.subtask_loads.sum() == 202  # 200 ordinary keys and two hot ones
    tab.metric_select.value = "bytes"


def test_keys_search_page_and_pick(dash):
    tab = dash.keys_tab
    assert tab.matches == 202 and len(tab.page_keys) == tab.page_size
    assert set(tab.page_keys[:2]) == set(PLANT_HOT_KEYS)  # sorted by bytes, largest first
    tab.next_button.click()
    assert tab.page == 1 and len(tab.page_keys) == tab.page_size
    with pytest.raises(traitlets.TraitError, match="page must be in"):
        tab.page = 99
    tab.search.value = "HOT-"
    assert tab.matches == 2 and tab.page == 0 and sorted(tab.page_keys) == sorted(PLANT_HOT_KEYS)
    tab.key_list.value = 0
    key = tab.page_keys[0]
    assert tab.key == key
    states = set(tab.key_state["state"])
    assert states == {"last_seen", "events", "buckets"}
    kg = explorer.assign_to_key_group(key, 128)
    assert f"key group <b>{kg}</b>" in tab.detail.value and f"subtask {kg * 2 // 128}" in tab.detail.value
    tab.search.value = ""


def test_hot_keys_rank_and_salting(dash):
    tab = dash.hot_keys_tab
    assert set(tab.top["key"][:2]) == set(PLANT_HOT_KEYS)
    assert list(tab.hot_figure.data[0].x[:2]) == list(tab.top["key"][:2])
    tab.n_slider.value = 5
    assert len(tab.hot_figure.data[0].x) == 5
    tab.by_select.value = "traffic"
    assert set(tab.top["key"][:2]) == set(PLANT_HOT_KEYS)
    assert tab.hot_figure.layout.yaxis.title.text == "records (traffic) per key"
    assert tab.hot_figure.layout.yaxis.tickformat == ",d"  # whole records (issue 30)
    assert tab.hot_figure.layout.yaxis.dtick is None  # not one tick per record: the axis reads the new values
    tab.by_select.value = "bytes"
    assert tab.hot_figure.layout.yaxis.title.text == "serialized bytes per key"
    assert tab.hot_figure.layout.yaxis.ticktext[-1].endswith("B")
    before = tab.salted_loads.copy()
    tab.salt_slider.value = 16
    assert tab.salted_loads.sum() == pytest.approx(tab.subtask_loads.sum())
    assert not np.allclose(before, tab.salted_loads) or tab.imbalance_after <= tab.imbalance_before
    np.testing.assert_allclose(tab.salt_figure.data[1].y, tab.salted_loads)
    assert "16 sub-keys" in tab.salt_figure.layout.title.text


def test_history_metric_and_diff_pick(dash):
    hist = dash.history_tab
    hist.metric_select.value = "entries"
    ys = np.concatenate([np.asarray(tr.y, dtype=float) for tr in hist.size_figure.data if tr.type == "bar"])
    assert ys.sum() == hist.history["entries"].sum()
    diff = dash.diff_tab
    first = diff.a_select.options[0][1]
    before = diff.result["status"].value_counts().to_dict()
    diff.a_select.value = first
    assert diff.a == first
    after = diff.result["status"].value_counts().to_dict()
    assert after != before and after.get("added", 0) > before.get("added", 0)
    assert diff.waterfall.data[0].type == "waterfall"
    assert dash.errors.last_error is None


def test_ttl_now_control_moves_expiry(planted_ttl_heap):
    dash = widgets.explore(planted_ttl_heap.savepoint, tab="TTL")
    try:
        tab = dash.ttl_tab
        for hours, freq in ((0.0, "1h"), (3.5, "10min"), (-1.0, "6h")):  # the fast path answers as the analysis does
            tab.freq_select.value = freq
            tab.now_slider.value = hours
            expected = ttl_expiry(dash.data.snapshot, now=tab.now, freq=freq)
            pd.testing.assert_frame_equal(tab.timeline.reset_index(drop=True), expected.reset_index(drop=True),
                                          check_dtype=False)
            pd.testing.assert_frame_equal(tab.expired, expired_not_cleaned(dash.data.snapshot, now=tab.now),
                                          check_dtype=False)
        tab.freq_select.value = "1h"
        tab.now_slider.value = 0.0
        at_snapshot = tab.expired_entries
        tab.now_slider.value = tab.now_slider.max
        assert tab.expired_entries == len(tab.ttl_rows) > at_snapshot  # every value expires within the range
        tab.now_slider.value = tab.now_slider.min
        assert tab.expired_entries == 0
        shown = sum(float(np.sum(tr.y)) for tr in tab.timeline_figure.data[:-1] if tr.y is not None)
        assert shown == tab.timeline.loc[tab.timeline["status"] == "expiring", "bytes"].sum() > 0
        tab.freq_select.value = "10min"
        assert "per 10 min window" in tab.timeline_figure.layout.title.text  # the width as people read it
        assert dash.errors.last_error is None
    finally:
        dash.close()


def test_hot_keys_tab_names_a_tie_and_orders_it_as_the_analyses_do():
    """Every bucket of this Flink checkpoint holds 8 bytes: no hottest key, no salting what-if, and the
    tied keys in the order hot_keys() gives them (numbers by value: -25 before -1), as in the report."""
    from explorer.analysis import hot_keys
    from widgets.hotkeys import HotKeysTab
    from widgets._data import SnapshotData

    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "sample_data/flink/heap-checkpoint-compressed/chk-19"
    tab = HotKeysTab(SnapshotData.from_any(path))
    try:
        tab.operator_select.value = "bucket-state"
        tab.by_select.value = "bytes"
        expected = hot_keys(explorer.open(path), n=tab.n, by="bytes", operator="bucket-state")["key"].tolist()
        assert tab.top["key"].tolist() == expected
        assert "no hottest key: 50 keys tie at 8 bytes, every key the same" in tab.stats.value
        assert tab.salt_figure.layout.title.text == "No salting what-if: no hottest key"  # the reason: in stats (it ran off the figure)
    finally:
        tab.close()


def test_overview_says_its_key_count_is_per_operator(dash):
    from widgets.overview import KEYS_FACT, facts

    shown = facts(dash.data)
    assert KEYS_FACT == "keys (distinct per operator, summed)" and KEYS_FACT in shown and "keys" not in shown


def test_key_groups_tab_says_how_many_groups_a_subtask_owns():
    from widgets.keygroups import owns_text

    assert owns_text(128, 2) == "each subtask owns 64 key groups"
    assert owns_text(128, 3) == "each subtask owns 42–43 key groups"
    assert owns_text(4, 4) == "each subtask owns one key group"


def _call_args(code: str, func: str) -> dict:
    """The keyword arguments (as literals) of the call to ``func`` in ``code``, and its first argument."""
    import ast

    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == func:
            out = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
            if node.args and isinstance(node.args[0], ast.Constant):
                out["_arg"] = node.args[0].value
            return out
    raise AssertionError(f"no call to {func} in {code!r}")


def test_hot_keys_buttons_offer_editor_snippets_for_the_selected_key(dash, monkeypatch):
    import IPython

    monkeypatch.setattr(IPython, "get_ipython", lambda: None)  # no shell, whatever earlier tests started
    tab = dash.hot_keys_tab
    hottest = tab.top["key"].iloc[0]
    assert tab.key_select.value == 0
    tab.drop_button.click()
    code = tab.snippet
    assert _call_args(code, "drop_keys") == {"operator": tab.operator, "keys": [hottest]}
    assert _call_args(code, "edit") == {"_arg": str(dash.data.snapshot.path)}
    assert "copy it into a cell" in tab.snippet_area.value  # no IPython here: shown, not run
    tab.key_select.value = 1
    tab.salt_button.click()
    assert _call_args(tab.snippet, "salting_whatif") == {"keys": [tab.top["key"].iloc[1]], "n": tab.salt,
                                                         "operator": tab.operator}
    assert _call_args(tab.snippet, "drop_keys")["keys"] == [tab.top["key"].iloc[1]]


def test_snippets_escape_untrusted_keys_and_paths():
    import numpy as np
    from widgets.hotkeys import drop_key_code, salt_key_code

    key = 'evil"\'\n); import os; os.system("x") #\\'
    path = "/tmp/it's \"here\"\n"
    for code in (drop_key_code(path, "op'\n", key), salt_key_code(path, "op'\n", key, 4)):
        args = _call_args(code, "drop_keys")
        assert args == {"operator": "op'\n", "keys": [key]}  # the same key, as data
        assert _call_args(code, "edit") == {"_arg": path}
        assert "import os" not in code.replace(repr(key), "")  # nothing of the key outside its literal
    assert _call_args(drop_key_code("p", "o", np.int64(7)), "drop_keys")["keys"] == [7]
    assert _call_args(drop_key_code("p", "o", {"f0": "a", "f1": 2}), "drop_keys")["keys"] == [["a", 2]]


def test_snippet_goes_into_a_new_cell_under_ipython(dash, monkeypatch):
    import IPython

    class Shell:
        def __init__(self):
            self.got = []

        def set_next_input(self, code, replace=False):
            self.got.append(code)

    shell = Shell()
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    tab = dash.hot_keys_tab
    tab.drop_button.click()
    assert shell.got == [tab.snippet] and "in a new cell below" in tab.snippet_area.value
