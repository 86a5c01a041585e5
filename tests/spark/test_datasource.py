"""The state-explorer Spark data source: every format's keyed state read by the executors, the same rows as
explorer.open, one partition per (operator, subtask, key-group range), options, and errors naming the file."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

import explorer
from explorer.errors import ReaderError, SnapshotCorruptError, StateExplorerError
from explorer.readers.base import CONTRACT_COLUMNS
from explorer.spark import read_state
from explorer.spark.analysis import collect
from explorer.spark.datasource import NAME, from_json, to_json

pytestmark = pytest.mark.spark

FORMATS = ["sample_data/sessions/savepoint-rocksdb", "sample_data/flink/heap-canonical-savepoint",
           "sample_data/flink/rocksdb-incremental-checkpoint", "sample_data/spark/multi-operator-hdfs"]


def _rows(df: pd.DataFrame) -> list[tuple]:
    """Rows as comparable tuples: the free-typed columns as the data source's JSON text."""
    out = []
    for r in df.itertuples(index=False):
        d = r._asdict()
        out.append(tuple(to_json(d[c]) if c in ("key", "namespace", "user_key", "value") and d[c] is not None
                         else (None if pd.isna(d[c]) else d[c]) if not isinstance(d[c], (list, dict, tuple)) else d[c]
                         for c in CONTRACT_COLUMNS))
    return sorted(out, key=repr)


@pytest.mark.parametrize("path", FORMATS)
def test_rows_equal_explorer_open(spark, path):
    snap = explorer.open(path)
    expected = snap.keyed_state()
    df = read_state(spark, path)
    assert df.columns == list(CONTRACT_COLUMNS)
    keyed = snap.subtasks.dropna(subset=["key_group_start"])
    keyed = keyed[keyed["operator"].isin(set(snap.states["operator"]))]
    assert df.rdd.getNumPartitions() == len(keyed)  # one per (operator, subtask)
    got = collect(df)
    assert len(got) == len(expected) > 0
    for c in ("last_access", "expires_at"):
        got[c] = pd.to_datetime(got[c], utc=True)
        expected[c] = pd.to_datetime(expected[c], utc=True)
    exp = expected.assign(**{c: [None if v is None or (not isinstance(v, (list, dict, tuple)) and pd.isna(v))
                                 else to_json(v) for v in expected[c]]
                             for c in ("key", "namespace", "user_key", "value")})
    assert _rows(got) == _rows(exp)
    key = expected["key"].iloc[0]
    assert from_json(to_json(key)) == key


def test_options_select_what_is_read(spark):
    path = "sample_data/flink/heap-canonical-savepoint"
    snap = explorer.open(path)
    df = read_state(spark, path, operator="user-state", state=["amounts", "stats"], key_groups="0-9,100",
                    columns=["operator", "state", "key", "key_group", "size_bytes"], splits=2)
    assert df.columns == ["operator", "state", "key", "key_group", "size_bytes"]
    # the subtasks' halves 0-31, 32-63, 64-95, 96-127: only those holding asked-for key groups are read
    assert df.rdd.getNumPartitions() == 2
    got = collect(df)
    expected = snap.keyed_state(operator="user-state", state=["amounts", "stats"], key_groups=[*range(10), 100])
    assert len(got) == len(expected) > 0
    assert set(got["key_group"]) == set(expected["key_group"])
    assert sorted(map(from_json, got["key"])) == sorted(expected["key"])


def test_a_user_schema_reads_keys_in_their_own_type(spark):
    from explorer.spark import register_datasource

    register_datasource(spark)
    path = "sample_data/flink/heap-canonical-savepoint"
    df = (spark.read.format(NAME).schema("operator string, key bigint, value bigint, size_bytes bigint")
          .option("operator", "bucket-state").option("state", "amount_sum").load(path))
    got = collect(df)
    expected = explorer.open(path).keyed_state(operator="bucket-state", state="amount_sum")
    assert sorted(got["key"].tolist()) == sorted(expected["key"].tolist())
    assert sorted(got["value"].tolist()) == sorted(expected["value"].tolist())


def test_a_checkpoint_directory_is_read_as_its_newest_checkpoint(spark):
    path = "sample_data/url_counts/checkpoints"
    got = read_state(spark, path).count()
    assert got == len(explorer.open(path).keyed_state())
    assert got != len(explorer.open(f"{path}/chk-1").keyed_state())


def test_a_damaged_file_fails_with_the_projects_error_naming_it(spark, tmp_path):
    snap = tmp_path / "savepoint"
    shutil.copytree("sample_data/url_counts/savepoint-heap", snap)
    damaged = snap / "keyed" / "url-stats" / "count" / "1.parquet"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: found when the executor reads it (SHA-256), not at open
    damaged.write_bytes(bytes(data))
    df = read_state(spark, snap)
    with pytest.raises(SnapshotCorruptError, match="1.parquet"):
        collect(df)
    with pytest.raises(Exception) as raw:  # what Spark itself shows names the class and the file too
        df.count()
    assert "SnapshotCorruptError" in str(raw.value) and "1.parquet" in str(raw.value)


def test_bad_options_and_paths_are_refused_clearly(spark, tmp_path):
    with pytest.raises(ReaderError, match="unknown option 'color'"):
        read_state(spark, "sample_data/flink/heap-canonical-savepoint", color="blue")
    with pytest.raises(ReaderError, match="takes none of the options \\['jars'\\]"):
        read_state(spark, "sample_data/sessions/savepoint-heap", jars=["x.jar"])
    with pytest.raises(StateExplorerError, match="no such file"):
        read_state(spark, tmp_path / "missing")
    with pytest.raises(ReaderError, match="Spark's own state data source"):
        read_state(spark, "sample_data/spark/tws-rows")  # transformWithState: RocksDB stores, read with a JVM
