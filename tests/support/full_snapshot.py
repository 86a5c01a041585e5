"""States planted in a RocksDB backend, every kind and value type, for the full-snapshot suites.

Each state holds ``n`` keys of one key kind (``str``, ``int``, keys with a zero byte, tuples),
values derived from their index, and with TTL some entries expired at :data:`NOW`.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.engine.state import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateKind,
    ValueStateDescriptor,
)
from explorer.engine.ttl import CleanupStrategies, StateTtlConfig
from explorer.keygroups import assign_to_key_group


@dataclass
class Order:
    item: str
    qty: int


class SumAgg(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, accumulator):
        return accumulator + value

    def get_result(self, accumulator):
        return accumulator

    def merge(self, a, b):
        return a + b


TTL = StateTtlConfig(1000, cleanup=CleanupStrategies(full_snapshot=True))
NOW = 10_000


def keys(kind: str, n: int):
    if kind == "str":
        return [f"user-{i}-" + "é" * (i % 3) for i in range(n)]
    if kind == "int":
        return [i * 7919 - 5000 for i in range(n)]
    if kind == "zero":  # a zero byte in the key: escaped, so not vectorised
        return [f"k\x00{i}" for i in range(n)]
    return [(f"t{i}", i) for i in range(n)]  # tuple keys: not vectorised


def value(type_, i):
    if type_ is int:
        return i * 1_000_003 - 2**40
    if type_ is float:
        return i / 3 - 17.5
    if type_ is bool:
        return i % 3 == 0
    if type_ is str:
        return "v" * (i % 300) + str(i)  # lengths past 127: two-byte varints
    if type_ is bytes:
        return bytes([i % 256, 0]) * (i % 200)
    return Order(f"item{i}", i)


def ts(i):
    return NOW - 2000 + (i * 37) % 2500  # some expired at NOW (ts + 1000 <= NOW), some not


def plant(backend, desc, key_kind, n=300):
    table = backend.register(desc)
    ttl = desc.ttl is not None
    vt = desc.value_info
    py = {"int": int, "float": float, "bool": bool, "str": str, "bytes": bytes}.get(vt.describe().get("type"), Order)
    for i, key in enumerate(keys(key_kind, n)):
        kg = assign_to_key_group(key, backend.max_parallelism)
        wrap = (lambda v, j: (v, ts(j))) if ttl else (lambda v, j: v)
        if desc.kind is StateKind.LIST:
            table.put(kg, key, None, [wrap(value(py, i + j), i + j) for j in range(i % 4 + 1)])
        elif desc.kind is StateKind.MAP:
            ukt = desc.user_key_info.describe()["type"]
            entries = {}
            for j in range(i % 3 + 1):
                uk = f"m{j}" if ukt == "str" else j - 1
                entries[uk] = wrap(None if (i + j) % 5 == 0 else value(py, i + j), i + j)
            table.put(kg, key, None, entries)
        else:
            table.put(kg, key, None, wrap(value(py, i), i))
    return table


def descs(ttl):
    t = TTL if ttl else None
    return [
        ValueStateDescriptor("v_int", int, ttl=t),
        ValueStateDescriptor("v_float", float, ttl=t),
        ValueStateDescriptor("v_bool", bool, ttl=t),
        ValueStateDescriptor("v_str", str, ttl=t),
        ValueStateDescriptor("v_bytes", bytes, ttl=t),
        ValueStateDescriptor("v_order", Order, ttl=t),
        ReducingStateDescriptor("r_int", lambda a, b: a + b, int, ttl=t),
        AggregatingStateDescriptor("a_int", SumAgg(), int, ttl=t),
        ListStateDescriptor("l_int", int, ttl=t),
        ListStateDescriptor("l_float", float, ttl=t),
        ListStateDescriptor("l_bool", bool, ttl=t),
        ListStateDescriptor("l_str", str, ttl=t),
        MapStateDescriptor("m_str_int", str, int, ttl=t),
        MapStateDescriptor("m_int_str", int, str, ttl=t),
        MapStateDescriptor("m_str_bytes", str, bytes, ttl=t),
        MapStateDescriptor("m_str_order", str, Order, ttl=t),
    ]


def user_key(desc):
    if desc.kind is StateKind.MAP:
        return desc.user_key_info
    return "index" if desc.kind is StateKind.LIST else None
