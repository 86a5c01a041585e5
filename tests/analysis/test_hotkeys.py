"""Hot keys, skew and the salting what-if: the planted hot keys must come out on top."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import explorer
from explorer.analysis import (gini, hot_keys, key_skew, key_stats, lorenz_curve, salted_key, salting_measure,
                               salting_whatif, top_share)
from explorer.errors import AnalysisError
from explorer.keygroups import assign_to_key_group

from tests.support.fixtures import PLANT_HOT_KEYS

from tests.support.truth import bytes_per_key, entries_per_key, records_per_key, subtask_loads


@pytest.fixture(scope="module")
def snap(planted_job):
    return explorer.open(planted_job.savepoint)


@pytest.mark.parametrize("by", ["bytes", "entries", "traffic"])
def test_planted_hot_keys_rank_first(snap, planted_job, by):
    hk = snap.hot_keys(n=5, by=by)
    assert set(hk["key"].iloc[:2]) == set(PLANT_HOT_KEYS)
    assert hk["rank"].tolist() == [1, 2, 3, 4, 5]
    truth = {"bytes": bytes_per_key, "entries": entries_per_key, "traffic": records_per_key}[by](planted_job.records)
    col = {"bytes": "bytes", "entries": "entries", "traffic": "records"}[by]
    for row in hk.itertuples():
        if by == "traffic":  # Space-Saving: count - error <= true count <= count
            assert row.records - row.records_error <= truth[row.key] <= row.records
        else:
            assert getattr(row, col) == truth[row.key]
        assert row.key_group == assign_to_key_group(row.key, 128)
        assert row.subtask == row.key_group * 2 // 128


def test_hot_key_overloads_its_subtask(snap, planted_job):
    hk = snap.hot_keys(n=2, by="bytes").set_index("key")
    loads = subtask_loads(bytes_per_key(planted_job.records), 2)
    for k in PLANT_HOT_KEYS:
        s = hk.loc[k, "subtask"]
        assert hk.loc[k, "subtask_load"] == loads[s]
        assert hk.loc[k, "subtask_share"] == pytest.approx(hk.loc[k, "bytes"] / loads[s])
        assert hk.loc[k, "share"] == pytest.approx(hk.loc[k, "bytes"] / loads.sum())


def test_overload_is_one_number_per_key_in_every_table(snap, planted_job):
    """overload is measured in traffic (counted per key group) whatever the ranking, so the
    same key shows the same overload by bytes, entries and traffic."""
    truth = subtask_loads(records_per_key(planted_job.records), 2)
    tables = [snap.hot_keys(n=5, by=by).set_index("key") for by in ("bytes", "entries", "traffic", "auto")]
    for k in PLANT_HOT_KEYS:
        values = {t.loc[k, "overload"] for t in tables}
        assert len(values) == 1
        assert {t.loc[k, "overload_by"] for t in tables} == {"records"}
        s = tables[0].loc[k, "subtask"]
        assert values.pop() == pytest.approx(truth[s] / truth.mean())


def test_traffic_comes_from_the_engine_sketch(snap):
    hk = snap.hot_keys(n=3, by="traffic")
    assert hk["records"].iloc[:2].tolist() == [250, 250] and hk["records_error"].iloc[:2].tolist() == [0, 0]
    assert hk["records"].iloc[2] - hk["records_error"].iloc[2] <= 5 <= hk["records"].iloc[2]


def test_skew_figures(snap, planted_job):
    sk = key_skew(snap, by="bytes").iloc[0]
    values = np.array(list(bytes_per_key(planted_job.records).values()), dtype=float)
    assert sk["keys"] == 202
    assert sk["gini"] == pytest.approx(gini(values))
    top3 = np.sort(values)[::-1][:3].sum() / values.sum()  # 1 % of 202 keys rounds up to 3
    assert sk["top_1pct_share"] == pytest.approx(top3)
    assert sk["top_key"] in PLANT_HOT_KEYS and 0.2 < sk["gini"] < 0.5


def test_gini_and_top_share_by_hand():
    assert gini([1, 1, 1, 1]) == 0.0
    assert gini([0, 0, 0, 10]) == pytest.approx(0.75)
    assert gini([]) == 0.0
    assert top_share([1] * 99 + [101], 0.01) == pytest.approx(101 / 200)
    lc = lorenz_curve([0, 0, 0, 10])
    assert lc["key_share"].tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert lc["load_share"].tolist() == [0.0, 0.0, 0.0, 0.0, 1.0]


def test_salting_splits_the_hot_key_into_known_key_groups(snap, planted_job):
    n = 8
    s = snap.salting_whatif("hot-a", n=n)
    before = s[s["scenario"] == "before"].set_index("subtask")
    after = s[s["scenario"] == "after"].set_index("subtask")
    per_key = bytes_per_key(planted_job.records)
    assert before["bytes"].tolist() == subtask_loads(per_key, 2).tolist()
    salted = dict(per_key)
    b = salted.pop("hot-a")
    for i in range(n):
        salted[salted_key("hot-a", i)] = b // n + (1 if i < b % n else 0)
    assert after["bytes"].tolist() == subtask_loads(salted, 2).tolist()
    assert after["bytes"].sum() == before["bytes"].sum()
    assert after["keys"].sum() == before["keys"].sum() + n - 1


def test_salting_defaults_to_the_hottest_key_and_checks_input(snap):
    s = salting_whatif(snap, n=1)
    a = s[s["scenario"] == "after"]["entries"].sum()
    assert a == s[s["scenario"] == "before"]["entries"].sum()
    with pytest.raises(AnalysisError, match="no state"):
        snap.salting_whatif("no-such-key")
    with pytest.raises(AnalysisError):
        snap.salting_whatif("hot-a", n=0)


def test_key_stats_and_dataframe_input(snap, planted_job):
    ks = key_stats(snap)
    assert len(ks) == 202 and dict(zip(ks["key"], ks["entries"])) == entries_per_key(planted_job.records)
    df = snap.keyed_state()
    hk = hot_keys(df, n=2, by="entries", max_parallelism=128)
    assert set(hk["key"]) == set(PLANT_HOT_KEYS)
    with pytest.raises(AnalysisError, match="by="):
        snap.hot_keys(by="colour")


def test_tuple_keys_work(tmp_path):
    df = pd.DataFrame({"operator": "o", "state": "s", "kind": "value",
                       "key": [("a", 1), ("a", 1), ("b", 2)], "key_group": 0, "subtask": 0, "size_bytes": [8, 8, 8]})
    df["key_group"] = [assign_to_key_group(k, 128) for k in df["key"]]
    ks = key_stats(df, max_parallelism=128)
    assert dict(zip(ks["key"], ks["entries"])) == {("a", 1): 2, ("b", 2): 1}


def test_key_stats_without_keys(snap):
    full = key_stats(snap)
    lean = key_stats(snap, keys=False)
    assert "key" not in lean.columns and len(lean) == len(full)
    assert lean["bytes"].sum() == full["bytes"].sum()


URL_COUNTS = Path(__file__).resolve().parents[2] / "sample_data" / "url_counts" / "savepoint-heap"


@pytest.fixture(scope="module")
def url_counts():
    return explorer.open(URL_COUNTS)


def test_traffic_outside_the_sketch_is_unknown_not_zero(url_counts):
    """Every key of url-count was requested at least once: a key the sketch did not keep has an
    unknown count, not 0."""
    ks = url_counts.key_stats(operator="url-count")
    assert ks["records"].isna().sum() > 0
    assert not (ks["records"] == 0).any()
    known = ks["records"].dropna()
    assert len(known) == len(url_counts.heavy_hitters().query("operator == 'url-count'"))
    assert url_counts.key_stats(operator="url-count", keys=False)["records"].isna().sum() == ks["records"].isna().sum()


def test_skew_by_traffic_covers_the_known_keys_and_says_so(url_counts):
    sk = url_counts.key_skew(by="traffic", operator="url-count").iloc[0]
    ks = url_counts.key_stats(operator="url-count")
    known = ks["records"].dropna().to_numpy(dtype=float)
    assert sk["known_keys"] == len(known) < sk["keys"]
    assert sk["gini"] == pytest.approx(gini(known))
    assert sk["top_1pct_share"] == pytest.approx(top_share(known))
    counted = url_counts.metrics().query("operator == 'url-count'")["records"].sum()
    assert sk["known_share"] == pytest.approx(min(1.0, known.sum() / counted))
    # counting the unknown keys as 0 would overstate the skew
    assert sk["gini"] < gini(ks["records"].fillna(0).to_numpy(dtype=float))


def test_hot_keys_default_to_traffic_where_counted_with_the_hot_key_first(url_counts):
    hk = url_counts.hot_keys(3, operator="url-count")
    assert hk["by"].tolist() == ["records"] * 3
    assert hk["key"].iloc[0] == "/api/search"
    assert hk["records"].is_monotonic_decreasing


def test_hot_keys_without_traffic_rank_by_bytes_ties_by_key():
    snap = explorer.open(Path(__file__).resolve().parents[2] / "sample_data" / "flink" / "heap-canonical-savepoint")
    hk = snap.hot_keys(5, operator="user-windows")
    assert hk["by"].tolist() == ["bytes"] * 5 and hk["records"].isna().all()
    assert hk["bytes"].nunique() == 1  # every key holds 8 B: the ties are ranked by key
    assert hk["key"].tolist() == sorted(hk["key"])
    assert snap.hot_keys(5, by="traffic").empty  # no traffic data: no made-up ranking
    assert hk["key"].tolist() == snap.hot_keys(5, operator="user-windows")["key"].tolist()


def test_salting_acts_on_the_hot_key_and_shows_its_traffic(url_counts):
    s = url_counts.salting_whatif(n=8, operator="url-count")
    assert set(s["salted"]) == {"/api/search"}
    assert salting_measure(s) == "records"
    before = s[s["scenario"] == "before"]["records"].to_numpy(dtype=float)
    after = s[s["scenario"] == "after"]["records"].to_numpy(dtype=float)
    assert before.sum() == after.sum() and before.max() > after.max()  # the hot subtask sheds traffic


def test_salting_without_operator_covers_every_operator_holding_the_key(url_counts):
    s = url_counts.salting_whatif(["/api/search"], 8)
    assert sorted(set(s["operator"])) == ["url-count", "url-stats"]


def test_salting_takes_a_row_key_whole():
    """A Flink Row key is a dict: one key, not the list of its field names (issue 30)."""
    snap = explorer.open(Path(__file__).resolve().parents[2] / "sample_data/flink/production/"
                         "pyflink-heap-canonical-savepoint")
    key = snap.hot_keys(1, by="bytes")["key"].iloc[0]
    assert isinstance(key, dict)
    s = salting_whatif(snap, key, 2)
    assert set(s["scenario"]) == {"before", "after"}


def test_ties_at_the_top_are_named_and_ordered_by_one_rule():
    from explorer.analysis import hottest_key, key_order, rank_order

    assert hottest_key(np.array([3.0, 3.0, 3.0]), ["a", "b", "c"], "bytes") == \
        (None, "no hottest key: 3 keys tie at 3 bytes, every key the same")
    assert hottest_key(np.array([5.0, 5.0, 1.0]), ["a", "b", "c"], "records")[1] == \
        "no hottest key: 2 keys tie at 5 records"
    assert hottest_key(np.array([5.0, 7.0, 1.0]), ["a", "b", "c"], "bytes") == ("b", None)
    assert [[-1, -25, 3][i] for i in key_order([-1, -25, 3])] == [-25, -1, 3]  # numbers by value
    assert list(rank_order(np.array([1, 2, 2]), np.array([1, 1, 1]), [-1, -1, -25])) == [2, 1, 0]
