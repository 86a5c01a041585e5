"""explorer.edit on Flink canonical savepoints, checked with the reader: the written savepoint equals the input
with the edits applied, every value (the real Flink restores are in test_flink_restore.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import explorer
from explorer.keygroups import assign_to_key_group, key_group_range_for_operator
from explorer.readers.flink.operatorid import operator_id_for_uid

from .expected import renumber_lists, rows

FLINK = Path(__file__).resolve().parents[2] / "sample_data" / "flink"
PLAIN = FLINK / "production" / "plain-rocksdb-canonical-savepoint"
HEAP = FLINK / "heap-canonical-savepoint"
COMPRESSED = FLINK / "rocksdb-canonical-savepoint-compressed"
INPUTS = [PLAIN, HEAP, COMPRESSED, FLINK / "production" / "types-heap-canonical-savepoint",
          FLINK / "production" / "flink-1.20-plain-heap-canonical-savepoint", FLINK / "production" / "windows-heap-canonical-savepoint"]


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _open(path: Path, **options) -> explorer.Snapshot:
    return explorer.open(path, **options)


@pytest.mark.parametrize("src", INPUTS, ids=lambda p: p.name)
def test_a_savepoint_written_without_edits_holds_every_row_of_the_input(src, tmp_path):
    before = _digest(src)
    out = explorer.edit(src).write(tmp_path / "out")
    a, b = _open(src), _open(out)
    assert rows(b) == rows(a)
    assert a.operators[["uid", "operator_id", "parallelism", "max_parallelism"]].equals(
        b.operators[["uid", "operator_id", "parallelism", "max_parallelism"]])
    assert sorted(map(repr, b.operator_state().to_dict("records"))) == sorted(map(repr, a.operator_state().to_dict("records")))
    assert sorted(n.replace(str(out), "") for n in b.notes) == sorted(n.replace(str(src), "") for n in a.notes)
    assert _digest(src) == before  # the input is never modified


def test_drop_operator_leaves_it_out_and_keeps_the_rest(tmp_path):
    out = explorer.edit(PLAIN).drop_operator("category-windows").write(tmp_path / "out")
    a, b = rows(_open(PLAIN)), rows(_open(out))
    assert "category-windows" not in set(_open(out).operators["uid"])
    assert b == {k: v for k, v in a.items() if k[0] != "category-windows"}


def test_rename_operator_moves_its_state_to_the_new_uids_operator_id(tmp_path):
    out = explorer.edit(PLAIN).rename_operator("user-activity", "user-activity-v2").write(tmp_path / "out")
    snap = _open(out)
    ops = snap.operators.set_index("uid")
    assert ops.loc["user-activity-v2", "operator_id"] == operator_id_for_uid("user-activity-v2")
    assert "user-activity" not in ops.index
    a = rows(_open(PLAIN))
    assert rows(snap) == {(("user-activity-v2" if op == "user-activity" else op), st): v for (op, st), v in a.items()}


def test_drop_state_leaves_out_its_entries_and_its_registration(tmp_path):
    out = explorer.edit(PLAIN).drop_state(operator="user-activity", state="per_category").write(tmp_path / "out")
    b = _open(out)
    assert "per_category" not in set(b.states["state"])
    a = rows(_open(PLAIN))
    assert rows(b) == {k: v for k, v in a.items() if k != ("user-activity", "per_category")}


@pytest.mark.parametrize("src", [PLAIN, HEAP, COMPRESSED], ids=lambda p: p.name)
def test_drop_keys_leaves_out_every_entry_and_timer_of_those_keys(src, tmp_path):
    snap = _open(src)
    op = "user-activity" if src == PLAIN else "user-state"
    keys = sorted(set(snap.keyed_state(operator=op)["key"]))[:3]
    out = explorer.edit(src).drop_keys(operator=op, keys=keys).write(tmp_path / "out")
    a, b = rows(snap), rows(_open(out))
    gone = {repr(k) for k in keys}
    assert b == {(o, s): ([r for r in v if r[0] not in gone] if o == op else v) for (o, s), v in a.items()}
    assert sum(len(v) for v in b.values()) < sum(len(v) for v in a.values())


def test_filter_keeps_the_rows_the_predicate_keeps_map_and_list_states(tmp_path):
    out = (explorer.edit(PLAIN)
           .filter(operator="user-activity", state="per_category", where=lambda r: r["user_key"] != "books")
           .filter(operator="user-activity", state="amounts", where=lambda r: r["value"] >= 50)
           .write(tmp_path / "out"))
    a = rows(_open(PLAIN))
    want = dict(a)
    want[("user-activity", "per_category")] = [r for r in a[("user-activity", "per_category")] if r[2] != "'books'"]
    want[("user-activity", "amounts")] = [r for r in a[("user-activity", "amounts")] if int(r[3]) >= 50]
    assert 0 < len(want[("user-activity", "amounts")]) < len(a[("user-activity", "amounts")])
    assert rows(_open(out)) == renumber_lists(want, {("user-activity", "amounts"): "list"})


def test_filter_of_a_ttl_list_state_keeps_each_elements_last_access(tmp_path):
    src = HEAP
    out = explorer.edit(src).filter(operator="user-state", state="recent_amounts", where=lambda r: r["value"] % 2 == 0)
    out = out.write(tmp_path / "out")
    a = rows(_open(src))
    want = dict(a)
    want[("user-state", "recent_amounts")] = [r for r in a[("user-state", "recent_amounts")] if int(r[3]) % 2 == 0]
    got = rows(_open(out))
    assert got == renumber_lists(want, {("user-state", "recent_amounts"): "list"})


@pytest.mark.parametrize("src", [PLAIN, HEAP, COMPRESSED], ids=lambda p: p.name)
def test_with_max_parallelism_moves_every_key_to_its_key_group_under_the_new_value(src, tmp_path):
    out = explorer.edit(src).with_max_parallelism(256).write(tmp_path / "out")
    a, b = _open(src), _open(out)
    assert set(b.operators["max_parallelism"]) == {256}
    strip = lambda d: {k: v for k, v in d.items()}  # noqa: E731
    assert strip(rows(b)) == strip(rows(a))
    for op, state in b.states[["operator", "state"]].itertuples(index=False):
        df = b.keyed_state(operator=op, state=state)
        p = int(b.operators.set_index("uid").loc[op, "parallelism"])
        for key, kg, subtask in df[["key", "key_group", "subtask"]].itertuples(index=False):
            assert kg == assign_to_key_group(key, 256)
            r = key_group_range_for_operator(256, p, subtask)
            assert r.start <= kg <= r.end
    assert not [n for n in b.notes if "differs" in n]


def test_edits_are_recorded_in_order_and_printable(tmp_path):
    ed = (explorer.edit(PLAIN).rename_operator("user-activity", "users").drop_keys(operator="users", keys=["user-00"])
          .drop_state(operator="users", state="total").with_max_parallelism(256))
    assert [s.operation for s in ed.steps] == ["rename_operator", "drop_keys", "drop_state", "with_max_parallelism"]
    text = str(ed)
    assert "rename_operator(old_uid='user-activity', new_uid='users')" in text
    assert "drop_keys(operator='users', keys=['user-00'])" in text
    b = rows(_open(ed.write(tmp_path / "out")))
    assert ("users", "total") not in b and not any(r[0] == "'user-00'" for v in b.values() for r in v)


def test_write_refuses_an_existing_folder_that_is_not_empty_and_leaves_it_alone(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    with pytest.raises(explorer.EditError, match="not empty"):
        explorer.edit(PLAIN).write(out)
    assert [p.name for p in out.iterdir()] == ["mine.txt"]


def test_a_failed_write_removes_only_what_it_created(tmp_path, monkeypatch):
    from explorer.editing import flink

    def boom(*a, **k):
        raise RuntimeError("disk full")

    out = tmp_path / "empty"
    out.mkdir()
    # (the header is written into a keyed stream's file once it is open: a stream written in part is removed too)
    monkeypatch.setattr(flink._OperatorEntries, "header", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        explorer.edit(PLAIN).write(out)
    assert out.is_dir() and not list(out.iterdir())  # (the folder was the user's: kept, empty)
    with pytest.raises(RuntimeError, match="disk full"):
        explorer.edit(PLAIN).write(tmp_path / "new")
    assert not (tmp_path / "new").exists()


def test_unknown_operators_and_states_are_refused_naming_what_there_is():
    ed = explorer.edit(PLAIN)
    with pytest.raises(explorer.EditError, match="no operator 'nope'.*user-activity"):
        ed.drop_operator("nope")
    with pytest.raises(explorer.EditError, match="no keyed state 'nope'.*per_category"):
        ed.drop_state(operator="user-activity", state="nope")
    ed.rename_operator("user-activity", "x")
    with pytest.raises(explorer.EditError, match="no operator 'user-activity'"):
        ed.drop_keys(operator="user-activity", keys=["user-00"])
    with pytest.raises(explorer.EditError, match="parallelism"):
        ed.with_max_parallelism(1)
    with pytest.raises(explorer.EditError, match="another operator"):
        ed.rename_operator("x", "category-windows")


@pytest.mark.parametrize("name", ["rocksdb-native-savepoint", "heap-native-savepoint", "rocksdb-incremental-checkpoint"])
def test_snapshots_that_are_not_canonical_savepoints_are_refused(name):
    with pytest.raises(explorer.EditError, match="canonical"):
        explorer.edit(FLINK / name)


def test_keys_whose_java_hash_is_not_reproduced_cannot_change_key_group(tmp_path):
    src = FLINK / "production" / "sql-heap-canonical-savepoint"
    with pytest.raises(explorer.EditError, match="Java hashCode"):
        explorer.edit(src).with_max_parallelism(256).write(tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_map_values_and_update_write_values_that_read_back_as_given(tmp_path):
    out = (explorer.edit(PLAIN)
           .map_values(operator="user-activity", state="total", fn=lambda r: r["value"] * 2)
           .map_values(operator="user-activity", state="amounts", fn=lambda r: r["value"] + r["user_key"])
           .update(operator="user-activity", state="per_category", key="user-00", user_key="books", value=999)
           .map_values(operator="category-windows", state="window-contents", fn=lambda r: r["value"] + 1)
           .write(tmp_path / "out"))
    a, b = _open(PLAIN), _open(out)
    for state, change in [("total", lambda r: r["value"] * 2), ("amounts", lambda r: r["value"] + r["user_key"]),
                          ("per_category", lambda r: 999 if (r["key"], r["user_key"]) == ("user-00", "books") else r["value"])]:
        x = a.keyed_state(operator="user-activity", state=state)
        x["value"] = [change(r) for r in x.to_dict("records")]
        y = b.keyed_state(operator="user-activity", state=state)
        cols = ["key", "user_key", "value"]
        assert sorted(map(tuple, x[cols].values.tolist())) == sorted(map(tuple, y[cols].values.tolist()))
    w = a.keyed_state(operator="category-windows", state="window-contents")["value"].sum()
    assert b.keyed_state(operator="category-windows", state="window-contents")["value"].sum() == w + 45


def test_strings_are_encoded_as_flinks_string_serializer():
    from explorer.editing.values import encode
    from explorer.readers.flink.datainput import DataInput

    reader = explorer.edit(PLAIN).reader
    op = next(o for o in reader.meta.operators if o.uid == "user-activity")
    dec = reader.keyed_header(op, op.subtasks[0]).key_decoder  # (the job's String keys: the reader's decoder)
    for s in ["", "books", "ユーザー-🔥", "a\x00b", None]:
        assert dec.read(DataInput(encode(dec, s, "t"), bounded=True)) == s
    assert encode(dec, "ab", "t") == bytes([3, ord("a"), ord("b")])


def test_values_the_writer_cannot_encode_exactly_are_refused(tmp_path):
    def refused(ed, match):
        with pytest.raises(explorer.EditError, match=match):
            ed.write(tmp_path / "out")
        assert not (tmp_path / "out").exists()

    refused(explorer.edit(PLAIN).map_values(operator="user-activity", state="total", fn=lambda r: r["value"] + 0.5),
            "cannot encode 1152.5 as Long")
    refused(explorer.edit(PLAIN).map_values(operator="user-activity", state="total", fn=lambda r: 2**63),
            "cannot encode")
    # a POJO is written from exactly its recorded fields (a typo is not a new field)
    refused(explorer.edit(PLAIN).map_values(operator="user-activity", state="stats",
                                            fn=lambda r: {**r["value"], "lastCategroy": "x"}),
            r"cannot encode .* as POJO .*Stats exactly \(POJO .*Stats is written from a dict of exactly its recorded fields")
    refused(explorer.edit(PLAIN).map_values(operator="user-activity", state="stats", fn=lambda r: {**r["value"], "count": 1.5}),
            "cannot encode .* as POJO")
    # a last access is for TTL states only
    refused(explorer.edit(PLAIN).map_values(operator="user-activity", state="total", fn=lambda r: 1, last_access=0),
            "has no TTL")
    refused(explorer.edit(PLAIN).update(operator="user-activity", state="total", key="nobody", value=1), "no row of key 'nobody'")


def test_master_states_are_kept_byte_for_byte(tmp_path):
    """A savepoint with a master hook's state (opaque to State Explorer): an edited copy carries it unchanged."""
    import shutil
    import struct

    src = tmp_path / "with-master"
    shutil.copytree(PLAIN, src)
    data = (src / "_metadata").read_bytes()
    assert data[16:20] == b"\x00\x00\x00\x00"  # magic, version, checkpoint id, then no master states
    name = "pravega-reader-group".encode()
    content = struct.pack(">iH", 1, len(name)) + name + struct.pack(">i", 5) + b"\x01\x02\xff\x00\x7f"
    master = struct.pack(">ii", 0xC96B1696 - 2**32, len(content)) + content
    (src / "_metadata").write_bytes(data[:16] + struct.pack(">i", 1) + master + data[20:])
    out = explorer.edit(src).drop_keys(operator="user-activity", keys=["user-00"]).write(tmp_path / "out")
    written = (out / "_metadata").read_bytes()
    assert written[16:20 + len(master)] == struct.pack(">i", 1) + master
    assert explorer.open(out).reader.meta.master_states == 1


@pytest.mark.parametrize("src", [PLAIN, COMPRESSED], ids=lambda p: p.name)
def test_a_write_streams_key_groups_and_writes_what_holding_the_operator_wrote(src, tmp_path, monkeypatch):
    from explorer.editing import flink
    from explorer.readers.flink.handles import HandleResolver

    op = "user-activity" if src == PLAIN else "user-state"
    keys = sorted(set(_open(src).keyed_state(operator=op)["key"]))[:3]
    with monkeypatch.context() as m:  # every operator's entries held at once, as a new max parallelism holds them
        m.setattr(flink, "_covers", lambda st, rng: False)
        held = explorer.edit(src).drop_keys(operator=op, keys=keys).write(tmp_path / "held")
    asked, read = [], HandleResolver.read_key_groups

    def spy(self, handle, offsets, first_kg, header_end, key_groups, head=None):
        asked.append(key_groups)
        return read(self, handle, offsets, first_kg, header_end, key_groups, head)

    monkeypatch.setattr(HandleResolver, "read_key_groups", spy)
    monkeypatch.setattr(flink, "READ_CHUNK", 1)  # every key group read alone
    out = explorer.edit(src, memory_budget="64MB").drop_keys(operator=op, keys=keys).write(tmp_path / "out")
    assert asked and all(k is not None and len(k) == 1 for k in asked)  # never a whole stream at once
    assert _digest(out) == _digest(held)


def test_what_a_write_must_hold_is_checked_against_the_memory_budget_first(tmp_path, monkeypatch):
    from explorer.editing import flink
    from explorer.errors import SnapshotTooLargeError

    monkeypatch.setattr(flink, "HELD_BYTES_PER_BYTE", 1 << 20)  # a key group of 17 bytes is past a 16 MB budget
    with pytest.raises(SnapshotTooLargeError, match=r"key group \d+ of subtask \d.*memory_budget='\d+[MG]B'"):
        explorer.edit(PLAIN, memory_budget="16MB").drop_keys(operator="user-activity", keys=["user-00"]).write(
            tmp_path / "a")
    assert not (tmp_path / "a").exists()
    with pytest.raises(SnapshotTooLargeError, match=r"key group \d+ of (subtask \d|max parallelism 256)"):
        explorer.edit(PLAIN, memory_budget="16MB").with_max_parallelism(256).write(tmp_path / "b")
    assert not (tmp_path / "b").exists()
    monkeypatch.setattr(flink, "HELD_BYTES_PER_BYTE", 6)
    explorer.edit(PLAIN, memory_budget="16MB").with_max_parallelism(256).write(tmp_path / "c")  # admitted


@pytest.mark.parametrize("max_parallelism", [256, 4096])
def test_keys_moved_to_a_new_max_parallelism_are_held_a_budget_at_a_time(max_parallelism, tmp_path, monkeypatch):
    from explorer.editing import flink
    from explorer.format import budget

    whole = _digest(explorer.edit(HEAP).with_max_parallelism(max_parallelism).write(tmp_path / "whole"))
    monkeypatch.setattr(budget, "FLOOR", 1)  # (budgets of kilobytes, as the fixture is small)
    monkeypatch.setattr(flink, "READ_CHUNK", 1)
    loads, load = [], flink._OperatorEntries._load
    monkeypatch.setattr(flink._OperatorEntries, "_load", lambda self, r: (loads.append((self.op.uid, r)), load(self, r)))
    out = explorer.edit(HEAP, memory_budget=400_000).with_max_parallelism(max_parallelism).write(tmp_path / "out")
    assert len([r for uid, r in loads if uid == "user-state"]) > 2  # several passes, each within the budget
    assert _digest(out) == whole
