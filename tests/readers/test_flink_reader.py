"""The Flink reader on real Flink snapshots, checked against what the Flink job reported.

Every fixture under sample_data/flink was produced by Apache Flink itself
(tools/flink/make_fixtures.sh) together with EXPECTED.json, the job's own
account of its state. Nothing below hard-codes a result.
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pytest

from explorer.keygroups import assign_to_key_group, key_group_range_for_operator
from explorer.readers.base import CONTRACT_COLUMNS, FIXED_TYPES, KeyedStateQuery
from explorer.readers.flink import FlinkSnapshotReader

from tests.support.flink import (
    UIDS,
    DATASTREAM_FIXTURES,
    FIXTURE_NAMES,
    FLINK_FIXTURES,
    PARTIAL_FIXTURES,
    SQL_FIXTURES,
    expected,
    load,
    varint,
)

REQUIRED = {
    "heap-canonical-savepoint", "heap-native-savepoint", "heap-checkpoint-compressed",
    "rocksdb-canonical-savepoint-compressed", "rocksdb-native-savepoint", "rocksdb-incremental-checkpoint",
    "sql-groupby-savepoint", "flink-1.20-heap-canonical-savepoint", "flink-1.20-rocksdb-incremental-checkpoint",
    "maxp1000-heap-canonical-savepoint", "maxp1000-rocksdb-native-savepoint", "heap-unaligned-checkpoint",
}


def kind_of(exp: dict) -> tuple[str, str | None]:
    """(checkpoint|savepoint, canonical|native|None) from what the job wrote."""
    k = exp["kind"]
    if k.endswith("savepoint"):
        return "savepoint", k.split("-")[0]
    return "checkpoint", None


def test_every_fixture_is_present():
    # a missing fixture must fail, not silently shrink the parametrized tests
    assert REQUIRED <= set(FIXTURE_NAMES), f"missing fixtures under {FLINK_FIXTURES}"


@pytest.fixture(scope="module", params=DATASTREAM_FIXTURES)
def datastream(request):
    name = request.param
    exp = expected(name)
    # Flink does not store TTL durations: pass the job's own
    ttl = {state: timedelta(milliseconds=ms) for state, ms in exp["ttl_ms"].items()}
    reader = FlinkSnapshotReader(FLINK_FIXTURES / name, uids=UIDS, ttl=ttl)
    return name, reader, load(reader), exp


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_detect_and_info(name):
    path = FLINK_FIXTURES / name
    assert FlinkSnapshotReader.detect(path)
    info = FlinkSnapshotReader(path).info()
    exp = expected(name)
    kind, fmt = kind_of(exp)
    assert info.kind == kind
    assert info.format == f"flink-{kind}"
    assert info.extra["savepoint_format"] == fmt
    # Flink 1.20 writes metadata version 4, Flink 2.x version 6
    assert info.extra["metadata_version"] == (4 if exp["flink_version"].startswith("1.") else 6)
    assert exp["kind"].endswith(info.kind)
    backends = set(info.extra["backends"].values())
    if exp["kind"] == "canonical-savepoint":
        assert backends == {"canonical savepoint"}
    elif exp["backend"] == "hashmap":
        assert backends == {"hashmap (heap)"}
    else:
        assert backends == {"rocksdb (native)"}


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_operator_ids_are_flinks_hash_of_the_uid(name):
    from explorer.readers.flink.operatorid import operator_id_for_uid

    reader = FlinkSnapshotReader(FLINK_FIXTURES / name)
    with_uid = [o for o in reader.meta.operators if o.uid]
    if reader.meta.version >= 5:
        assert with_uid  # Flink stored the uids: its OperatorIDs must be our hash of them
        for o in with_uid:
            assert o.operator_id == operator_id_for_uid(o.uid)
    else:
        assert not with_uid and any("stores no operator names" in n for n in reader.notes)
        named = FlinkSnapshotReader(FLINK_FIXTURES / name, uids=UIDS).operators()
        assert {"user-state", "bucket-state", "events-source"} <= set(named["operator"])


def test_detect_refuses_other_folders(tmp_path):
    assert not FlinkSnapshotReader.detect(tmp_path)
    (tmp_path / "_metadata").write_bytes(b"not flink")
    assert not FlinkSnapshotReader.detect(tmp_path)


def test_operators_states_subtasks(datastream):
    name, reader, _, exp = datastream
    ops = reader.operators().set_index("operator")
    for op, states in exp["operators"].items():
        assert ops.loc[op, "parallelism"] == exp["parallelism"]
        assert ops.loc[op, "max_parallelism"] == exp["max_parallelism"]
        assert ops.loc[op, "uid"] == op
        assert len(ops.loc[op, "operator_id"]) == 32
    st = reader.states()
    for op, states in exp["operators"].items():
        got = set(st.loc[st["operator"] == op, "state"])
        assert set(states) <= got
    ttl_states = set(st.loc[st["has_ttl"], "state"])
    assert ttl_states == set(exp["ttl_ms"])
    for s, ms in exp["ttl_ms"].items():
        assert st.loc[st["state"] == s, "ttl_ms"].iat[0] == ms
    kinds = dict(zip(st["state"], st["kind"]))
    assert kinds["amounts"] == "list" and kinds["per_category"] == "map" and kinds["amount_sum"] == "reducing"
    assert kinds["stats"] == "value"
    assert kinds["_timer_state/event_user-timers"] == "event_timer"
    sub = reader.subtasks()
    for op in exp["operators"]:
        rows = sub[sub["operator"] == op].sort_values("subtask")
        want = [key_group_range_for_operator(exp["max_parallelism"], exp["parallelism"], i) for i in range(exp["parallelism"])]
        assert list(zip(rows["key_group_start"], rows["key_group_end"])) == [(r.start, r.end) for r in want]


def test_contract_columns_and_types(datastream):
    _, reader, frames, _ = datastream
    piece = next(p for p in reader.keyed_pieces(KeyedStateQuery()) if p.num_rows)
    assert tuple(piece.column_names) == CONTRACT_COLUMNS
    for c, t in FIXED_TYPES.items():
        assert piece.schema.field(c).type == t, c
    assert set(frames) >= {("user-state", "stats"), ("bucket-state", "amount_sum")}


def test_values_match_the_job(datastream):
    name, _, frames, exp = datastream
    users = exp["users"]
    stats = frames[("user-state", "stats")]
    assert set(stats["key"]) == set(users)
    by_user = stats.set_index("key")["value"]
    for u, e in users.items():
        v = by_user[u]
        assert v["count"] == e["count"], u
        assert v["total"] == e["total"], u
        assert v["maxPrice"] == pytest.approx(e["max_price"]), u
        assert v["lastCategory"] in e["per_category"]
    # list state: one element per event, summing to the total
    amounts = frames[("user-state", "amounts")]
    agg = amounts.groupby("key")["value"].agg(["count", "sum"])
    for u, e in users.items():
        assert agg.loc[u, "count"] == e["count"] and agg.loc[u, "sum"] == e["total"], u
    # list indexes are 0..n-1 per key
    idx = amounts.groupby("key")["user_key"].agg(["min", "max", "count"])
    assert (idx["min"] == 0).all() and (idx["max"] == idx["count"] - 1).all()
    # a TTL'd list (each element wrapped with its timestamp): the job appends the amounts above 90
    if ("user-state", "recent_amounts") in frames:
        recent = frames[("user-state", "recent_amounts")]
        full = frames[("user-state", "amounts")]
        as_lists = lambda df: {k: list(g.sort_values("user_key")["value"]) for k, g in df.groupby("key")}  # noqa: E731
        want = {k: [a for a in v if a > 90] for k, v in as_lists(full).items()}
        assert as_lists(recent) == {k: v for k, v in want.items() if v}
        assert recent["last_access"].notna().all()
    # map state (TTL): the job's invariant count == sum of the map's values, per category
    pc = frames[("user-state", "per_category")]
    got = {u: dict(zip(g["user_key"], g["value"])) for u, g in pc.groupby("key")}
    assert got == {u: e["per_category"] for u, e in users.items()}
    for u, g in pc.groupby("key"):
        assert g["value"].sum() == by_user[u]["count"]
    # Tuple2 value
    first = frames[("user-state", "first_event")].set_index("key")["value"]
    for u, e in users.items():
        assert first[u]["f0"] in e["per_category"] and 0 <= first[u]["f1"] < 1000
    # reducing state keyed by Long (negative and positive keys)
    sums = frames[("bucket-state", "amount_sum")]
    assert dict(zip(sums["key"].astype(str), sums["value"])) == exp["bucket_sums"]


def test_timers_match_the_job(datastream):
    _, _, frames, exp = datastream
    ev = frames[("user-state", "_timer_state/event_user-timers")]
    assert (ev["kind"] == "event_timer").all()
    assert ev.groupby("key").size().to_dict() == {u: e["event_timers"] for u, e in exp["users"].items()}
    assert not ev.duplicated(["key", "value"]).any()
    pt = frames[("user-state", "_timer_state/processing_user-timers")]
    assert (pt["kind"] == "processing_timer").all()
    assert set(pt["value"]) == {exp["processing_timer"]}
    assert sorted(pt["key"]) == sorted(exp["users"])


def test_ttl_last_access_and_expiry(datastream):
    _, _, frames, exp = datastream
    for state, ttl_ms in exp["ttl_ms"].items():
        df = frames[("user-state", state)]
        assert df["last_access"].notna().all(), state
        assert str(df["last_access"].dt.tz) == "UTC"
        delta = (df["expires_at"] - df["last_access"]).dt.total_seconds() * 1000
        assert (delta == ttl_ms).all(), state
    # no TTL configured: no last access
    assert frames[("user-state", "stats")]["last_access"].isna().all()
    assert frames[("user-state", "stats")]["expires_at"].isna().all()


def test_ttl_is_optional_and_validated():
    name = DATASTREAM_FIXTURES[0]
    reader = FlinkSnapshotReader(FLINK_FIXTURES / name, uids=UIDS)
    df = load(reader, KeyedStateQuery(states=frozenset({"last_seen"})))[("user-state", "last_seen")]
    assert df["last_access"].notna().all() and df["expires_at"].isna().all()
    with pytest.raises(ValueError, match="expected a positive datetime.timedelta"):
        FlinkSnapshotReader(FLINK_FIXTURES / name, ttl={"last_seen": 3600})


def test_key_groups_and_subtasks(datastream):
    _, reader, frames, exp = datastream
    m, p = exp["max_parallelism"], exp["parallelism"]
    for (op, state), df in frames.items():
        keys = df["key"].tolist()
        want = [assign_to_key_group(k, m) for k in keys]
        assert df["key_group"].tolist() == want, (op, state)
        assert (df["subtask"] == df["key_group"] * p // m).all()
    info = reader.info()
    assert info.extra["key_group_mismatches"] == 0
    assert info.extra["key_group_checked_rows"] == sum(len(df) for df in frames.values())


def test_planted_hot_keys(datastream):
    _, _, frames, exp = datastream
    stats = frames[("user-state", "stats")]
    counts = pd.Series({k: v["count"] for k, v in zip(stats["key"], stats["value"])})
    top = counts.sort_values(ascending=False, kind="stable").head(3)
    assert [[k, int(v)] for k, v in top.items()] == exp["hot_keys"]
    # the list state's row count per key shows the same skew
    rows = frames[("user-state", "amounts")].groupby("key").size().sort_values(ascending=False)
    assert list(rows.index[:3]) == [k for k, _ in exp["hot_keys"]]


def test_queries_filter(datastream):
    _, reader, frames, exp = datastream
    hot = exp["hot_keys"][0][0]
    got = load(reader, KeyedStateQuery(operators=frozenset({"user-state"}), states=frozenset({"amounts"}), keys=(hot,)))
    assert list(got) == [("user-state", "amounts")]
    df = got[("user-state", "amounts")]
    assert set(df["key"]) == {hot} and len(df) == exp["users"][hot]["count"]
    kg = int(frames[("user-state", "stats")].set_index("key").loc[hot, "key_group"])
    got = load(reader, KeyedStateQuery(states=frozenset({"stats"}), key_groups=frozenset({kg})))
    df = got[("user-state", "stats")]
    assert set(df["key_group"]) == {kg} and hot in set(df["key"])
    cols = ("key", "value")
    piece = next(p for p in reader.keyed_pieces(KeyedStateQuery(states=frozenset({"stats"}), columns=cols)))
    assert tuple(piece.column_names) == cols


def test_all_formats_give_the_same_state():
    """Heap/RocksDB, canonical/native, savepoint/checkpoint, Flink 1.20/2.3: one job, one state.

    Key groups and subtasks are compared between snapshots of the same max parallelism only.
    """
    def canon(name, with_key_groups):
        frames = load(FlinkSnapshotReader(FLINK_FIXTURES / name, uids=UIDS))
        out = {}
        for k, df in frames.items():
            cols = ["key", "namespace", "user_key", "value"]  # size_bytes is per format
            if with_key_groups:
                cols += ["key_group", "subtask"]
            d = df[cols].copy()
            for c in ("namespace", "user_key", "value"):
                d[c] = d[c].map(repr)
            out[k] = sorted(map(tuple, d.astype(str).values.tolist()))
        return out

    by_maxp: dict[int, list[str]] = {}
    for name in DATASTREAM_FIXTURES:
        by_maxp.setdefault(expected(name)["max_parallelism"], []).append(name)
    assert len(by_maxp) >= 2 and all(len(v) >= 2 for v in by_maxp.values())
    base = canon(DATASTREAM_FIXTURES[0], False)
    for names in by_maxp.values():
        first = canon(names[0], True)
        for name in names[1:]:
            assert canon(name, True) == first, name
        assert canon(names[0], False) == base, names[0]


@pytest.mark.parametrize("name", SQL_FIXTURES)
def test_sql_group_by(name):
    exp = expected(name)
    reader = FlinkSnapshotReader(FLINK_FIXTURES / name)
    frames = load(reader)
    (key, df), = [(k, v) for k, v in frames.items() if not k[1].startswith("_timer_state")]
    assert key[0].startswith("GroupAggregate")
    assert set(df["key"]) == set(exp["users"])
    for u, v in zip(df["key"], df["value"]):
        e = exp["users"][u]
        # accumulators of COUNT(*), SUM(amount), MAX(price), in the query's order
        assert (v["f0"], v["f1"]) == (e["count"], e["total"])
        assert v["f2"] == pytest.approx(e["max_price"])
    top = df.assign(c=[v["f0"] for v in df["value"]]).sort_values(["c", "key"], ascending=[False, True]).head(3)
    assert [[k, c] for k, c in zip(top["key"], top["c"])] == exp["hot_keys"]
    # RowData keys hash with Flink's binary-row murmur: not re-computed, and the notes say so
    assert any("unchecked" in n for n in reader.notes)
    st = reader.states()
    assert st.loc[st["state"] == "accState", "value_type"].iat[0].startswith("ROW<")


@pytest.mark.parametrize("name", DATASTREAM_FIXTURES + SQL_FIXTURES)
def test_operator_state_of_the_source(name):
    """The source's split state: one split whose next index is past every event the job emitted, decoded
    (explorer/readers/flink/splits.py: int version, int length, utf id, long from, long to)."""
    exp = expected(name)
    df = FlinkSnapshotReader(FLINK_FIXTURES / name, uids=UIDS).operator_state()
    src = df[df["state"] == "SourceReaderState"]
    # named "Source: events" by Flink 2.x metadata, by its uid for Flink 1.20 (no names stored)
    assert list(src["mode"]) == ["split"] and list(src["operator"]) in (["Source: events"], ["events-source"])
    split = src["value"].iat[0]
    assert split["split_type"] == "NumberSequenceSplit" and split["serializer_version"] == 1
    assert split["from"] >= exp["events"] and split["to"] > split["from"]
    # the list element (int length + the versioned bytes): 4 + 8 + utf (2 + id) + 16
    assert src["size_bytes"].iat[0] == 4 + 8 + 2 + len(split["split_id"].encode()) + 16


@pytest.mark.parametrize("name", [n for n in FIXTURE_NAMES if "canonical" in n or n.startswith("sql-")])
def test_vectorised_scan_equals_the_plain_walk(name, monkeypatch):
    """The candidate-link shortcut in fullformat.scan must find exactly the entries the plain loop finds."""
    import numpy as np

    from explorer.readers.flink import fullformat

    reader = FlinkSnapshotReader(FLINK_FIXTURES / name)
    checked = 0
    for op in reader.meta.operators:
        for st in op.subtasks:
            h = st.managed_keyed
            if h is None:
                continue
            header = reader._header(op, st)
            data = reader.resolver.read(h.stream)
            spans = fullformat.key_group_spans(h.offsets, h.start, header.end, len(data))
            prefix = 2 if op.max_parallelism > 128 else 1
            fast = fullformat.scan(data, spans, header.compressed, prefix)
            used = [fullformat._scan_span_vectorised(np.frombuffer(fast[0], dtype=np.uint8), s, e, prefix, kg)
                    for kg, s, e in spans] if not header.compressed else [True]
            with monkeypatch.context() as m:
                m.setattr(fullformat, "_scan_span_vectorised", lambda *a: None)
                slow = fullformat.scan(data, spans, header.compressed, prefix)
            for a, b in zip(fast[1:], slow[1:]):
                np.testing.assert_array_equal(a, b)
            assert any(u is not None for u in used)
            if not header.compressed:
                # a walk that cannot reach the end of its key group must give up, never drop entries
                b = np.frombuffer(data, dtype=np.uint8)
                for kg, s, e in spans[:5]:
                    assert fullformat._scan_span_vectorised(b, s, e - 1, prefix, kg) is None
            checked += len(fast[2])
    assert checked > 0


def test_windows_match_the_job(datastream):
    """AggregatingState in a TimeWindow namespace, and the window timers: the windows still open."""
    _, reader, frames, exp = datastream
    df = frames[("user-windows", "window-contents")]
    assert (df["kind"] == "aggregating").all()
    assert all(w["end"] - w["start"] == exp["window_ms"] for w in df["namespace"])
    got = {f"{k}@{w['start']}": v for k, w, v in zip(df["key"], df["namespace"], df["value"])}
    assert got == exp["open_windows"] and got
    timers = [v for (op, _), v in frames.items() if op == "user-windows" and v["kind"].iat[0] == "event_timer"]
    assert len(timers) == 1
    t = timers[0]
    assert {f"{k}@{w['start']}" for k, w in zip(t["key"], t["namespace"])} == set(exp["open_windows"])
    assert all(ts == w["end"] - 1 for ts, w in zip(t["value"], t["namespace"]))
    st = reader.states()
    assert st.loc[st["state"] == "window-contents", "namespace_type"].iat[0] == "TimeWindow"


@pytest.mark.parametrize("name", DATASTREAM_FIXTURES)
def test_union_and_broadcast_operator_state(name):
    """Each subtask of the counting map kept its record count in union list state and broadcast state."""
    exp = expected(name)
    df = FlinkSnapshotReader(FLINK_FIXTURES / name, uids=UIDS).operator_state()
    df = df[df["operator"] == "counting-map"]
    union = df[df["state"] == "records_per_subtask"]
    assert set(union["mode"]) == {"union"}
    assert sorted(union["subtask"]) == list(range(exp["parallelism"]))
    assert union["value"].sum() == exp["events"]
    bc = df[df["state"] == "records_by_subtask"]
    assert set(bc["mode"]) == {"broadcast"}
    per_key = dict(zip(bc["user_key"], bc["value"]))
    assert set(per_key) == {f"records@{i}" for i in range(exp["parallelism"])}
    assert sum(per_key.values()) == exp["events"]
    assert per_key == {f"records@{s}": v for s, v in zip(union["subtask"], union["value"])}


def _subtask_sst_files(names):
    """(fixture name, [(local file name, bytes)] of one subtask's SST files) for every RocksDB subtask."""
    for name in names:
        reader = FlinkSnapshotReader(FLINK_FIXTURES / name)
        for op in reader.meta.operators:
            for st in op.subtasks:
                h = st.managed_keyed
                if h is not None:
                    yield name, [(local, reader.resolver.read(x)) for local, x in h.shared + h.private
                                 if local.endswith(".sst")]


def test_rocksdb_levels_merges_and_deletions_are_resolved():
    """Flink's RocksDB files hold list appends as merge operands, fired windows as deletions,
    spread over several SST files; the list and window checks above pass only if they are resolved.
    (Compaction may already have folded some of them, so they are counted over all RocksDB fixtures.)"""
    from explorer.format.sst.instance import read_instance
    from explorer.format.sst.file import TYPE_DELETION, TYPE_MERGE, SstFile

    names = [n for n in DATASTREAM_FIXTURES if expected(n)["backend"] == "rocksdb" and "canonical" not in expected(n)["kind"]]
    assert len(names) >= 3
    merged = files = deletions = merges = 0
    for _, ssts in _subtask_sst_files(names):
        for local, data in ssts:
            types = SstFile(data, local).entries().types
            merges += types.count(TYPE_MERGE)
            deletions += types.count(TYPE_DELETION)
        _, stats = read_instance(ssts)
        merged += stats["merged_keys"]
        files += stats["sst_files"]
    assert merges > 0 and merged > 0 and deletions > 0 and files > 4


@pytest.mark.parametrize("name", PARTIAL_FIXTURES)
def test_unaligned_checkpoint_in_flight_records_are_skipped_and_state_is_consistent(name):
    """Cut mid-stream under back-pressure: the invariants the job keeps at every checkpoint hold."""
    exp = expected(name)
    reader = FlinkSnapshotReader(FLINK_FIXTURES / name, uids=UIDS)
    info = reader.info()
    assert info.extra["channel_state_handles"] > 0
    assert any("unaligned checkpoint" in n for n in reader.notes)
    frames = load(reader)
    stats = frames[("user-state", "stats")].set_index("key")["value"]
    assert 0 < len(stats) and set(stats.index) <= set(exp["users"])
    amounts = frames[("user-state", "amounts")].groupby("key")["value"].agg(["count", "sum"])
    per_cat = frames[("user-state", "per_category")].groupby("key")["value"].sum()
    for user, v in stats.items():
        assert v["count"] == amounts.loc[user, "count"] == per_cat[user], user
        assert v["total"] == amounts.loc[user, "sum"], user
        assert v["count"] <= exp["users"][user]["count"]
    assert reader.info().extra["key_group_mismatches"] == 0
    # records counted by the map but still in flight are not in the keyed state yet
    ops = reader.operator_state()
    counted = ops[(ops["operator"] == "counting-map") & (ops["state"] == "records_per_subtask")]["value"].sum()
    assert sum(v["count"] for v in stats) <= counted <= exp["events"]


ROCKSDB_NATIVE = [n for n in FIXTURE_NAMES
                  if expected(n)["backend"] == "rocksdb" and "canonical" not in expected(n)["kind"]]


def _rows(df: pd.DataFrame) -> list[str]:
    return sorted(map(repr, df.itertuples(index=False)))


@pytest.mark.parametrize("name", ROCKSDB_NATIVE)
def test_columnar_sst_reader_equals_the_entry_by_entry_reader(name, monkeypatch):
    """sstvec (all blocks at once) and sst + rocksdb.resolve (entry by entry) give the same frames."""
    fast = load(FlinkSnapshotReader(FLINK_FIXTURES / name, uids=UIDS))
    with monkeypatch.context() as m:
        m.setattr(FlinkSnapshotReader, "columnar_sst", False)
        slow = load(FlinkSnapshotReader(FLINK_FIXTURES / name, uids=UIDS))
    assert fast.keys() == slow.keys() and fast
    for k in fast:
        assert _rows(fast[k]) == _rows(slow[k]), k
        # rows come in key-group order within each subtask's piece
        for _, g in fast[k].groupby("subtask"):
            assert g["key_group"].is_monotonic_increasing, k


def test_columnar_sst_resolves_versions_merges_and_deletions_like_resolve():
    """Per column family, the visible (key, value) pairs equal rocksdb.resolve's, merge counts too."""
    from explorer.format.sst import columns as sstvec
    from explorer.format.sst.instance import resolve

    merged = multi_file = 0
    for name, ssts in _subtask_sst_files(ROCKSDB_NATIVE):
        by_cf, _ = sstvec.column_families(ssts)
        for cf, files in by_cf.items():
            for f in files:
                assert sstvec._data_handles(f) == f.data_handles(), f.name
            values, keys, ks, ke, vs, ve, m = sstvec.read_column_family(files)
            kb, vb = keys.tobytes(), values.tobytes()
            got = sorted((kb[a:b], vb[c:d]) for a, b, c, d in zip(ks.tolist(), ke.tolist(), vs.tolist(), ve.tolist()))
            keys, values, m_ref = resolve([(e.keys, e.seqs, e.types, e.values) for e in (f.entries() for f in files)])
            assert got == list(zip(keys, values)), (name, cf)
            assert m == m_ref
            merged += m
            multi_file += len(files) > 1
    assert merged > 0 and multi_file > 0


def test_reachable_candidates_are_exactly_the_chain_from_the_first():
    """fullformat._reachable: false candidates (chains of any length, merging into the real chain or not)
    are dropped; a chain too long to prune gives None (the caller then walks the links)."""
    import numpy as np

    from explorer.readers.flink import fullformat

    rng = np.random.default_rng(7)
    for trial in range(200):
        n = int(rng.integers(2, 60))
        links = np.full(n, -1, dtype=np.int64)
        for i in range(n - 1):  # random forward links, some missing
            if rng.random() < 0.8:
                links[i] = int(rng.integers(i + 1, n))
        walk, i = [], 0
        while i >= 0:
            walk.append(i)
            i = int(links[i])
        got = fullformat._reachable(links, 0)
        assert got is not None and got.tolist() == walk, trial
    # a false chain longer than the pruning rounds: no answer rather than a wrong one
    k = fullformat._MAX_PRUNING_ROUNDS + 5
    links = np.full(2 * k + 2, -1, dtype=np.int64)
    links[0] = 2 * k + 1  # the real chain: 0 -> last
    links[1 : 2 * k] = np.arange(2, 2 * k + 1)  # 1 -> 2 -> ... a long false chain, into the last node
    assert fullformat._reachable(links, 0) is None


def _string_value(text: str | None) -> bytes:
    """Flink's StringValue bytes of ``text``, written from its documented format (not by the reader)."""
    if text is None:
        return b"\x00"
    units = text.encode("utf-16-le", "surrogatepass")
    units = [int.from_bytes(units[i : i + 2], "little") for i in range(0, len(units), 2)]
    return varint(len(units) + 1) + b"".join(varint(u) for u in units)


def test_column_strings_equal_the_row_decoder_with_java_hashes():
    """columnar._strings (the numba kernel): values, end positions and Java String.hashCode equal the row
    decoder's (DataInput.read_flink_string) and keygroups.java_hash_code, for ASCII, 2- and 3-byte UTF-8,
    supplementary characters (surrogate pairs), nulls, long strings, lone surrogates (left to the row
    decoder), at any place in the buffer (also its very start)."""
    import numpy as np

    from explorer.keygroups import java_hash_code
    from explorer.readers.flink import columnar
    from explorer.readers.flink.datainput import DataInput

    rng = np.random.default_rng(3)
    words = ["", "a", "user-1", "x" * 7, "hot-key-00017", "q" * 64, "r" * 300, "é", "ab\u20acc", "\u07ff\u0800",
             "🔥 fire", "a\U0010ffffb", None, "\ud800", "x\udc00y", "\ud83d"]
    alphabet = [chr(c) for c in (32, 65, 122, 127, 128, 255, 0x7FF, 0x800, 0xFFFD, 0x1F525, 0x10000)]
    words += ["".join(rng.choice(alphabet, int(rng.integers(0, 40)))) for _ in range(300)]
    words += [None] * 5
    data, starts = b"", []
    for w in words:
        starts.append(len(data))
        data += _string_value(w) + bytes(int(rng.integers(0, 3)))
    buf = columnar.Buf(data)
    for want_codes in (True, False):
        col, ends = columnar.read(columnar.PRIMITIVES["StringSerializer"], buf, np.array(starts), want_codes)
        col.values.validate(full=True)
        ref, ref_ends = [], []
        for s in starts:
            inp = DataInput(data, s)
            ref.append(inp.read_flink_string())
            ref_ends.append(inp.pos)
        assert col.values.to_pylist() == ref and ends.tolist() == ref_ends
        if want_codes:
            assert col.codes.tolist() == [java_hash_code(w) & 0xFFFFFFFF if w is not None else 0 for w in ref]
        else:
            assert col.codes is None
    assert sum(w is not None and not w.isascii() for w in ref) > 100 and ref.count(None) == 6


@pytest.mark.parametrize("name", ["heap-canonical-savepoint", "rocksdb-incremental-checkpoint"])
def test_threads_give_the_same_pieces_in_the_same_order(name, monkeypatch):
    def pieces(workers):
        with monkeypatch.context() as m:
            m.setattr(FlinkSnapshotReader, "workers", workers)
            reader = FlinkSnapshotReader(FLINK_FIXTURES / name)
            out = list(reader.keyed_pieces(KeyedStateQuery()))
            return out, reader.info().extra["key_group_checked_rows"]

    one, checked_one = pieces(1)
    two, checked_two = pieces(2)
    assert len(one) == len(two) > 1 and checked_one == checked_two > 0
    for a, b in zip(one, two):
        assert a.equals(b)


@pytest.mark.parametrize("name", ["heap-canonical-savepoint", "rocksdb-incremental-checkpoint",
                                  "rocksdb-canonical-savepoint-compressed"])
@pytest.mark.parametrize("columns", [("key", "key_group", "subtask", "size_bytes"),
                                     ("state", "key", "last_access", "expires_at", "namespace")])
def test_columns_not_asked_for_are_not_decoded_and_the_rest_is_the_same(name, columns):
    exp = expected(name)
    ttl = {state: timedelta(milliseconds=ms) for state, ms in exp["ttl_ms"].items()}
    full = load(FlinkSnapshotReader(FLINK_FIXTURES / name, uids=UIDS, ttl=ttl))
    some = load(FlinkSnapshotReader(FLINK_FIXTURES / name, uids=UIDS, ttl=ttl),
                KeyedStateQuery(columns=("operator", "state") + tuple(c for c in columns if c != "state")))
    assert some.keys() == full.keys()
    for k, df in some.items():
        assert list(df.columns) == ["operator", "state"] + [c for c in columns if c != "state"]
        pd.testing.assert_frame_equal(df, full[k][list(df.columns)], check_dtype=False)


def test_columnar_sst_walk_equals_the_entry_reader_per_file():
    """The kernels' entry walk of every fixture SST file: user keys, sequence numbers, types, values and
    each key's relation to the previous one (a greater key, an older version) equal the entry reader's."""
    import numpy as np

    from explorer.format.sst import kernels
    from explorer.format.sst import columns as sstvec
    from explorer.format.sst.file import SstFile

    seen = {kernels.GREATER: 0, kernels.OLDER: 0}
    for name in ROCKSDB_NATIVE:
        reader = FlinkSnapshotReader(FLINK_FIXTURES / name)
        for op in reader.meta.operators:
            for st in op.subtasks:
                h = st.managed_keyed
                if h is None:
                    continue
                for local, x in h.shared + h.private:
                    if not local.endswith(".sst"):
                        continue
                    f = SstFile(reader.resolver.read(x), local)
                    e = f.entries()
                    joined, keys, width, ulen, vpos, vlen, seq, typ, rel, runs = sstvec._entries([f])
                    assert runs.tolist() == [0, len(e.keys)]
                    m = sstvec._MARGIN
                    assert [keys[m + i * width : m + i * width + u].tobytes() for i, u in enumerate(ulen.tolist())] \
                        == e.keys, local
                    assert not keys[m:].reshape(-1, width)[np.arange(width) >= ulen[:, None]].any()  # zero past
                    assert seq.tolist() == e.seqs and typ.tolist() == e.types, local
                    assert [joined[a : a + b].tobytes() for a, b in zip(vpos.tolist(), vlen.tolist())] == e.values
                    truth = [kernels.FIRST] + [kernels.OLDER if a == b else kernels.GREATER
                                               for a, b in zip(e.keys, e.keys[1:])]
                    assert rel.tolist() == truth, local
                    for r in seen:
                        seen[r] += truth.count(r)
    assert seen[kernels.GREATER] > 0 and seen[kernels.OLDER] > 0
