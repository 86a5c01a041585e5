"""The last few percent of real Spark state (issue 33), read without a JVM: far-future timestamps in keys,
key lookups by the value the reader shows, batches whose files Spark's maintenance deleted, zstd stores,
decimal keys and buffers. Each fixture comes from a real query (tools/spark/make_fixtures.py)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import explorer
from explorer.errors import ReaderError, SnapshotCorruptError
from explorer.readers.spark.keys import key_leaves, timestamp_micros

ROOT = Path(__file__).resolve().parents[2] / "sample_data" / "spark"


def _expected(name: str) -> list[dict]:
    return json.loads((ROOT / name / "EXPECTED.json").read_text())["operators"][0]["stores"][0]["rows"]


def _make_fixtures():
    """tools/spark/make_fixtures.py, whose input generators made the fixtures (no Spark started by importing it)."""
    import importlib.util
    import sys

    name = "spark_make_fixtures"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT.parents[1] / "tools" / "spark" / "make_fixtures.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # its dataclasses look their module up
        spec.loader.exec_module(mod)
    return sys.modules[name]


def _fixture_inputs(name: str) -> list[list[dict]]:
    """The input batches of ``name`` (events), regenerated as make_fixtures.py made them."""
    m = _make_fixtures()
    fixture = next(f for f in m.fixtures() if f.name == name)
    return fixture.inputs()["events"]


def _iso(v) -> str:
    v = v if isinstance(v, dt.datetime) else v.to_pydatetime()
    return v.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{v.microsecond // 1000:03d}Z"


def test_timestamps_outside_pandas_range_are_exact_microseconds():
    far = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc)
    assert timestamp_micros(far) == 253402300799999999
    assert key_leaves(far) == key_leaves(pd.Timestamp(far)) == key_leaves(np.datetime64("9999-12-31T23:59:59.999999"))
    assert timestamp_micros(dt.datetime(1500, 1, 1)) == -14831769600 * 10**6
    assert key_leaves(pd.Timestamp("2026-01-01T01:00", tz="Europe/Paris")) == (("ts", 1767225600 * 10**6),)


def test_far_future_keys_are_read_looked_up_and_diffed():
    path = ROOT / "far-future-keys"
    snap = explorer.open(path, jvm=False)
    df = snap.keyed_state()
    got = {(k["user"], _iso(k["valid_to"])): (v["count"], v["sum"]) for k, v in zip(df["key"], df["value"])}
    want = {(r["key"]["user"], r["key"]["valid_to"]): tuple(x for _, x in r["buffer"]) for r in _expected(path.name)}
    assert got == want and any(k[1].startswith("9999-12-31") for k in got) and any(k[1].startswith("1500") for k in got)
    far = next(k for k in df["key"] if k["valid_to"].year == 9999)
    # the key as the reader shows it, or written with a datetime / pd.Timestamp (naive = UTC)
    for k in (far, (far["user"], dt.datetime(9999, 12, 31)), (far["user"], pd.Timestamp(far["valid_to"]))):
        assert len(snap.keyed_state(key=k)) == 1
    h = explorer.history(path)
    assert h["reconstructable"].all() and h["entries"].tolist()[-1] == len(want)
    ch = explorer.changes(path, key=far)
    assert len(ch) and (ch["change_type"] == "update").all()
    assert ch["value"].iloc[-1] == {"count": got[(far["user"], "9999-12-31T00:00:00.000Z")][0],
                                    "sum": got[(far["user"], "9999-12-31T00:00:00.000Z")][1]}


def test_a_failure_of_the_explorers_own_conversion_is_a_reader_error(monkeypatch):
    from explorer.readers.spark.reader import SparkCheckpointReader

    def boom(*a, **k):
        raise OverflowError("Cannot convert Timestamp to nanoseconds without overflow")

    monkeypatch.setattr(SparkCheckpointReader, "_to_contract", boom)
    with pytest.raises(ReaderError, match=r"state 'default' of operator 'stateStoreSave'.*converting") as info:
        explorer.open(ROOT / "far-future-keys", jvm=False).keyed_state()
    assert not isinstance(info.value, SnapshotCorruptError)


def test_window_and_timestamp_keys_are_found_by_the_value_shown():
    for name in ("window-tumbling", "dedup-watermark-hdfs", "window-sliding-hdfs"):
        snap = explorer.open(ROOT / name, jvm=False)
        df = snap.keyed_state()
        for k in df["key"].iloc[:: max(1, len(df) // 5)]:
            assert len(snap.keyed_state(key=k)) >= 1, (name, k)
            as_tuple = tuple(tuple(v.values()) if isinstance(v, dict) else v for v in k.values())
            assert len(snap.keyed_state(key=as_tuple)) >= 1, (name, as_tuple)


def test_history_marks_batches_whose_files_maintenance_deleted():
    path = ROOT / "agg-rocksdb-maintained"
    h = explorer.history(path)
    assert h["checkpoint_id"].tolist() == sorted(int(p.name) for p in (path / "commits").iterdir() if p.name.isdigit())
    gone = h[~h["reconstructable"]]
    assert len(gone) >= 1 and gone["entries"].isna().all()
    assert gone["note"].str.contains("maintenance deleted").all()
    ok = h[h["reconstructable"]]
    assert ok["entries"].iloc[-1] == len(_expected(path.name))
    assert pd.isna(ok["added"].iloc[0])  # compared with a batch that cannot be rebuilt: unknown, not all added


def test_changes_answer_the_batches_they_can_and_say_why_not_for_the_others():
    path = ROOT / "agg-rocksdb-maintained"
    ch = explorer.changes(path)
    h = explorer.history(path)
    readable = h.loc[h["reconstructable"], "checkpoint_id"].tolist()
    # the first readable batch (7: batch 6 before it is gone) is answered from its own changelog (8.changelog)
    assert set(ch["batch_id"]) == set(readable) and readable[0] == 7
    notes = ch.attrs["notes"]
    assert any("batch 6" in n and "maintenance deleted" in n for n in notes)
    assert any("changes of batch 7 are its own records" in n for n in notes)
    # those are what batch 7's input made of its users: their aggregates over input batches 0..7
    inputs = _fixture_inputs(path.name)
    users = {r["user"] for r in inputs[7]}
    agg = _make_fixtures().agg_expected({"events": inputs[:8]})["operators"][0]["stores"][0]["rows"]
    want = {r["key"]["user"]: [x for _, x in r["buffer"]] for r in agg if r["key"]["user"] in users}
    b7 = ch[ch["batch_id"] == 7]
    assert (b7["change_type"] == "update").all()
    assert {k["user"] if isinstance(k, dict) else k: list(v.values()) for k, v in zip(b7["key"], b7["value"])} == want
    # changelog checkpointing switched on after 3 batches: every batch answered, from the files alone
    ch = explorer.changes(ROOT / "agg-rocksdb-changelog-restarted")
    assert sorted(set(ch["batch_id"])) == list(range(6)) and ch.attrs["notes"] == []
    # changelog checkpointing off: the same changes as with it on
    off = explorer.changes(ROOT / "agg-rocksdb")
    on = explorer.changes(ROOT / "agg-rocksdb-changelog")
    assert off[["batch_id", "change_type"]].equals(on[["batch_id", "change_type"]]) and len(off) > 100


@pytest.mark.parametrize("name", ["agg-hdfs-zstd", "agg-rocksdb-zstd", "agg-hdfs-snappy", "agg-rocksdb-snappy"])
def test_compressed_stores_are_read_from_their_files(name):
    from explorer.readers.spark import SparkCheckpointReader

    reader = SparkCheckpointReader(ROOT / name)
    assert reader.jvm_free and not any("Spark's state data source" in n for n in reader.notes)
    df = explorer.open(ROOT / name, jvm=False).keyed_state()
    assert {k: list(v.values()) for k, v in zip(df["key"], df["value"])} == {
        r["key"]["user"]: [x for _, x in r["buffer"]] for r in _expected(name)}


@pytest.mark.parametrize("name", ["agg-hdfs-snappy", "agg-rocksdb-snappy"])
def test_snappy_stores_answer_history_and_changes_like_the_uncompressed_store(name):
    """The same query over the same input with the snappy codec (HDFS .delta/.snapshot files, RocksDB
    changelogs): every batch's changes, keys and values equal the uncompressed store's, from the files."""
    plain = explorer.changes(ROOT / "agg-hdfs")
    got = explorer.changes(ROOT / name)
    assert got.attrs["notes"] == [] and len(got) == len(plain) > 100
    for col in ("batch_id", "change_type", "key", "value"):
        assert sorted(map(str, got[col])) == sorted(map(str, plain[col])), col
    assert explorer.history(ROOT / name)["reconstructable"].all()


def test_decimal_keys_and_buffers_are_exact():
    name = "agg-decimal-key"
    snap = explorer.open(ROOT / name, jvm=False)
    df = snap.keyed_state()
    got = {(k["user"], k["price"]): (v["count"], v["sum"], v["isEmpty"], v["sum_2"], v["count_2"])
           for k, v in zip(df["key"], df["value"])}
    want = {(r["key"]["user"], Decimal(r["exact"]["price"])):
            (r["buffer"][0][1], Decimal(r["exact"]["total"]), False, Decimal(r["exact"]["total"]), r["buffer"][0][1])
            for r in _expected(name)}
    assert got == want
    assert all(isinstance(v[1], Decimal) for v in got.values())
    user, price = next(iter(got))
    assert len(snap.keyed_state(key=(user, price))) == 1


def test_a_fallback_to_spark_says_why(tmp_path):
    import shutil

    from explorer.readers.spark import SparkCheckpointReader

    path = tmp_path / "ckpt"
    shutil.copytree(ROOT / "agg-hdfs", path)
    f = path / "offsets" / "0"
    f.write_text(f.read_text().replace('"spark.sql.streaming.stateStore.rowChecksum.enabled":"false"',
                                       '"spark.sql.streaming.stateStore.rowChecksum.enabled":"true"'))
    (path / "offsets" / ".0.crc").unlink(missing_ok=True)
    reader = SparkCheckpointReader(path, batch_id=0)
    assert reader.jvm_free is False
    assert any("read through Spark's state data source" in n and "rowChecksum.enabled=true" in n
               for n in reader.notes)


def test_session_windows_with_several_sessions_and_collect_buffers_equal_the_query():
    name = "session-window-collect"
    snap = explorer.open(ROOT / name, jvm=False)
    df = snap.keyed_state()
    got = sorted((k, _iso(v["session_window"]["start"]), v["count"], sorted(v["buf"]), sorted(v["buf_2"]))
                 for k, v in zip(df["key"], df["value"]))
    want = sorted((r["key"]["user"], r["value"]["session_window"]["start"], r["value"]["n.count"],
                   r["collect"]["items"], r["collect"]["qtys"]) for r in _expected(name))
    assert got == want and len({g[0] for g in got}) < len(got)  # several sessions per user
    assert any("collect_list/collect_set buffer" in n for n in snap.notes)
    user = got[0][0]
    assert len(snap.keyed_state(key=user)) == sum(g[0] == user for g in got)


def test_a_key_lookup_with_columns_without_the_key_still_filters_by_key():
    snap = explorer.open(ROOT / "agg-hdfs", jvm=False)
    df = snap.keyed_state()
    key = df["key"].iloc[0]
    want = snap.keyed_state(key=key)
    assert len(want) == 1
    got = snap.keyed_state(key=key, columns=["value", "key_group"])
    assert "key" not in got.columns and len(got) == 1
    assert got["value"].iloc[0] == want["value"].iloc[0] and got["key_group"].iloc[0] == want["key_group"].iloc[0]


# Spark 4.3's own hash() of these decimals (spark.sql("select hash(cast(v as t))"), seed 42): the shuffle's hash
_SPARK_DECIMAL_HASHES = [
    ("12.34", "decimal(10,2)", -1028144669), ("-12.34", "decimal(10,2)", 180183791),
    ("0.00", "decimal(10,2)", -1670924195), ("99999999.99", "decimal(10,2)", -138896179),
    ("12.34", "decimal(30,2)", 1123058251), ("-12.34", "decimal(30,2)", -378694793),
    ("0", "decimal(20,0)", -783713497), ("-128", "decimal(20,0)", 775851899), ("128", "decimal(20,0)", -544401882),
    ("12345678901234567890123456.12", "decimal(38,2)", 1968586386),
    ("-12345678901234567890123456.12", "decimal(38,2)", 1534658062),
    ("255", "decimal(19,0)", 1246198977), ("-1", "decimal(19,0)", 1398487324),
]


@pytest.mark.parametrize("value,spark_type,want", _SPARK_DECIMAL_HASHES)
def test_decimals_hash_as_spark_hashes_them(value, spark_type, want):
    from explorer.keygroups.spark import spark_hash_value

    assert spark_hash_value(Decimal(value), types=[spark_type]) == want


def test_a_decimal_key_lookup_reads_only_the_partition_the_key_is_in(monkeypatch):
    from explorer.readers.spark import keyed as spark_keyed
    from explorer.readers.spark import reader as spark_reader

    name = "agg-decimal-key"
    snap = explorer.open(ROOT / name, jvm=False)
    df = snap.keyed_state()
    where = {(k["user"], k["price"]): int(g) for k, g in zip(df["key"], df["key_group"])}
    assert len(where) == len(_expected(name)) and len(set(where.values())) > 1
    r = spark_reader.SparkCheckpointReader(ROOT / name, jvm=False)
    op = r._operators[0]
    st = r._states_of(op)[0]
    types = ["string", "decimal(10,2)"]
    assert r._partition_list(op, st, types, list(where)) == list(where.values())
    read = []
    real = spark_keyed.state_table
    monkeypatch.setattr(spark_keyed, "state_table", lambda *a, **k: read.append(list(a[2])) or real(*a, **k))
    for key, part in list(where.items())[:: max(1, len(where) // 8)]:
        read.clear()
        got = snap.keyed_state(key=key)
        assert len(got) == 1 and read == [[part]], (key, read)


def test_operators_without_metadata_get_their_kind_from_the_state_schema():
    from explorer.readers.spark import layout
    from explorer.readers.spark.hdfs import read_schema

    # every Spark 4 fixture's operator, told from its schema alone, is what its _metadata names
    seen = set()
    for meta in sorted(ROOT.glob("*/state/*/_metadata/metadata")):
        doc = json.loads(meta.read_text().splitlines()[1])
        name = doc["operatorInfo"]["operatorName"]
        stores = [s["storeName"] for s in doc["stateStoreInfo"]]
        op_dir = meta.parent.parent
        store = "default" if "default" in stores else stores[0]
        schema = layout.store_schema_file(op_dir.parent.parent, int(op_dir.name), store)
        inferred = layout.infer_operator(*read_schema(schema, op_dir.parent.parent), stores)
        want = "flatMapGroupsWithState" if name == "applyInPandasWithState" else name
        assert inferred == want, (meta, name, inferred)
        seen.add(name)
    assert {"stateStoreSave", "dedupe", "dedupeWithinWatermark", "symmetricHashJoin",
            "sessionWindowStateStoreSaveExec", "applyInPandasWithState"} <= seen
    # Spark 3.5 checkpoints: named and kinded like Spark 4's, marked inferred, found by that name
    for name, spark_op, kind in [("spark35-agg-hdfs", "stateStoreSave", "aggregation"),
                                 ("spark35-dedup-watermark-rocksdb", "dedupe", "dedup"),
                                 ("spark35-apply-in-pandas-with-state", "flatMapGroupsWithState", "group_state")]:
        snap = explorer.open(ROOT / name, jvm=False)
        ops = snap.reader.operators()
        assert ops[["operator", "spark_operator", "operator_kind", "kind_inferred"]].values.tolist() == [
            [spark_op, spark_op, kind, True]], name
        assert any("inferred from its state schema" in n for n in snap.reader.notes)
        rows = snap.keyed_state(operator=spark_op)
        assert len(rows) == sum(len(s["rows"]) for s in json.loads(
            (ROOT / name / "EXPECTED.json").read_text())["operators"][0]["stores"]), name
    # Spark 4's operators carry the same column, not inferred
    ops = explorer.open(ROOT / "dedup-within-watermark", jvm=False).reader.operators()
    assert ops[["operator_kind", "kind_inferred"]].values.tolist() == [["dedup_within_watermark", False]]


def test_format_v2_versions_that_retention_deleted_are_gone_not_damaged(tmp_path):
    import shutil

    from explorer.errors import SnapshotFormatError, VersionGoneError
    from explorer.readers.base import KeyedStateQuery
    from explorer.readers.spark import SparkCheckpointReader

    name = "agg-rocksdb-v2-maintained"
    path = ROOT / name
    h = explorer.history(path)
    gone = h[~h["reconstructable"]]
    assert gone["checkpoint_id"].tolist() == [6] and gone["note"].str.contains("maintenance deleted").all()
    assert h["entries"].iloc[-1] == len(_expected(name))
    with pytest.raises(VersionGoneError, match=r"version 7 .*keeps versions from 8"):
        list(SparkCheckpointReader(path, batch_id=6, jvm=False).keyed_pieces(KeyedStateQuery()))
    # batch 7, after the gone one, is answered from its own <v>_<uuid>.changelog: its input's users
    ch = explorer.changes(path)
    assert sorted(set(ch["batch_id"])) == [7, 8, 9]
    inputs = _fixture_inputs(name)
    agg = _make_fixtures().agg_expected({"events": inputs[:8]})["operators"][0]["stores"][0]["rows"]
    users = {r["user"] for r in inputs[7]}
    b7 = ch[ch["batch_id"] == 7]
    assert {k["user"] if isinstance(k, dict) else k: list(v.values()) for k, v in zip(b7["key"], b7["value"])} == {
        r["key"]["user"]: [x for _, x in r["buffer"]] for r in agg if r["key"]["user"] in users}
    # a file the newest batch needs, missing, is not retention: still a format error, not VersionGoneError
    copy = tmp_path / name
    shutil.copytree(path, copy)
    for f in (copy / "state" / "0" / "1").glob("10_*"):
        f.unlink()
    with pytest.raises(SnapshotFormatError) as info:
        list(SparkCheckpointReader(copy, jvm=False).keyed_pieces(KeyedStateQuery()))
    assert not isinstance(info.value, VersionGoneError) and "state/0/1" in str(info.value)
