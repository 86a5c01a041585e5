"""Real Spark checkpoints (sample_data/spark, made by tools/spark/make_fixtures.py) read through
``explorer.open`` and compared, state by state and row by row, with their EXPECTED.json (computed
from each query's input, not from Spark)."""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import explorer
from explorer.errors import ReaderError, VersionGoneError
from tests.support.spark_expected import leaves, scalar

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2] / "sample_data" / "spark"
FIXTURES = sorted(p.parent.name for p in ROOT.glob("*/EXPECTED.json"))
READABLE = [f for f in FIXTURES if not f.startswith("damaged-missing")]


def _doc(name: str) -> dict:
    return json.loads((ROOT / name / "EXPECTED.json").read_text())


def _key(v: Any) -> tuple:
    return tuple(x for _, x in leaves(v))


def _store_name(store: dict) -> str:
    if store["kind"] == "join_rows":
        return f"{store['join_side']}-keyWithIndexToValue"
    return store["state_var"] or store["store_name"]


def _value_ok(exp: dict, value: Any) -> bool:
    got = leaves(value) if isinstance(value, dict) else [("value", scalar(value))]
    if "buffer" in exp:  # an aggregation buffer: positional, whatever the names
        return [v for _, v in got] == [v for _, v in exp["buffer"]]
    want = leaves(exp["value"])
    if not want:
        return True
    if len(want) == 1 and len(got) == 1:  # a one-field struct is shown as its field
        return got[0][1] == want[0][1]
    by_name = defaultdict(list)
    for p, v in got:
        by_name[p].append(v)
        if p.split(".")[-1] != p:
            by_name[p.split(".")[-1]].append(v)
    return all(by_name.get(p) and by_name[p][0] == v or
               len(by_name.get(p.split(".")[-1], [])) == 1 and by_name[p.split(".")[-1]][0] == v for p, v in want)


def _expiry_ok(exp: dict, expires_at: Any) -> bool:
    ms = None if expires_at is None or pd.isna(expires_at) else int(pd.Timestamp(expires_at).value // 1_000_000)
    if "expires_at_ms" in exp:
        return ms == exp["expires_at_ms"]
    if "expires_at_range_ms" in exp:
        lo, hi = exp["expires_at_range_ms"]
        return ms is not None and lo <= ms <= hi
    return True


def _compare(store: dict, rows: pd.DataFrame) -> list[str]:
    """What differs between a store's expected rows and the explorer's (empty: equal)."""
    problems = []
    actual = defaultdict(list)
    for r in rows.itertuples(index=False):
        k = _key(r.key) + (_key(r.user_key) if store["kind"] == "map" else ())
        actual[k].append(r)
    expected = defaultdict(list)
    for e in store["rows"]:
        expected[_key(e["key"]) + (_key(e["user_key"]) if "user_key" in e else ())].append(e)
    if set(actual) != set(expected):
        problems.append(f"keys differ: missing {sorted(set(expected) - set(actual))[:3]}, "
                        f"unexpected {sorted(set(actual) - set(expected))[:3]}")
    for k, exps in expected.items():
        cands = list(actual.get(k, []))
        if len(cands) != len(exps):
            problems.append(f"{k}: {len(exps)} rows expected, {len(cands)} read")
            continue
        for e in exps:
            hit = next((i for i, a in enumerate(cands) if
                        (store["kind"].endswith("_timer") or _value_ok(e, a.value)) and _expiry_ok(e, a.expires_at)
                        and ("matched" not in e or a.value.get("matched") == e["matched"])), None)
            if hit is None:
                problems.append(f"{k}: no row like {e} among {[(a.value, a.expires_at) for a in cands][:2]}")
            else:
                cands.pop(hit)
    return problems


@pytest.fixture(scope="module")
def opened(spark):
    cache: dict[str, tuple[Any, pd.DataFrame]] = {}

    def get(name: str):
        if name not in cache:
            snap = explorer.open(ROOT / name)
            cache[name] = (snap, snap.keyed_state())
        return cache[name]

    return get


def test_the_fixtures_are_here():
    assert len(FIXTURES) >= 24, f"expected the Spark fixtures in {ROOT}"


@pytest.mark.parametrize("name", READABLE)
def test_every_state_equals_expected(opened, name):
    doc = _doc(name)
    snap, df = opened(name)
    ops = snap.operators.set_index("operator_id")["operator"].to_dict()
    for op in doc["operators"]:
        assert op["operator_id"] in ops, f"operator {op['operator_id']} not found: {ops}"
        for store in op["stores"]:
            rows = df[(df["operator"] == ops[op["operator_id"]]) & (df["state"] == _store_name(store))]
            assert _compare(store, rows) == [], (name, op["operator_id"], _store_name(store))
    # nothing read that EXPECTED.json does not have
    assert len(df) == sum(len(s["rows"]) for o in doc["operators"] for s in o["stores"])


@pytest.mark.parametrize("name", READABLE)
def test_every_expected_key_is_in_the_partition_spark_put_it(opened, name):
    """keyed_state(key=k) reads only k's Spark partition: that partition is right for every expected key."""
    doc = _doc(name)
    snap, df = opened(name)
    reader = snap.reader
    for op in doc["operators"]:
        for store in op["stores"]:
            state = _store_name(store)
            operator = snap.operators.set_index("operator_id")["operator"][op["operator_id"]]
            rows = df[(df["operator"] == operator) & (df["state"] == state)]
            where = {_key(k): int(p) for k, p in zip(rows["key"], rows["key_group"])}
            keys = [_user_key(r["key"]) for r in store["rows"]]
            parts = reader.partitions_of(keys, operator=operator, state=state)
            assert [where[_key(k)] for k in keys] == parts


def _user_key(key: dict) -> Any:
    """A key as a user passes it: one column as its value, several as a tuple, timestamps as pd.Timestamp."""
    def conv(v):
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        if isinstance(v, str) and len(v) == 24 and v.endswith("Z") and v[10] == "T":
            return pd.Timestamp(v)
        return v
    vals = [conv(v) for v in key.values()]
    return vals[0] if len(vals) == 1 else tuple(vals)


@pytest.mark.parametrize("name", READABLE)
def test_key_lookups(opened, name):
    """keyed_state(key=k) for a key of every operator (every key's partition is checked above): all its rows."""
    doc = _doc(name)
    snap, df = opened(name)
    for op in doc["operators"]:
        rows = op["stores"][0]["rows"]
        e = rows[len(rows) // 2]
        k = _user_key(e["key"])
        got = snap.keyed_state(key=k)
        want = df[[_key(x) == _key(e["key"]) for x in df["key"]]]
        assert len(got) == len(want) > 0, (name, k)
        assert Counter(got["state"]) == Counter(want["state"])


def test_format_v2_is_detected():
    from explorer.readers.spark import SparkCheckpointReader

    for name in FIXTURES:
        assert SparkCheckpointReader(ROOT / name).format_version == _doc(name)["checkpoint_format_version"], name


def test_missing_partition_is_an_error_naming_the_folder(spark):
    snap = explorer.open(ROOT / "damaged-missing-partition")
    with pytest.raises(ReaderError, match=r"state/0/2 is missing"):
        snap.keyed_state()


@pytest.mark.parametrize("name", ["damaged-no-operator-metadata", "spark35-agg-hdfs"])
def test_operators_without_metadata_are_found_and_noted(opened, name):
    snap, df = opened(name)
    assert len(snap.operators) == 1 and len(df) == sum(len(s["rows"]) for s in _doc(name)["operators"][0]["stores"])
    assert any("no operator metadata" in n for n in snap.notes)


def test_a_copy_reads_its_own_schema_files(opened):
    snap, df = opened("tws-rows-copied")
    assert any("copied from elsewhere" in n for n in snap.notes)
    doc = json.loads((ROOT / "tws-rows-copied" / "state" / "0" / "_metadata" / "v2" / "0").read_text().splitlines()[1])
    original = doc["stateStoreInfo"][0]["stateSchemaFilePaths"][0]
    assert not Path(original.removeprefix("file:")).exists()  # the original is gone: the copy's own files serve
    assert set(df["state"]) == {"stats", "recent", "by_item", "$eventTimers_keyToTimestamp"}


def test_64_bit_map_keys_stay_exact(opened):
    snap, df = opened("tws-pandas")
    products = df[df["state"] == "products"]
    want = {r["user_key"]["code"] for s in _doc("tws-pandas")["operators"][0]["stores"] if s["kind"] == "map"
            for r in s["rows"]}
    assert set(products["user_key"]) == want and all(type(u) is int for u in products["user_key"])


def test_dedup_and_group_state_expiry_is_expires_at(opened):
    for name in ("dedup-within-watermark", "apply-in-pandas-with-state"):
        _, df = opened(name)
        assert df["expires_at"].notna().all() and str(df["expires_at"].dt.tz) == "UTC"


def test_join_state_is_per_join_key(opened):
    _, df = opened("join-inner-hdfs")
    rows = df[df["state"] == "left-keyWithIndexToValue"]
    assert rows["key"].map(type).eq(str).all()  # the join key itself, not (key, index)
    counts = df[df["state"] == "left-keyToNumValues"].set_index("key")["value"].to_dict()
    assert rows.groupby("key").size().to_dict() == counts
    assert all(sorted(g) == list(range(len(g))) for _, g in rows.groupby("key")["user_key"])


def test_history_has_every_batch(spark):
    path = ROOT / "agg-rocksdb-changelog"
    h = explorer.history(path)
    batches = sorted(int(p.name) for p in (path / "commits").iterdir() if p.name.isdigit())
    assert h["checkpoint_id"].tolist() == batches
    assert (h["bytes"] > 0).all() and h["checkpoint_bytes"].is_monotonic_increasing
    assert h["entries"].iloc[-1] == 40 and h["added"].iloc[0] == h["entries"].iloc[0]
    assert (h["checkpoint_bytes"].diff().dropna() == h["bytes"].iloc[1:].to_numpy()).all()


def test_changes_of_one_key_end_at_its_expected_value(spark):
    doc = _doc("agg-rocksdb-changelog")
    exp = doc["operators"][0]["stores"][0]["rows"][0]
    user = exp["key"]["user"]
    ch = explorer.changes(ROOT / "agg-rocksdb-changelog", key=user)
    assert len(ch) > 1 and set(ch["key"]) == {user} and ch["batch_id"].is_monotonic_increasing
    assert _value_ok(exp, ch["value"].iloc[-1])
    part = explorer.changes(ROOT / "agg-rocksdb-changelog", key=user, from_batch=2, to_batch=3)
    assert set(part["batch_id"]) <= {2, 3}


def test_spark_errors_name_the_file_and_the_root_cause(spark, tmp_path, capfd):
    from explorer.spark_session import log_path

    bad = tmp_path / "ckpt"
    shutil.copytree(ROOT / "window-tumbling", bad)
    for f in (bad / "state" / "0" / "1").glob("*.changelog"):
        f.write_bytes(b"not a changelog")
    for f in (bad / "state" / "0" / "1").glob(".*.crc"):
        f.unlink()
    with pytest.raises(ReaderError) as info:  # through Spark's data source (the files alone: tests below)
        explorer.open(bad, jvm=True).keyed_state()
    msg = str(info.value)
    assert "\n" not in msg and "An error occurred while calling" not in msg
    assert str(bad) in msg and str(log_path()) in msg
    assert "ERROR" not in capfd.readouterr().err  # the JVM's output went to the log file


def _jvm_free(name: str) -> bool:
    from explorer.readers.spark import SparkCheckpointReader

    return SparkCheckpointReader(ROOT / name).jvm_free


#: every fixture of the built-in operators, HDFS-backed and RocksDB, format v1 and v2
JVM_FREE = [f for f in READABLE if _jvm_free(f)]


def test_every_store_of_the_builtin_operators_is_read_without_a_jvm():
    providers = {_doc(f)["provider"] for f in JVM_FREE}
    assert providers == {"hdfs", "rocksdb"} and len(JVM_FREE) >= 19
    assert {_doc(f)["checkpoint_format_version"] for f in JVM_FREE} == {1, 2}
    assert all(_doc(f)["operators"][0]["stores"][0].get("state_var") is not None for f in READABLE
               if f not in JVM_FREE)  # only transformWithState goes through Spark


@pytest.mark.parametrize("name", JVM_FREE)
def test_jvm_free_reader_equals_expected(name):
    """Without any JVM: every state of the built-in operators equals EXPECTED.json."""
    doc = _doc(name)
    snap = explorer.open(ROOT / name, jvm=False)
    df = snap.keyed_state()
    ops = snap.operators.set_index("operator_id")["operator"].to_dict()
    for op in doc["operators"]:
        for store in op["stores"]:
            rows = df[(df["operator"] == ops[op["operator_id"]]) & (df["state"] == _store_name(store))]
            assert _compare(store, rows) == [], (name, op["operator_id"], _store_name(store))
    assert len(df) == sum(len(s["rows"]) for o in doc["operators"] for s in o["stores"])


@pytest.mark.parametrize("name", JVM_FREE)
def test_jvm_free_reader_equals_sparks_data_source_row_for_row(spark, name):
    from explorer.readers.base import KeyedStateQuery
    from explorer.readers.spark import SparkCheckpointReader

    def rows(reader):
        assert reader.jvm_free is (reader._jvm is False)
        out = []
        for piece in reader.keyed_pieces(KeyedStateQuery()):
            for r in piece.to_pylist():
                out.append(repr((r["operator"], r["state"], r["kind"], _key(r["key"]), r["key_group"],
                                 _key(r["user_key"]), leaves(r["value"]), scalar(r["expires_at"]),
                                 r["size_bytes"])))
        return sorted(out)

    free = SparkCheckpointReader(ROOT / name, jvm=False)
    assert all("no operator metadata" in n or "aggregation buffers" in n for n in free.notes)
    assert rows(free) == rows(SparkCheckpointReader(ROOT / name, jvm=True))
    for batch in free.checkpoint_ids()[:2]:  # older batches too: deltas replayed up to them
        try:
            older = rows(free.at_batch(batch))
        except VersionGoneError:  # its files deleted by the store's maintenance: Spark cannot read it either
            with pytest.raises(Exception):  # noqa: B017 - Spark's own exception types vary
                rows(SparkCheckpointReader(ROOT / name, jvm=True).at_batch(batch))
            continue
        assert older == rows(SparkCheckpointReader(ROOT / name, jvm=True).at_batch(batch))


def test_jvm_free_path_starts_no_jvm_and_refuses_other_stores():
    import subprocess
    import sys

    code = ("import explorer, sys; s = explorer.open(sys.argv[1]); n = len(s.keyed_state()); "
            "from pyspark import SparkContext; print(n, SparkContext._active_spark_context is None)")
    for name in ("agg-hdfs", "agg-rocksdb-v2"):
        out = subprocess.run([sys.executable, "-c", code, str(ROOT / name)], capture_output=True, text=True,
                             check=True, cwd=Path(__file__).resolve().parents[2]).stdout.split()
        assert out == ["40", "True"], name
    from explorer.readers.spark import SparkCheckpointReader

    with pytest.raises(ReaderError, match="without Spark"):
        SparkCheckpointReader(ROOT / "tws-rows", jvm=False).jvm_free


def test_flat_state_has_one_column_per_value_field():
    from explorer.readers.spark import SparkCheckpointReader

    reader = SparkCheckpointReader(ROOT / "agg-hdfs")
    df = reader.flat_state()
    # the buffer names are explained where the dashboards and reports show notes
    assert any("aggregation buffers" in n and "aliases" in n for n in reader.notes)
    assert ["count", "sum", "count_2", "sum_2", "sum_3", "min", "max"] == list(df.columns[-7:])
    assert "value" not in df and df["count"].dtype == "int64" and df["sum"].dtype == "float64"
    exp = {r["key"]["user"]: [v for _, v in r["buffer"]] for r in _doc("agg-hdfs")["operators"][0]["stores"][0]["rows"]}
    assert {k: list(v) for k, v in zip(df["key"], df[df.columns[-7:]].itertuples(index=False))} == exp
    join = SparkCheckpointReader(ROOT / "join-inner-hdfs").flat_state(state="left-keyWithIndexToValue")
    assert {"imp_id", "ad_id", "imp_ts_ms", "imp_ts", "matched"} <= set(join.columns)


def test_changes_include_transform_with_state_timers(spark):
    """Timers' change feed (Spark's own throws): replaying it from the first batch gives the expected timers."""
    name = "tws-rows"
    ch = explorer.changes(ROOT / name)
    timers = ch[ch["state"] == "$eventTimers_keyToTimestamp"]
    assert len(timers) and set(timers["change_type"]) == {"update", "delete"} and ch.attrs["notes"] == []
    live: set = set()
    for r in timers.itertuples(index=False):
        item = (_key(r.key), int(r.value))
        if r.change_type == "update":
            live.add(item)
        else:
            live.remove(item)
    store = next(s for o in _doc(name)["operators"] for s in o["stores"] if s["kind"] == "event_timer")
    assert live == {(_key(r["key"]), r["expires_at_ms"]) for r in store["rows"]}
    assert (timers["expires_at"].astype("int64") // 1_000_000 == timers["value"]).all()
    one = timers["key"].iloc[0]
    assert set(explorer.changes(ROOT / name, key=one, state="$eventTimers_keyToTimestamp")["key"]) == {one}
