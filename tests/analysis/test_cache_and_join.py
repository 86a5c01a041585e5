"""What the 10 M-key speed-ups must not change: per-key sums kept on a Snapshot, the hashed
diff join, keyed operators only, Spark's partitioning for Spark snapshots."""

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import explorer
from explorer.analysis import diff, hot_keys, key_group_distribution, key_skew, salting_whatif
from explorer.analysis._columns import cached_frame, drop_derived
from explorer.analysis._keys import KeyValues
from explorer.analysis.diff import _joint_by_hash, _joint_by_lookup
from explorer.keygroups import assign_to_key_group
from explorer.snapshot import checkpoints_in
from explorer.keygroups.spark import partition_ids

from tests.support.fixtures import PLANT_HOT_KEYS

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data"


def _analyses(source):
    return {
        "kgd": key_group_distribution(source, max_parallelism=128),
        "hot_bytes": hot_keys(source, 5, by="bytes", max_parallelism=128),
        "hot_entries": hot_keys(source, 5, by="entries", max_parallelism=128),
        "skew": key_skew(source, by="bytes", max_parallelism=128),
        "salting": salting_whatif(source, n=4, by="bytes", max_parallelism=128),
    }


def test_kept_sums_give_the_answers_of_a_fresh_run_and_of_the_frame(planted_job):
    snap = explorer.open(planted_job.savepoint)
    first = _analyses(snap)
    again = _analyses(snap)  # from the kept per-key sums
    drop_derived(snap)
    cold = _analyses(snap)
    frame = _analyses(snap.keyed_state())  # no cache at all: Python keys
    for name in first:
        pd.testing.assert_frame_equal(first[name], again[name])
        pd.testing.assert_frame_equal(first[name], cold[name])
        cols = [c for c in first[name].columns if c not in ("records", "records_error", "share", "subtask_load",
                                                             "subtask_share", "overload", "overload_by")]
        pd.testing.assert_frame_equal(first[name][cols], frame[name][cols], check_dtype=False)
    assert set(first["hot_bytes"]["key"].iloc[:2]) == set(PLANT_HOT_KEYS)


def test_sums_kept_per_filter(planted_job):
    snap = explorer.open(planted_job.savepoint)
    states = sorted(snap.states["state"])
    whole = snap.hot_keys(3, by="entries")
    for st in states:
        part = snap.hot_keys(3, by="entries", state=st)
        want = hot_keys(snap.keyed_state(state=st), 3, by="entries", max_parallelism=128)
        assert part["key"].tolist() == want["key"].tolist()
        assert part["entries"].tolist() == want["entries"].tolist()
    pd.testing.assert_frame_equal(whole, snap.hot_keys(3, by="entries"))


def test_ties_in_bytes_rank_by_entries(planted_job):
    hk = explorer.open(planted_job.savepoint).hot_keys(50, by="bytes")
    b, e = hk["bytes"].to_numpy(), hk["entries"].to_numpy()
    assert (np.diff(b) <= 0).all()
    tied = np.flatnonzero(np.diff(b) == 0)
    assert (e[tied] >= e[tied + 1]).all()


def _pair(planted_job):
    return explorer.open(checkpoints_in(planted_job.checkpoint_dir)[0]), explorer.open(planted_job.savepoint)


def test_hash_join_equals_lookup(planted_job):
    a, b = _pair(planted_job)
    kva, kvb = cached_frame(a).attrs["key_values"], cached_frame(b).attrs["key_values"]
    by_hash = _joint_by_hash(kva, kvb)
    assert by_hash is not None
    assert (by_hash == _joint_by_lookup(kva, kvb)).all()
    assert (by_hash >= 0).sum() > 0


@pytest.mark.parametrize("weak", ["constant", "three_values", "low_bits"])
def test_hash_collisions_never_match_different_keys(planted_job, monkeypatch, weak):
    a, b = _pair(planted_job)
    want = explorer.diff(a.keyed_state(), b.keyed_state())  # the generic path: no key hashes
    real = KeyValues.hash64

    def colliding(self):  # still equal for equal keys (the join's contract), but shared by many
        h = real(self)
        return {"constant": np.zeros_like(h), "three_values": h % np.uint64(3), "low_bits": h & np.uint64(0xFF)}[weak]

    monkeypatch.setattr(KeyValues, "hash64", colliding)
    a2, b2 = _pair(planted_job)
    got = diff(a2, b2)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), check_dtype=False)


def test_distribution_lists_keyed_operators_only():
    snap = explorer.open(SAMPLE / "flink" / "rocksdb-native-savepoint")
    keyed = set(snap.operators.loc[snap.operators["has_keyed_state"].astype(bool), "operator"])
    assert set(snap.key_group_distribution()["operator"]) == keyed
    assert set(snap.rescale_whatif([1, 2])["operator"]) == keyed
    assert not any(op.startswith("Source") for op in keyed)


def _as_spark(snap):
    snap._info = dataclasses.replace(snap._info, format="spark-checkpoint")
    return snap


def test_spark_snapshots_rescale_with_spark_partitioning(planted_job):
    snap = _as_spark(explorer.open(planted_job.savepoint))
    keys = sorted(set(snap.keyed_state(columns=["key"])["key"]))
    for m in (16, 64):
        w = snap.rescale_whatif([m], max_parallelism=m, metrics=["keys"])
        spark = np.bincount(partition_ids([keys], m), minlength=m)
        flink = np.bincount([assign_to_key_group(k, m) for k in keys], minlength=m)
        assert w["max"].iloc[0] == spark.max() and w["min"].iloc[0] == spark.min()
        assert not np.array_equal(spark, flink)  # the test can tell the schemes apart


def test_spark_snapshots_salt_with_spark_partitioning(planted_job):
    snap = _as_spark(explorer.open(planted_job.savepoint))
    s = snap.salting_whatif(keys="hot-a", n=8)
    before = s[s["scenario"] == "before"]["keys"].to_numpy()
    after = s[s["scenario"] == "after"]["keys"].to_numpy()
    p, m = 2, 128
    own = int(snap.hot_keys(200, by="entries").set_index("key").loc["hot-a", "subtask"])
    added = np.bincount(partition_ids([[f"hot-a#{i}" for i in range(8)]], m).astype(np.int64) * p // m, minlength=p)
    removed = np.bincount([own], minlength=p)
    assert (after - before == added - removed).all()


def test_kept_key_join_gives_the_answer_of_a_fresh_diff(planted_job):
    a, b = _pair(planted_job)
    whole = diff(a, b)
    for st in sorted(set(whole["state"])):
        kept = diff(a, b, state=st)  # the key join of the first diff, reused
        fa, fb = _pair(planted_job)
        pd.testing.assert_frame_equal(kept, diff(fa, fb, state=st))
        pd.testing.assert_frame_equal(kept.reset_index(drop=True),
                                      whole[whole["state"] == st].reset_index(drop=True))
