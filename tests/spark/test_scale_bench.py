"""bench_scale --part spark on real (small) Flink savepoint pairs: each snapshot gets its raw read and scan, the
three questions on Spark with their peaks, the answers compared with the local ones, and the entries of the
results file that this run does not measure stay."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def test_scale_spark_only_flink_measures_the_pairs_and_keeps_the_other_entries(spark, tmp_path):
    from benchmarks import bench_scale

    cache = tmp_path / "cache"
    src = ROOT / "sample_data/flink/heap-canonical-savepoint"
    shutil.copytree(src, cache / "flink-hashmap-a")
    shutil.copytree(ROOT / "sample_data/flink/rocksdb-canonical-savepoint-compressed", cache / "flink-hashmap-b")  # same state
    engine = {"name": "engine savepoint (canonical Parquet)", "path": "/x/engine-100", "keys": 100}
    local_answer = {"key_group_distribution": {"answer": {"keys": -1, "entries": 0, "bytes": 0}}}
    out = tmp_path / "scale.json"
    out.write_text(json.dumps({"spark": {"snapshots": [engine]},
                               "local": {"snapshots": [{"path": "x/flink-hashmap-a", "tasks": local_answer}]}}))
    shuffle = spark.conf.get("spark.sql.shuffle.partitions")
    try:  # (the bench sets its SQL settings on the running session: the other tests' session is given back as it was)
        assert bench_scale.main(["--part", "spark", "--only", "flink", "--cache", str(cache), "--out", str(out)]) == 0
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", shuffle)
    report = json.loads(out.read_text())
    kept, flink = report["spark"]["snapshots"]
    assert kept == engine
    assert flink["path"].endswith("flink-hashmap-a") and flink["raw_read"]["bytes"] > 0
    assert flink["raw_scan"]["entries"] > 0
    rows = len(__import__("explorer").open(src).keyed_state())
    assert 0 < flink["key_group_distribution"]["entries"] <= rows
    assert flink["key_group_distribution"]["keys"] == flink["keys"] > 0
    assert flink["diff"]["statuses"]["unchanged"] > 0 and flink["diff_changes"]["rows"] == 0
    for q in ("key_group_distribution", "hot_keys", "diff", "diff_changes"):
        assert flink[q]["seconds"] > 0 and flink[q]["tree_peak_rss_mb"] >= flink[q]["driver_peak_rss_mb"] > 0
    assert flink["equals_local"] == {"key_group_distribution": False}  # the planted local answer differs
    assert flink["diff"]["raw_read_both"]["bytes"] > flink["raw_read"]["bytes"]
