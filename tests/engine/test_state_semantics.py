"""Keyed state semantics, one suite over both backends.

Every test that takes ``backend`` (or ``backend_kind``) runs on the heap and
on the RocksDB backend unchanged: the semantics live once in
``explorer.engine.state`` and a backend only stores, so any difference here is
a storage bug. Time is a ManualClock; nothing sleeps.

The TTL visibility tests turn background cleanup off
(``CleanupStrategies(in_background=False)``): with it on, the heap backend's
incremental cleanup runs on every state access *before* the read (as Flink's
``TtlIncrementalCleanup`` does), so an expired value can vanish before a
``RETURN_EXPIRED_IF_NOT_CLEANED_UP`` read sees it. Incremental and background
cleanup have their own tests below.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional

import pytest

from explorer.engine.clock import ManualClock
from explorer.engine.datastream import StreamEnvironment
from explorer.engine.functions import KeyedProcessFunction
from explorer.engine.state import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from explorer.engine.ttl import CleanupStrategies, IncrementalCleanup, StateTtlConfig, StateVisibility, UpdateType
from explorer.errors import SerializationError, StateMigrationError, StateNotDeclaredError
from explorer.keygroups import KeyGroupRange, assign_to_key_group

TTL = 1_000
NO_BACKGROUND = CleanupStrategies(in_background=False)


# --- types used as state values ---------------------------------------------------------------
@dataclass
class Event:
    name: str
    amount: int
    tag: Optional[str] = None


@dataclass
class Stats:
    count: int
    total: float


class Average(AggregateFunction):
    """Mean with a tuple accumulator (sum, count)."""

    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1]

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


class StatsAggregate(AggregateFunction):
    """Count and total with a dataclass accumulator."""

    def create_accumulator(self):
        return Stats(0, 0.0)

    def add(self, value, acc):
        return Stats(acc.count + 1, acc.total + value)

    def get_result(self, acc):
        return (acc.count, acc.total)

    def merge(self, a, b):
        return Stats(a.count + b.count, a.total + b.total)


class Sum(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, acc):
        return acc + value

    def get_result(self, acc):
        return acc

    def merge(self, a, b):
        return a + b


def concat(a: str, b: str) -> str:
    return a + b


def add(a: int, b: int) -> int:
    return a + b


# --- every state kind -----------------------------------------------------------------------------
def test_value_state(backend, keyed):
    st = backend.get_state(ValueStateDescriptor("count", int))
    keyed(backend, "alice")
    assert st.value() is None
    assert st.value(7) == 7
    st.update(3)
    assert st.value() == 3
    assert st.value(7) == 3
    st.update(0)  # a falsy value is a value
    assert st.value(7) == 0
    st.clear()
    assert st.value() is None
    st.update(5)
    st.update(None)  # update(None) clears, as in Flink
    assert st.value(-1) == -1
    assert list(backend.tables["count"].rows()) == []


def test_list_state(backend, keyed):
    st = backend.get_state(ListStateDescriptor("events", str))
    keyed(backend, "alice")
    assert st.get() == []
    st.add("a")
    st.add_all(["b", "c"])
    st.add_all([])
    assert st.get() == ["a", "b", "c"]
    assert list(st) == ["a", "b", "c"]
    st.add("a")  # duplicates and order are kept
    assert st.get() == ["a", "b", "c", "a"]
    st.update(["x", "y"])
    assert st.get() == ["x", "y"]
    st.update([])
    assert st.get() == []
    st.add("z")
    st.clear()
    assert st.get() == []
    with pytest.raises(SerializationError, match="events"):
        st.add(None)
    with pytest.raises(SerializationError, match="events"):
        st.add_all(["ok", None])
    assert st.get() == []  # a rejected add_all stores nothing


def test_map_state(backend, keyed):
    st = backend.get_state(MapStateDescriptor("merchants", str, int))
    keyed(backend, "alice")
    assert st.is_empty() and len(st) == 0
    assert st.get("shop") is None and st.get("shop", 0) == 0
    with pytest.raises(KeyError):
        st["shop"]
    st.put("shop", 1)
    st["cafe"] = 2
    st.put_all({"bar": 3, "deli": 4})
    assert st.get("shop") == 1 and st["cafe"] == 2
    assert st.contains("bar") and "deli" in st and "nope" not in st
    assert dict(st.items()) == {"shop": 1, "cafe": 2, "bar": 3, "deli": 4}
    assert sorted(st.keys()) == ["bar", "cafe", "deli", "shop"]
    assert sorted(st.values()) == [1, 2, 3, 4]
    assert sorted(st) == ["bar", "cafe", "deli", "shop"]
    assert len(st) == 4 and not st.is_empty()
    st["shop"] = 10  # overwrite
    assert st["shop"] == 10 and len(st) == 4
    st.remove("cafe")
    st.remove("never-there")  # removing a missing key is fine
    del st["bar"]
    with pytest.raises(KeyError):
        del st["bar"]
    assert dict(st.items()) == {"shop": 10, "deli": 4}
    st.put("nothing", None)  # Flink allows null map values
    assert "nothing" in st and st.get("nothing", 99) is None and len(st) == 3
    st.clear()
    assert st.is_empty() and dict(st.items()) == {}
    assert list(backend.tables["merchants"].rows()) == []


def test_reducing_state_folds_in_order(backend, keyed):
    st = backend.get_state(ReducingStateDescriptor("word", concat, str))
    keyed(backend, "alice")
    assert st.get() is None and st.get("") == ""
    for part in ["ab", "c", "de"]:
        st.add(part)
    assert st.get() == "abcde"  # reduce(old, new), never reduce(new, old)
    st.clear()
    st.add("z")
    assert st.get() == "z"


def test_aggregating_state_tuple_accumulator(backend, keyed):
    st = backend.get_state(AggregatingStateDescriptor("avg", Average(), tuple[int, int]))
    keyed(backend, "alice")
    assert st.get() is None and st.get(0.0) == 0.0
    for v in [1, 2, 6]:
        st.add(v)
    assert st.get() == 3.0
    assert [r[4] for r in backend.tables["avg"].rows()] == [(9, 3)]  # the accumulator is what is stored


def test_aggregating_state_dataclass_accumulator(backend, keyed):
    st = backend.get_state(AggregatingStateDescriptor("stats", StatsAggregate(), Stats))
    keyed(backend, "bob")
    st.add(1.5)
    st.add(2.5)
    assert st.get() == (2, 4.0)
    assert [r[4] for r in backend.tables["stats"].rows()] == [Stats(2, 4.0)]


def test_state_outside_keyed_context_fails(backend):
    st = backend.get_state(ValueStateDescriptor("count", int))
    with pytest.raises(StateNotDeclaredError, match="count"):
        st.value()


# --- isolation ----------------------------------------------------------------------------------
def _two_keys_in_one_key_group(max_parallelism: int = 128) -> tuple[str, str, int]:
    seen: dict[int, str] = {}
    for i in itertools.count():
        k = f"k{i}"
        kg = assign_to_key_group(k, max_parallelism)
        if kg in seen:
            return seen[kg], k, kg
        seen[kg] = k
    raise AssertionError  # pragma: no cover


def test_namespaces_are_isolated(backend, keyed):
    v = backend.get_state(ValueStateDescriptor("v", int))
    lst = backend.get_state(ListStateDescriptor("l", int))
    m = backend.get_state(MapStateDescriptor("m", str, int))
    for ns, n in [(None, 1), ("window-1", 2), (("w", 2), 3), (10, 4)]:
        keyed(backend, "alice", ns)
        v.update(n)
        lst.add(n)
        m["x"] = n
    keyed(backend, "alice", "window-1")
    assert (v.value(), lst.get(), m["x"]) == (2, [2], 2)
    v.clear()
    lst.clear()
    m.clear()
    for ns, n in [(None, 1), (("w", 2), 3), (10, 4)]:
        keyed(backend, "alice", ns)
        assert (v.value(), lst.get(), m["x"]) == (n, [n], n)
    keyed(backend, "alice", "window-1")
    assert (v.value(), lst.get(), m.items()) == (None, [], [])


def test_keys_are_isolated_within_a_key_group(backend):
    k1, k2, kg = _two_keys_in_one_key_group(backend.max_parallelism)
    v = backend.get_state(ValueStateDescriptor("v", str))
    m = backend.get_state(MapStateDescriptor("m", str, str))
    backend.set_current_key(k1, kg)
    v.update("one")
    m["a"] = "one"
    backend.set_current_key(k2, kg)
    assert v.value() is None and m.is_empty()
    v.update("two")
    m["b"] = "two"
    m.clear()
    backend.set_current_key(k1, kg)
    assert v.value() == "one" and dict(m.items()) == {"a": "one"}
    assert backend.tables["v"].entries_per_key_group() == {kg: 2}


def test_key_groups_are_isolated(backend):
    """The same key under two key groups is two addresses (a key group is part of the address)."""
    v = backend.get_state(ValueStateDescriptor("v", int))
    lst = backend.get_state(ListStateDescriptor("l", int))
    backend.set_current_key("alice", 3)
    v.update(3)
    lst.add(3)
    backend.set_current_key("alice", 100)
    assert v.value() is None and lst.get() == []
    v.update(100)
    backend.set_current_key("alice", 3)
    assert v.value() == 3
    assert [r[0] for r in backend.tables["v"].rows()] == [3, 100]
    assert [r[0] for r in backend.tables["v"].rows(KeyGroupRange(50, 127))] == [100]


def test_keys_of_different_types_are_different_keys(backend):
    v = backend.get_state(ValueStateDescriptor("v", str))
    for key in [1, "1", (1,), 1.5, b"1", (1, "a")]:
        backend.set_current_key(key, 7)
        v.update(repr(key))
    for key in [1, "1", (1,), 1.5, b"1", (1, "a")]:
        backend.set_current_key(key, 7)
        assert v.value() == repr(key)
    assert sorted(r[4] for r in backend.tables["v"].rows()) == sorted(
        repr(k) for k in [1, "1", (1,), 1.5, b"1", (1, "a")]
    )


# --- declared types ------------------------------------------------------------------------------
def test_dataclass_values(backend, keyed):
    st = backend.get_state(ValueStateDescriptor("last", Event))
    keyed(backend, "alice")
    st.update(Event("pay", 10))
    got = st.value()
    assert got == Event("pay", 10, None) and isinstance(got, Event)
    st.update(Event("refund", -3, "late"))
    assert st.value() == Event("refund", -3, "late")


@pytest.mark.parametrize(
    ("declared", "value"),
    [
        (list[Event], [Event("a", 1), Event("b", 2, "x")]),
        (dict[str, list[int]], {"x": [1, 2], "y": [], "z": [-5]}),
        (tuple[str, int], ("k", 42)),
        (Optional[int], 5),
        (list[Optional[int]], [1, None, 3]),
        (tuple[float, bool, bytes], (1.25, True, b"\x00\xff")),
        (dict[int, Event], {1: Event("a", 1), -2: Event("b", 2, "t")}),
        (str, "日本語 \x00 text"),
    ],
    ids=lambda x: getattr(x, "__name__", None) or str(x)[:20],
)
def test_nested_types_round_trip(backend, keyed, declared, value):
    v = backend.get_state(ValueStateDescriptor("v", declared))
    lst = backend.get_state(ListStateDescriptor("l", declared))
    m = backend.get_state(MapStateDescriptor("m", str, declared))
    keyed(backend, ("tuple", 1))
    v.update(value)
    lst.add_all([value, value])
    m["k"] = value
    assert v.value() == value
    assert lst.get() == [value, value]
    assert m["k"] == value


@pytest.mark.parametrize(
    ("descriptor", "use"),
    [
        (ValueStateDescriptor("wrong-value", int), lambda st: st.update("three")),
        (ValueStateDescriptor("wrong-event", Event), lambda st: st.update({"name": "a", "amount": 1})),
        (ListStateDescriptor("wrong-list", int), lambda st: st.add(1.5)),
        (ListStateDescriptor("wrong-list-all", str), lambda st: st.add_all(["a", 2])),
        (ListStateDescriptor("wrong-list-update", str), lambda st: st.update(["a", 2])),
        (MapStateDescriptor("wrong-map-key", str, int), lambda st: st.put(1, 1)),
        (MapStateDescriptor("wrong-map-value", str, int), lambda st: st.put("a", "b")),
        (MapStateDescriptor("none-map-key", str, int), lambda st: st.put(None, 1)),
        (ReducingStateDescriptor("wrong-reduce", add, int), lambda st: st.add("x")),
        (ValueStateDescriptor("wrong-tuple", tuple[str, int]), lambda st: st.update(("a",))),
    ],
    ids=lambda x: x.name if hasattr(x, "name") else "",
)
def test_type_errors_name_the_state(backend, keyed, descriptor, use):
    st = backend.get_state(descriptor)
    keyed(backend, "alice")
    with pytest.raises(SerializationError, match=descriptor.name):
        use(st)
    assert list(backend.tables[descriptor.name].rows()) == []


# --- TTL ------------------------------------------------------------------------------------------
UPDATE_TYPES = list(UpdateType)
VISIBILITIES = list(StateVisibility)
KINDS = ["value", "list", "map", "reducing", "aggregating"]


def _ttl(update_type=UpdateType.ON_CREATE_AND_WRITE, visibility=StateVisibility.NEVER_RETURN_EXPIRED,
         cleanup=NO_BACKGROUND) -> StateTtlConfig:
    return StateTtlConfig(TTL, update_type=update_type, visibility=visibility, cleanup=cleanup)


class Adapter:
    """Write one value / read it back, the same way for every state kind."""

    def __init__(self, backend, kind: str, ttl: StateTtlConfig) -> None:
        self.kind = kind
        if kind == "value":
            d = ValueStateDescriptor("s", int, ttl=ttl)
        elif kind == "list":
            d = ListStateDescriptor("s", int, ttl=ttl)
        elif kind == "map":
            d = MapStateDescriptor("s", str, int, ttl=ttl)
        elif kind == "reducing":
            d = ReducingStateDescriptor("s", add, int, ttl=ttl)
        else:
            d = AggregatingStateDescriptor("s", Sum(), int, ttl=ttl)
        self.state = backend.get_state(d)
        self.table = backend.tables["s"]

    def write(self, v: int) -> None:
        st = self.state
        if self.kind == "value":
            st.update(v)
        elif self.kind == "map":
            st.put("k", v)
        else:  # list, reducing, aggregating all add
            st.add(v)

    def read(self):
        """The visible value, or None."""
        st = self.state
        if self.kind == "value":
            return st.value()
        if self.kind == "list":
            got = st.get()
            return got[0] if got else None
        if self.kind == "map":
            return st.get("k")
        return st.get()

    def last_access(self) -> list[int]:
        return [r[5] for r in self.table.rows()]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("visibility", VISIBILITIES, ids=lambda v: v.name)
@pytest.mark.parametrize("update_type", UPDATE_TYPES, ids=lambda u: u.name)
def test_ttl_boundary_and_read_refresh(backend, keyed, clock, kind, visibility, update_type):
    """Alive at last_access + ttl - 1, expired at last_access + ttl; reads refresh only ON_READ_AND_WRITE."""
    a = Adapter(backend, kind, _ttl(update_type, visibility))
    keyed(backend, "alice")
    t0 = clock.now_ms()
    a.write(5)
    assert a.last_access() == [t0]

    clock.set(t0 + TTL - 1)
    assert a.read() == 5  # alive one millisecond before the boundary
    refreshed = update_type is UpdateType.ON_READ_AND_WRITE
    assert a.last_access() == [t0 + TTL - 1 if refreshed else t0]

    clock.set(t0 + TTL)  # exactly last_access + ttl of the original write
    if refreshed:
        assert a.read() == 5
        assert a.last_access() == [t0 + TTL]
        clock.set(t0 + 2 * TTL - 1)
        assert a.read() == 5
        clock.set(t0 + 3 * TTL - 1)  # last access was t0 + 2*TTL - 1
    got = a.read()
    if visibility is StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP:
        assert got == 5  # expired, but not cleaned up yet: returned once...
    else:
        assert got is None
    assert a.last_access() == []  # ...and that read cleaned it up
    assert a.read() is None


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("update_type", UPDATE_TYPES, ids=lambda u: u.name)
def test_ttl_writes_refresh(backend, keyed, clock, kind, update_type):
    a = Adapter(backend, kind, _ttl(update_type))
    keyed(backend, "alice")
    t0 = clock.now_ms()
    a.write(1)
    clock.set(t0 + TTL - 1)
    a.write(2)
    clock.set(t0 + TTL)  # the first write has expired, the second has not
    expected = {"value": 2, "map": 2, "list": 2, "reducing": 3, "aggregating": 3}[kind]
    assert a.read() == expected
    if kind == "list":  # every element keeps its own timestamp
        assert a.state.get() == [2]
    clock.set(t0 + 2 * TTL - 1 if update_type is UpdateType.ON_CREATE_AND_WRITE else t0 + 2 * TTL)
    assert a.read() is None


@pytest.mark.parametrize("kind", ["reducing", "aggregating"])
@pytest.mark.parametrize("visibility", VISIBILITIES, ids=lambda v: v.name)
def test_ttl_add_to_expired_accumulator(backend, keyed, clock, kind, visibility):
    """Flink's TtlReduceFunction / TtlAggregateFunction fold into an expired value only
    when expired values are visible; otherwise they start afresh."""
    a = Adapter(backend, kind, _ttl(visibility=visibility))
    keyed(backend, "alice")
    a.write(1)
    clock.advance(TTL)
    a.write(2)
    assert a.read() == (3 if visibility is StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP else 2)
    assert a.last_access() == [clock.now_ms()]


@pytest.mark.parametrize("visibility", VISIBILITIES, ids=lambda v: v.name)
@pytest.mark.parametrize("update_type", UPDATE_TYPES, ids=lambda u: u.name)
def test_ttl_list_per_element(backend, keyed, clock, update_type, visibility):
    st = backend.get_state(ListStateDescriptor("l", str, ttl=_ttl(update_type, visibility)))
    table = backend.tables["l"]
    keyed(backend, "alice")
    t0 = clock.now_ms()
    st.add("old")
    clock.set(t0 + 10)
    st.add_all(["new1", "new2"])
    clock.set(t0 + TTL)  # "old" expired, the others not
    if visibility is StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP:
        assert st.get() == ["old", "new1", "new2"]
    else:
        assert st.get() == ["new1", "new2"]
    # the expired element is gone from storage; the live ones were refreshed only on read-and-write
    live_ts = t0 + TTL if update_type is UpdateType.ON_READ_AND_WRITE else t0 + 10
    assert [(r[3], r[4], r[5]) for r in table.rows()] == [(0, "new1", live_ts), (1, "new2", live_ts)]
    assert st.get() == ["new1", "new2"]
    clock.set(live_ts + TTL)
    returns_expired = visibility is StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP
    assert st.get() == (["new1", "new2"] if returns_expired else [])
    assert list(table.rows()) == []
    assert st.get() == []


@pytest.mark.parametrize("visibility", VISIBILITIES, ids=lambda v: v.name)
@pytest.mark.parametrize("update_type", UPDATE_TYPES, ids=lambda u: u.name)
def test_ttl_map_per_entry(backend, keyed, clock, update_type, visibility):
    st = backend.get_state(MapStateDescriptor("m", str, int, ttl=_ttl(update_type, visibility)))
    table = backend.tables["m"]
    keyed(backend, "alice")
    t0 = clock.now_ms()
    st["old"] = 1
    clock.set(t0 + 10)
    st["new"] = 2
    clock.set(t0 + TTL)
    returns_expired = visibility is StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP
    assert dict(st.items()) == ({"old": 1, "new": 2} if returns_expired else {"new": 2})
    assert dict(st.items()) == {"new": 2}  # the expired entry was cleaned up by the read
    live_ts = t0 + TTL if update_type is UpdateType.ON_READ_AND_WRITE else t0 + 10
    assert [(r[3], r[5]) for r in table.rows()] == [("new", live_ts)]
    assert "old" not in st and len(st) == 1
    clock.set(live_ts + TTL)
    assert st.is_empty() is not returns_expired
    assert list(table.rows()) == []
    assert st.is_empty()


def test_ttl_map_point_reads(backend, keyed, clock):
    st = backend.get_state(MapStateDescriptor(
        "m", str, int, ttl=_ttl(visibility=StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP)))
    keyed(backend, "alice")
    st["a"] = 1
    st["b"] = 2
    clock.advance(TTL)
    assert st.contains("a")  # visible once more (Flink's contains() reads through the TTL check)...
    assert "a" not in st  # ...and cleaned up by that read
    assert st["b"] == 2
    with pytest.raises(KeyError):
        st["b"]


def test_ttl_values_are_per_key(backend, keyed, clock):
    st = backend.get_state(ValueStateDescriptor("v", int, ttl=_ttl()))
    keyed(backend, "alice")
    st.update(1)
    clock.advance(TTL // 2)
    keyed(backend, "bob")
    st.update(2)
    clock.advance(TTL // 2)
    assert st.value() == 2
    keyed(backend, "alice")
    assert st.value() is None


def test_incremental_cleanup_on_heap(make_backend, clock):
    """Heap only (as in Flink): each state access checks a few more entries and drops the
    expired ones, so untouched keys disappear without ever being read."""
    backend = make_backend("heap")
    ttl = StateTtlConfig(TTL, cleanup=CleanupStrategies(incremental=IncrementalCleanup(cleanup_size=3)))
    st = backend.get_state(ValueStateDescriptor("v", int, ttl=ttl))
    table = backend.tables["v"]
    for i in range(12):
        backend.set_current_key(f"k{i}", i)
        st.update(i)
    assert len(list(table.rows())) == 12
    clock.advance(TTL)
    backend.set_current_key("writer", 100)
    st.update(-1)  # one access: up to 3 entries checked
    n1 = len(list(table.rows()))
    assert 12 - 3 <= n1 < 13
    for _ in range(6):
        st.update(-1)  # only "writer" is touched, and it is never expired
    assert [r[1] for r in table.rows()] == ["writer"]


def test_incremental_cleanup_for_every_record_on_heap(make_backend, clock):
    backend = make_backend("heap")
    inc = IncrementalCleanup(cleanup_size=100, run_cleanup_for_every_record=True)
    st = backend.get_state(ValueStateDescriptor("v", int, ttl=StateTtlConfig(TTL, cleanup=CleanupStrategies(incremental=inc))))
    for i in range(5):
        backend.set_current_key(f"k{i}", i)
        st.update(i)
    clock.advance(TTL)
    backend.run_incremental_cleanup_for_record()  # the operator calls this once per record
    assert list(backend.tables["v"].rows()) == []


def test_rocksdb_keeps_expired_entries_until_background_cleanup(make_backend, clock):
    """RocksDB has no incremental cleanup (Flink's is heap-only): accesses to other keys
    do not remove anything; the background sweep does."""
    backend = make_backend("rocksdb")
    st = backend.get_state(ValueStateDescriptor("v", int, ttl=StateTtlConfig(TTL)))
    for i in range(5):
        backend.set_current_key(f"k{i}", i)
        st.update(i)
    clock.advance(TTL)
    backend.set_current_key("writer", 100)
    for _ in range(10):
        st.update(-1)
    assert len(list(backend.tables["v"].rows())) == 6
    assert backend.background_cleanup() == 5
    assert [r[1] for r in backend.tables["v"].rows()] == ["writer"]


def test_background_cleanup(backend, clock):
    """``background_cleanup(now)`` removes exactly the expired entries of every TTL state
    (list elements and map entries one by one) and leaves non-TTL state alone."""
    ttl = StateTtlConfig(TTL)
    v = backend.get_state(ValueStateDescriptor("v", int, ttl=ttl))
    lst = backend.get_state(ListStateDescriptor("l", int, ttl=ttl))
    m = backend.get_state(MapStateDescriptor("m", str, int, ttl=ttl))
    plain = backend.get_state(ValueStateDescriptor("plain", int))
    t0 = clock.now_ms()
    for i in range(6):
        backend.set_current_key(f"k{i}", i * 20)
        v.update(i)
        lst.add(i)
        m["early"] = i
        plain.update(i)
    clock.set(t0 + 500)
    for i in range(0, 6, 2):  # even keys get fresh entries
        backend.set_current_key(f"k{i}", i * 20)
        v.update(i)
        lst.add(100 + i)
        m["late"] = i
    tables = backend.tables
    assert backend.background_cleanup(t0 + TTL - 1) == 0  # nothing has expired yet
    removed = backend.background_cleanup(t0 + TTL)
    assert removed == 3 + 6 + 6  # odd values, every early list element, every early map entry
    assert sorted(r[1] for r in tables["v"].rows()) == ["k0", "k2", "k4"]
    assert sorted((r[1], r[4]) for r in tables["l"].rows()) == [("k0", 100), ("k2", 102), ("k4", 104)]
    assert sorted((r[1], r[3]) for r in tables["m"].rows()) == [("k0", "late"), ("k2", "late"), ("k4", "late")]
    assert len(list(tables["plain"].rows())) == 6
    assert backend.background_cleanup(t0 + 500 + TTL) == 9
    assert all(list(tables[n].rows()) == [] for n in ("v", "l", "m"))


# --- rows() and load_rows() -----------------------------------------------------------------------
def _descriptors():
    ttl = StateTtlConfig(TTL, cleanup=NO_BACKGROUND)
    return [
        ValueStateDescriptor("value", Event),
        ValueStateDescriptor("value-ttl", int, ttl=ttl),
        ListStateDescriptor("list", tuple[str, int]),
        ListStateDescriptor("list-ttl", str, ttl=ttl),
        MapStateDescriptor("map", str, dict[str, list[int]]),
        MapStateDescriptor("map-ttl", int, Optional[float], ttl=ttl),
        ReducingStateDescriptor("reducing", add, int),
        AggregatingStateDescriptor("aggregating", Average(), tuple[int, int]),
    ]


def _populate(backend, clock, n_keys: int = 40) -> None:
    states = {d.name: backend.get_state(d) for d in _descriptors()}
    for i in range(n_keys):
        key = f"user-{i}" if i % 3 else i  # str and int keys
        kg = assign_to_key_group(key, backend.max_parallelism)
        for ns in ([None, "w1"] if i % 4 == 0 else [None]):
            backend.set_current_key(key, kg, ns)
            clock.advance(1)
            states["value"].update(Event(f"e{i}", i, None if i % 2 else "t"))
            states["value-ttl"].update(i)
            states["list"].add_all([(f"a{i}", i), (f"b{i}", -i)])
            for j in range(i % 3):
                states["list-ttl"].add(f"x{j}")
            states["map"][f"m{i}"] = {"k": [i, i + 1]}
            states["map"]["shared"] = {}
            states["map-ttl"][i] = None if i % 5 == 0 else i / 2
            states["reducing"].add(i)
            states["reducing"].add(1)
            states["aggregating"].add(i)


def _normalized(backend) -> dict[str, list]:
    """Rows per state, order-free within a key group (the backends order keys differently)."""
    out = {}
    for name, table in backend.tables.items():
        rows = list(table.rows())
        out[name] = sorted(rows, key=repr)
    return out


def test_rows_are_in_key_group_order(backend, clock):
    _populate(backend, clock)
    for name, table in backend.tables.items():
        kgs = [r[0] for r in table.rows()]
        assert kgs, name
        assert kgs == sorted(kgs), name
        counts = {}
        for kg in kgs:
            counts[kg] = counts.get(kg, 0) + 1
        assert table.entries_per_key_group() == counts, name
        addresses = list(table.addresses())
        assert [a[0] for a in addresses] == sorted(a[0] for a in addresses)
        assert len(set(addresses)) == len(addresses)
        assert set(addresses) == {r[:3] for r in table.rows()}
    some = KeyGroupRange(30, 90)
    for table in backend.tables.values():
        assert list(table.rows(some)) == [r for r in table.rows() if 30 <= r[0] <= 90]


def test_rows_flatten_lists_and_maps(backend, keyed, clock):
    lst = backend.get_state(ListStateDescriptor("l", str))
    m = backend.get_state(MapStateDescriptor("m", str, int, ttl=_ttl()))
    kg = keyed(backend, "alice", "ns")
    lst.add_all(["a", "b"])
    m["x"] = 1
    assert list(backend.tables["l"].rows()) == [(kg, "alice", "ns", 0, "a", None), (kg, "alice", "ns", 1, "b", None)]
    assert list(backend.tables["m"].rows()) == [(kg, "alice", "ns", "x", 1, clock.now_ms())]


def test_both_backends_store_the_same_rows(make_backend, clock):
    c1, c2 = ManualClock(clock.now_ms()), ManualClock(clock.now_ms())
    heap, rocks = make_backend("heap", clock_=c1), make_backend("rocksdb", clock_=c2)
    _populate(heap, c1)
    _populate(rocks, c2)
    assert _normalized(heap) == _normalized(rocks)
    for name in heap.tables:
        assert heap.tables[name].entries_per_key_group() == rocks.tables[name].entries_per_key_group()


def _copy(src, dst) -> None:
    for d in _descriptors():
        dst.get_state(d)
        dst.tables[d.name].load_rows(src.tables[d.name].rows())


def test_load_rows_round_trip(make_backend, backend_kind, clock, keyed):
    src = make_backend(backend_kind)
    _populate(src, clock)
    dst = make_backend(backend_kind)
    _copy(src, dst)
    assert _normalized(dst) == _normalized(src)
    # and the state reads back through the API
    v = dst.get_state(ValueStateDescriptor("value", Event))
    lst = dst.get_state(ListStateDescriptor("list", tuple[str, int]))
    agg = dst.get_state(AggregatingStateDescriptor("aggregating", Average(), tuple[int, int]))
    keyed(dst, "user-5")
    assert v.value() == Event("e5", 5, None)
    assert lst.get() == [("a5", 5), ("b5", -5)]
    assert agg.get() == 5.0


def test_heap_rocksdb_heap_round_trip_is_lossless(make_backend, clock):
    heap = make_backend("heap")
    _populate(heap, clock)
    rocks = make_backend("rocksdb")
    _copy(heap, rocks)
    back = make_backend("heap")
    _copy(rocks, back)
    assert _normalized(rocks) == _normalized(heap)
    assert _normalized(back) == _normalized(heap)
    for name, table in heap.tables.items():
        # list element order within a key survives the trip
        assert sorted(table.rows(), key=lambda r: (r[0], repr(r[1:3]))) == sorted(
            back.tables[name].rows(), key=lambda r: (r[0], repr(r[1:3]))
        )


# --- end to end -----------------------------------------------------------------------------------
class Profile(KeyedProcessFunction):
    """Counts, recent items, per-merchant totals and a max per user; emits on every record."""

    def open(self, ctx):
        ttl = StateTtlConfig(10_000, cleanup=NO_BACKGROUND)
        self.count = ctx.get_state(ValueStateDescriptor("count", int, ttl=ttl))
        self.recent = ctx.get_state(ListStateDescriptor("recent", Event))
        self.by_merchant = ctx.get_state(MapStateDescriptor("by-merchant", str, int))
        self.biggest = ctx.get_state(ReducingStateDescriptor("biggest", max, int))
        self.avg = ctx.get_state(AggregatingStateDescriptor("avg", Average(), tuple[int, int]))

    def process_element(self, value, ctx, out):
        n = self.count.value(0) + 1
        self.count.update(n)
        self.recent.add(value)
        if n % 3 == 0:
            self.recent.update(self.recent.get()[-2:])
        m = value.tag or "none"
        self.by_merchant[m] = self.by_merchant.get(m, 0) + value.amount
        self.biggest.add(value.amount)
        self.avg.add(value.amount)
        out.collect((ctx.get_current_key(), n, self.biggest.get(), round(self.avg.get(), 6), len(self.by_merchant)))


def _events(n: int = 300) -> list[Event]:
    users = [f"user-{i}" for i in range(17)]
    return [Event(users[(i * 7) % 17], (i * 13) % 50, ["shop", "cafe", None][i % 3]) for i in range(n)]


def _run(kind: str, tmp_path):
    env = StreamEnvironment(parallelism=2, state_backend=kind, clock=ManualClock(1_700_000_000_000),
                            batch_size=16, state_dir=tmp_path / kind)
    env.from_collection(_events()).key_by(lambda e: e.name).process(Profile()).collect("out")
    return env.execute("profile")


def test_end_to_end_job_is_identical_on_both_backends(tmp_path):
    heap = _run("heap", tmp_path)
    rocks = _run("rocksdb", tmp_path)
    assert len(heap.output("out")) == 300
    assert sorted(rocks.output("out")) == sorted(heap.output("out"))
    # per key the outputs arrive in input order on both backends
    for res in (heap, rocks):
        per_user: dict[str, list[int]] = {}
        for user, n, *_ in res.output("out"):
            per_user.setdefault(user, []).append(n)
        assert all(ns == list(range(1, len(ns) + 1)) for ns in per_user.values())
    hs, rs = heap.state(), rocks.state()
    assert set(hs["state"]) == {"count", "recent", "by-merchant", "biggest", "avg"}
    assert len(hs) == len(rs) > 17 * 4
    cols = list(hs.columns)

    def canon(df):
        return sorted(map(repr, df[cols].itertuples(index=False, name=None)))

    assert canon(hs) == canon(rs)  # read after the job closed the RocksDB instances
    counts = {r.key: r.value for r in hs[hs["state"] == "count"].itertuples()}
    expected: dict[str, int] = {}
    for e in _events():
        expected[e.name] = expected.get(e.name, 0) + 1
    assert counts == expected
    assert (heap.key_group_metrics()["entries"].sum() == rocks.key_group_metrics()["entries"].sum() == len(hs))


def test_load_rows_needs_a_last_access_time_for_ttl_state(backend):
    backend.get_state(ValueStateDescriptor("v", int, ttl=_ttl()))
    with pytest.raises(StateMigrationError, match="'v'"):
        backend.tables["v"].load_rows(iter([(1, "k", None, None, 5, None)]))


def test_load_rows_appends_to_existing_lists(backend, keyed, clock):
    st = backend.get_state(ListStateDescriptor("l", int))
    kg = keyed(backend, "k")
    st.add(1)
    n = backend.tables["l"].load_rows(iter([(kg, "k", None, 0, 2, None), (kg, "k", None, 1, 3, None)]))
    assert n == 2 and st.get() == [1, 2, 3]


def test_expired_values_are_not_returned_once_cleaned_up_in_the_background(backend, keyed, clock):
    ttl = StateTtlConfig(TTL, visibility=StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP)
    v = backend.get_state(ValueStateDescriptor("v", int, ttl=ttl))
    m = backend.get_state(MapStateDescriptor("m", str, int, ttl=ttl))
    keyed(backend, "alice")
    v.update(1)
    m["a"] = 1
    clock.advance(TTL)
    assert backend.background_cleanup() == 2
    assert list(backend.tables["v"].rows()) == [] and list(backend.tables["m"].rows()) == []
    assert v.value() is None and m.get("a") is None
