"""What only the RocksDB backend has: its byte layout, native checkpoints, restore, lifecycle.

The state semantics themselves are in ``test_state_semantics.py`` (both backends).
"""

from __future__ import annotations

import dataclasses
import os
import struct
from dataclasses import dataclass

import pytest

from explorer.engine.backends.rocksdb import RocksDBStateBackend
from explorer.engine.clock import ManualClock
from explorer.engine.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from explorer.engine.ttl import CleanupStrategies, RocksDBCompactionCleanup, StateTtlConfig
from explorer.errors import RestoreError, SerializationError, SnapshotFormatError, StateMigrationError
from explorer.format.keycodec import encode_key
from explorer.format.types import type_info
from explorer.keygroups import KeyGroupRange, assign_to_key_group

TS = struct.Struct(">q")


@dataclass
class Order:
    item: str
    qty: int


def raw_entries(backend, name):
    return list(backend.tables[name]._scan(b"", None))


def put_value(backend, key, value, name="v", type_=int, ttl=None, ns=None):
    st = backend.get_state(ValueStateDescriptor(name, type_, ttl=ttl))
    kg = assign_to_key_group(key, backend.max_parallelism)
    backend.set_current_key(key, kg, ns)
    st.update(value)
    return kg


# --- layout -----------------------------------------------------------------------------------------
def test_value_layout_with_one_byte_key_group_prefix(make_backend):
    b = make_backend("rocksdb", max_parallelism=128)
    kg = put_value(b, "alice", 42, ns="w")
    assert raw_entries(b, "v") == [(bytes([kg]) + encode_key("alice") + encode_key("w"), type_info(int).to_bytes(42))]


def test_two_byte_key_group_prefix_above_128(make_backend):
    b = make_backend("rocksdb", max_parallelism=129)
    kg = put_value(b, 7, 1)
    (raw_key, _), = raw_entries(b, "v")
    assert raw_key == kg.to_bytes(2, "big") + encode_key(7) + encode_key(None)


def test_ttl_values_start_with_the_big_endian_timestamp(make_backend, clock):
    b = make_backend("rocksdb")
    put_value(b, "alice", Order("tea", 2), type_=Order, ttl=StateTtlConfig(1000))
    (_, raw), = raw_entries(b, "v")
    assert raw == TS.pack(clock.now_ms()) + type_info(Order).to_bytes(Order("tea", 2))


def test_list_layout_is_delimited_elements(make_backend, clock):
    b = make_backend("rocksdb")
    st = b.get_state(ListStateDescriptor("l", str, ttl=StateTtlConfig(1000)))
    b.set_current_key("k", 1)
    t0 = clock.now_ms()
    st.add("a")
    clock.advance(5)
    st.add_all(["b", "c"])
    (_, raw), = raw_entries(b, "l")
    s = type_info(str).to_bytes
    assert raw == b",".join([TS.pack(t0) + s("a"), TS.pack(t0 + 5) + s("b"), TS.pack(t0 + 5) + s("c")])


def test_map_layout_one_entry_per_user_key_with_null_flag(make_backend):
    b = make_backend("rocksdb")
    st = b.get_state(MapStateDescriptor("m", int, str))
    b.set_current_key("k", 1)
    st[2] = "two"
    st[1] = None
    prefix = bytes([1]) + encode_key("k") + encode_key(None)
    assert raw_entries(b, "m") == [
        (prefix + encode_key(1), b"\x00"),
        (prefix + encode_key(2), b"\x01" + type_info(str).to_bytes("two")),
    ]
    assert st.items() == [(1, None), (2, "two")]  # a prefix scan, in user-key order


def test_one_column_family_per_state_and_metadata_in_default(make_backend, tmp_path):
    b = make_backend("rocksdb", path=tmp_path / "db")
    put_value(b, "a", 1, name="first")
    put_value(b, "a", 1, name="second")
    b.close()
    from rocksdict import Options, Rdict

    assert set(Rdict.list_cf(str(tmp_path / "db"), Options(raw_mode=True))) == {"default", "first", "second"}


# --- errors -------------------------------------------------------------------------------------------
def test_values_that_pass_the_type_check_but_cannot_be_encoded_name_the_state(make_backend):
    b = make_backend("rocksdb")
    st = b.get_state(ValueStateDescriptor("nums", list[int]))
    b.set_current_key("k", 1)
    with pytest.raises(SerializationError, match="nums"):
        st.update([1, 2, 3, "four"])  # the type check samples the first elements only
    assert raw_entries(b, "nums") == []


def _id(value) -> str:
    """The repr of a case, without the address of a bare object() (the same id in every xdist worker)."""
    return "object()" if type(value) is object else repr(value)


@pytest.mark.parametrize("key", [["list"], {"a": 1}, 2**64, object()], ids=_id)
def test_unencodable_keys_name_the_state(make_backend, key):
    b = make_backend("rocksdb")
    st = b.get_state(ValueStateDescriptor("by-key", int))
    b.set_current_key(key, 1)
    with pytest.raises(SerializationError, match="by-key"):
        st.update(1)


# --- TTL background sweep ---------------------------------------------------------------------------------
def test_background_cleanup_can_be_turned_off(make_backend, clock):
    b = make_backend("rocksdb")
    put_value(b, "a", 1, name="off", ttl=StateTtlConfig(10, cleanup=CleanupStrategies(in_background=False)))
    put_value(b, "a", 1, name="on", ttl=StateTtlConfig(10))
    clock.advance(10)
    assert b.background_cleanup() == 1
    assert raw_entries(b, "on") == [] and len(raw_entries(b, "off")) == 1


class CountingClock(ManualClock):
    def __init__(self, start_ms):
        super().__init__(start_ms)
        self.reads = 0

    def now_ms(self):
        self.reads += 1
        return super().now_ms()


def test_background_cleanup_rereads_the_clock_like_the_compaction_filter(make_backend):
    clock = CountingClock(1_000)
    b = make_backend("rocksdb", clock_=clock)
    cleanup = CleanupStrategies(rocksdb_compaction=RocksDBCompactionCleanup(query_time_after_num_entries=2))
    st = b.get_state(ValueStateDescriptor("v", int, ttl=StateTtlConfig(10, cleanup=cleanup)))
    for i in range(6):
        b.set_current_key(f"k{i}", i)
        st.update(i)
    clock.set(1_010)
    clock.reads = 0
    assert b.background_cleanup() == 6
    assert clock.reads == 1 + 6 // 2


# --- native checkpoints and restore -------------------------------------------------------------------------
def populate(b, n=60):
    v = b.get_state(ValueStateDescriptor("orders", Order))
    m = b.get_state(MapStateDescriptor("seen", str, int))
    for i in range(n):
        key = f"user-{i}"
        b.set_current_key(key, assign_to_key_group(key, b.max_parallelism))
        v.update(Order(f"item-{i}", i))
        m[f"x{i % 3}"] = i


def plain(row):
    """A row with dataclass values as dicts (how restored state reads before registration)."""
    v = row[4]
    return repr(row[:4] + (dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v,) + row[5:])


def rows(b, key_groups=None):
    return {name: sorted(map(plain, t.rows(key_groups))) for name, t in b.tables.items()}


def test_native_checkpoint_hard_links_ssts_and_restores(make_backend, tmp_path, clock):
    b = make_backend("rocksdb", path=tmp_path / "live")
    populate(b)
    names = b.native_checkpoint(tmp_path / "chk-1")
    ssts = [n for n in names if n.endswith(".sst")]
    assert ssts and "CURRENT" in names and any(n.startswith("MANIFEST-") for n in names)
    assert all(os.stat(tmp_path / "chk-1" / n).st_nlink >= 2 for n in ssts)  # shared with the live DB
    with pytest.raises(FileExistsError):
        b.native_checkpoint(tmp_path / "chk-1")
    before = {n: (tmp_path / "chk-1" / n).read_bytes() for n in names if not n.endswith(".log")}

    r = RocksDBStateBackend.restore_native(tmp_path / "chk-1", 128, KeyGroupRange(0, 127), clock, tmp_path / "restored")
    try:
        assert rows(r) == rows(b)
        populate(r, 80)  # writing to the restored instance...
        r.flush()
    finally:
        r.close()
    after = {n: (tmp_path / "chk-1" / n).read_bytes() for n in names if not n.endswith(".log")}
    assert after == before  # ...never touches the checkpoint


def test_a_second_checkpoint_reuses_unchanged_sst_files(make_backend, tmp_path):
    b = make_backend("rocksdb")
    populate(b)
    first = {n for n in b.native_checkpoint(tmp_path / "chk-1") if n.endswith(".sst")}
    b.set_current_key("late", 3)
    b.get_state(ValueStateDescriptor("orders", Order)).update(Order("late", 1))
    second = {n for n in b.native_checkpoint(tmp_path / "chk-2") if n.endswith(".sst")}
    assert first <= second and second - first  # only the new SST would need uploading


def test_restore_clips_to_the_new_key_group_range(make_backend, tmp_path, clock):
    b = make_backend("rocksdb")
    populate(b)
    b.native_checkpoint(tmp_path / "chk")
    half = KeyGroupRange(0, 63)
    r = RocksDBStateBackend.restore_native(tmp_path / "chk", 128, half, clock, tmp_path / "half")
    try:
        for name, table in r.tables.items():
            got = list(table.rows())
            assert got and all(row[0] <= 63 for row in got)
            assert sorted(map(plain, got)) == rows(b, half)[name]
    finally:
        r.close()


def test_restored_states_decode_without_classes_until_registered(make_backend, tmp_path, clock):
    b = make_backend("rocksdb")
    populate(b, 3)
    b.native_checkpoint(tmp_path / "chk")
    r = RocksDBStateBackend.restore_native(tmp_path / "chk", 128, KeyGroupRange(0, 127), clock, tmp_path / "r")
    try:
        assert set(r.tables) == {"orders", "seen"}
        assert {row[4]["item"] for row in r.tables["orders"].rows()} == {"item-0", "item-1", "item-2"}
        st = r.get_state(ValueStateDescriptor("orders", Order))
        r.set_current_key("user-1", assign_to_key_group("user-1", 128))
        assert st.value() == Order("item-1", 1)
        assert all(isinstance(row[4], Order) for row in r.tables["orders"].rows())
        with pytest.raises(StateMigrationError, match="orders"):
            r.get_state(ValueStateDescriptor("orders", int))
    finally:
        r.close()


def test_restore_refuses_a_changed_kind_or_max_parallelism(make_backend, tmp_path, clock):
    b = make_backend("rocksdb")
    populate(b, 3)
    b.native_checkpoint(tmp_path / "chk")
    with pytest.raises(RestoreError, match="max parallelism 128"):
        RocksDBStateBackend.restore_native(tmp_path / "chk", 256, KeyGroupRange(0, 255), clock, tmp_path / "r1")
    r = RocksDBStateBackend.restore_native(tmp_path / "chk", 128, KeyGroupRange(0, 127), clock, tmp_path / "r2")
    try:
        with pytest.raises(StateMigrationError, match="orders"):
            r.get_state(ListStateDescriptor("orders", Order))
    finally:
        r.close()
    with pytest.raises(RestoreError, match="not a RocksDB checkpoint"):
        RocksDBStateBackend.restore_native(tmp_path, 128, KeyGroupRange(0, 127), clock, tmp_path / "r3")


def test_an_unknown_format_version_fails_loudly(make_backend, tmp_path, clock):
    b = make_backend("rocksdb", path=tmp_path / "db")
    b._db.put(b"\xffexplorer/format", b'{"format": "state-explorer-rocksdb", "version": 99}')
    b.close()
    with pytest.raises(SnapshotFormatError, match="version 99"):
        RocksDBStateBackend(128, KeyGroupRange(0, 127), clock, tmp_path / "db", fresh=False)


# --- lifecycle --------------------------------------------------------------------------------------------------
def test_close_persists_and_releases_the_database(make_backend, tmp_path, clock):
    b = make_backend("rocksdb", path=tmp_path / "db")
    populate(b, 10)
    expected = rows(b)
    b.close()
    b.close()  # idempotent
    again = RocksDBStateBackend(128, KeyGroupRange(0, 127), clock, tmp_path / "db", fresh=False)
    try:
        assert rows(again) == expected  # flushed on close although the WAL is off
    finally:
        again.close()


def test_a_closed_backend_can_still_be_read(make_backend, tmp_path, clock):
    b = make_backend("rocksdb", path=tmp_path / "db")
    populate(b, 10)
    expected = rows(b)
    b.close()
    assert rows(b) == expected  # reopened read-only
    assert b.tables["orders"].entries_per_key_group()
    b.set_current_key("user-1", assign_to_key_group("user-1", 128))
    with pytest.raises(Exception, match="read only"):
        b.get_state(ValueStateDescriptor("orders", Order)).update(Order("x", 1))
    b.close()  # releases the read-only handle too
    RocksDBStateBackend(128, KeyGroupRange(0, 127), clock, tmp_path / "db", fresh=False).close()


def test_a_fresh_backend_wipes_a_previous_instance_but_nothing_else(make_backend, tmp_path, clock):
    b = make_backend("rocksdb", path=tmp_path / "db")
    populate(b, 5)
    b.close()
    fresh = make_backend("rocksdb", path=tmp_path / "db")
    assert fresh.tables == {}
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "important.txt").write_text("keep me")
    with pytest.raises(RestoreError, match="not a RocksDB directory"):
        RocksDBStateBackend(128, KeyGroupRange(0, 127), clock, tmp_path / "notes")
    assert (tmp_path / "notes" / "important.txt").read_text() == "keep me"
