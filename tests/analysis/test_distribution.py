"""Key-group distribution, imbalance and the rescale what-if against answers planted in a real job."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import explorer
from explorer.analysis import best_parallelisms, imbalance, key_group_distribution, rescale_whatif, subtask_loads
from explorer.errors import AnalysisError, KeyGroupError
from explorer.keygroups import assign_to_key_group

from tests.support.truth import bytes_per_key, entries_per_key, records_per_key, subtask_loads as expected_loads

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"


@pytest.fixture(scope="module")
def snap(planted_job):
    return explorer.open(planted_job.savepoint)


def test_every_key_group_is_listed_with_its_owner(snap, planted_job):
    dist = snap.key_group_distribution()
    assert list(dist.columns) == ["operator", "key_group", "subtask", "entries", "bytes", "keys", "records"]
    assert (dist["key_group"] == np.arange(128)).all()
    assert (dist["subtask"] == np.arange(128) * 2 // 128).all()
    expect_entries = np.zeros(128, dtype=int)
    for k, e in entries_per_key(planted_job.records).items():
        expect_entries[assign_to_key_group(k, 128)] += e
    assert (dist["entries"].to_numpy() == expect_entries).all()
    hot_kg = assign_to_key_group("hot-a", 128)
    assert dist.loc[hot_kg, "records"] >= 250  # the engine's own traffic counter per key group
    assert dist["records"].sum() == len(planted_job.records)
    assert dist["keys"].sum() == 202


def test_subtask_totals_and_imbalance(snap, planted_job):
    loads = snap.subtask_distribution()
    expect = expected_loads(bytes_per_key(planted_job.records), 2)
    assert loads["bytes"].tolist() == expect.tolist()
    assert loads["key_group_start"].tolist() == [0, 64] and loads["key_group_end"].tolist() == [63, 127]
    im = snap.imbalance().set_index("metric")
    assert im.loc["bytes", "max_over_mean"] == pytest.approx(expect.max() / expect.mean())
    assert im.loc["bytes", "cv"] == pytest.approx(expect.std() / expect.mean())
    assert im.loc["bytes", "heaviest_subtask"] == int(np.argmax(expect))


@pytest.mark.parametrize("p", [1, 3, 4, 7, 16])
def test_distribution_at_another_parallelism(snap, planted_job, p):
    dist = snap.key_group_distribution(parallelism=p)
    assert (dist["subtask"] == np.arange(128) * p // 128).all()
    loads = subtask_loads(dist)
    assert loads["entries"].tolist() == expected_loads(entries_per_key(planted_job.records), p).tolist()


def test_rescale_whatif_matches_rehashing_every_key(snap, planted_job):
    ps = [1, 2, 3, 5, 8, 128]
    w = snap.rescale_whatif(ps)
    assert set(w["parallelism"]) == set(ps) and set(w["metric"]) == {"entries", "bytes", "keys", "records"}
    per_key = bytes_per_key(planted_job.records)
    for p in ps:
        row = w[(w["parallelism"] == p) & (w["metric"] == "bytes")].iloc[0]
        expect = expected_loads(per_key, p)
        assert row["max"] == expect.max() and row["max_over_mean"] == pytest.approx(expect.max() / expect.mean())
        assert row["is_current"] == (p == 2)
    assert w[w["parallelism"] == 1]["max_over_mean"].eq(1.0).all()


def test_rescale_whatif_to_another_max_parallelism(snap, planted_job):
    w = snap.rescale_whatif([2, 4], max_parallelism=[128, 256, 4096])
    for m in (256, 4096):
        for p in (2, 4):
            row = w[(w["max_parallelism"] == m) & (w["parallelism"] == p) & (w["metric"] == "entries")].iloc[0]
            assert row["max"] == expected_loads(entries_per_key(planted_job.records), p, m).max()
    recs = w[(w["max_parallelism"] == 256) & (w["metric"] == "records")]
    assert recs["total"].eq(0).all()  # traffic is counted per key group of the snapshot's max parallelism


def test_best_parallelisms_rank_by_balance(snap):
    best = snap.best_parallelisms(list(range(1, 9)), metric="bytes", n=3)
    assert best["rank"].tolist() == [1, 2, 3]
    assert best["parallelism"].min() >= 2  # one subtask is trivially balanced: no choice (issue 30)
    assert best["max_over_mean"].is_monotonic_increasing


def test_best_parallelisms_rank_real_choices_by_traffic_where_counted(snap):
    best = snap.best_parallelisms(n=200)
    assert set(best["metric"]) == {"records"}  # the engine counted traffic
    assert best["parallelism"].min() == 2 and best["parallelism"].max() == 128  # up to max parallelism
    flink = explorer.open(SAMPLES / "flink" / "heap-canonical-savepoint").best_parallelisms(n=3)
    assert set(flink["metric"]) == {"bytes"} and (flink["parallelism"] >= 2).all()


def test_best_parallelisms_of_a_spark_checkpoint_say_the_partitioning_is_fixed():
    from explorer.analysis import fixed_partitioning

    spark = explorer.open(SAMPLES / "spark" / "agg-hdfs")
    assert "spark.sql.shuffle.partitions" in fixed_partitioning(spark)
    assert spark.best_parallelisms().empty


def test_keys_planted_hot_make_their_subtask_heavy(snap, planted_job):
    hot_sub = {assign_to_key_group(k, 128) * 2 // 128 for k in ("hot-a", "hot-b")}
    loads = snap.subtask_distribution()
    if len(hot_sub) == 1:
        (s,) = hot_sub
        assert loads.loc[s, "records"] == loads["records"].max()
    assert records_per_key(planted_job.records)["hot-a"] == 250


def test_dataframe_input_needs_max_parallelism(snap):
    df = snap.keyed_state()
    with pytest.raises(AnalysisError, match="max_parallelism"):
        key_group_distribution(df)
    a = key_group_distribution(df, max_parallelism=128)
    b = snap.key_group_distribution()
    pd.testing.assert_frame_equal(a.drop(columns="records"), b.drop(columns="records"))
    w = rescale_whatif(df, [4], max_parallelism=128, metrics=["bytes"])
    assert w["max"].iloc[0] == snap.rescale_whatif([4])[lambda x: x.metric == "bytes"]["max"].iloc[0]


def test_rules_are_checked(snap):
    with pytest.raises(KeyGroupError):
        snap.rescale_whatif([129])
    with pytest.raises(AnalysisError, match="no keyed operator"):
        snap.key_group_distribution(operator="nope")
    with pytest.raises(AnalysisError, match="metric"):
        best_parallelisms(snap, metric="colour")


def test_imbalance_of_a_perfectly_even_load():
    df = pd.DataFrame({"operator": "o", "parallelism": 2, "subtask": [0, 1], "key_group_start": [0, 64],
                       "key_group_end": [63, 127], "key_groups": [64, 64], "entries": [5, 5], "bytes": [40, 40],
                       "keys": [1, 1], "records": [0, 0], "bytes_share": [0.5, 0.5]})
    im = imbalance(df).set_index("metric")
    assert im.loc["bytes", "max_over_mean"] == 1.0 and im.loc["bytes", "cv"] == 0.0
    assert np.isnan(im.loc["records", "max_over_mean"])


def test_traffic_a_snapshot_did_not_count_is_unknown_never_zero():
    """Flink snapshots count no records per key group: <NA> (nullable Int64) everywhere, shown as
    'unknown', and no imbalance or rescale figure made from it (issue 30)."""
    from pathlib import Path

    import explorer
    from explorer.analysis import imbalance, key_group_distribution, rescale_whatif, subtask_distribution
    from explorer.plots.format import format_frame

    snap = explorer.open(Path(__file__).resolve().parents[2] / "sample_data/flink/heap-canonical-savepoint")
    kg = key_group_distribution(snap)
    assert str(kg["records"].dtype) == "Int64" and kg["records"].isna().all()
    sub = subtask_distribution(snap)
    assert str(sub["records"].dtype) == "Int64" and sub["records"].isna().all()
    assert set(format_frame(sub)["records"]) == {"unknown"}
    assert "records" not in set(imbalance(sub)["metric"])
    assert "records" not in set(rescale_whatif(snap, [2])["metric"])


def test_counted_traffic_stays_a_count(planted_job):
    import explorer
    from explorer.analysis import key_group_distribution, subtask_distribution

    snap = explorer.open(planted_job.savepoint)
    kg = key_group_distribution(snap)
    assert kg["records"].notna().all() and kg["records"].sum() > 0
    assert subtask_distribution(snap)["records"].sum() == kg["records"].sum()
