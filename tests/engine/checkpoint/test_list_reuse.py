"""Long heap lists converted once (:mod:`explorer.engine.checkpoint.list_reuse`): each checkpoint's
table is exactly the one converting everything makes, whatever happened to the lists in between."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from explorer.engine.backends.heap import HeapStateTable
from explorer.engine.checkpoint import list_reuse
from explorer.engine.checkpoint.list_reuse import ListReuse
from explorer.engine.state import ListStateDescriptor, ValueStateDescriptor
from explorer.engine.ttl import StateTtlConfig
from explorer.format.keyed import columns_to_table
from explorer.keygroups import KeyGroupRange


@dataclass(frozen=True, slots=True)
class Ev:
    user: str
    ts: int
    kind: str | None


@dataclass
class Mutable:
    n: int


def _table(t: HeapStateTable, reuse: ListReuse | None):
    cols = t.snapshot_columns().columns()
    if reuse is not None:
        cols["values"] = reuse.values(t.snapshot_columns())
    table, _ = columns_to_table(value_info=t.descriptor.value_info, user_key="index", **cols)
    return table


@pytest.fixture(autouse=True)
def _small_lists(monkeypatch):
    monkeypatch.setattr(list_reuse, "MIN_ELEMENTS", 8)


@pytest.mark.parametrize("seed", range(4))
def test_reuse_makes_the_same_table_checkpoint_after_checkpoint(seed):
    r = random.Random(seed)
    desc = ListStateDescriptor("session", Ev)
    t = HeapStateTable(desc, KeyGroupRange(0, 15))
    reuse = ListReuse(desc.value_info)
    keys = [f"u{i}" for i in range(12)]
    for _ in range(25):
        for _ in range(r.randrange(1, 60)):
            kg, k = r.randrange(16), r.choice(keys)
            op = r.random()
            cur = t.get(kg, k, None)
            if op < 0.75:  # a list grows (handed over or copied)
                t.append_many([kg], [k], [[Ev(k, r.randrange(99), r.choice(["view", None]))
                                           for _ in range(r.randrange(1, 6))]], handed_over=r.random() < 0.5)
            elif op < 0.82:
                t.remove(kg, k, None)
            elif op < 0.88 and cur:  # an element swapped in place, the list object kept
                cur[r.randrange(len(cur))] = Ev(k, -1, "swapped")
            elif op < 0.92 and cur:  # shortened in place
                del cur[r.randrange(len(cur)):]
            elif op < 0.96 and cur:  # replaced by an equal list of equal but other objects
                t.put(kg, k, None, [Ev(e.user, e.ts, e.kind) for e in cur])
            elif cur:  # the same objects, reordered in place
                cur.reverse()
        got = _table(t, reuse)
        assert got.equals(_table(t, None))
    assert reuse._kept  # long lists were kept and reused


def test_reuse_reads_only_new_elements_of_a_growing_list(monkeypatch):
    desc = ListStateDescriptor("l", Ev)
    t = HeapStateTable(desc, KeyGroupRange(0, 3))
    reuse = ListReuse(desc.value_info)
    seen = []
    real = desc.value_info.to_arrow_array
    monkeypatch.setattr(desc.value_info, "to_arrow_array", lambda vals: seen.append(len(vals)) or real(vals))
    t.append(1, "bot", None, [Ev("bot", i, "view") for i in range(100)])
    t.append(2, "short", None, [Ev("short", 0, None)])
    reuse.values(t.snapshot_columns())
    t.append(1, "bot", None, [Ev("bot", 100 + i, "view") for i in range(5)])
    got = reuse.values(t.snapshot_columns())
    assert seen == [101, 6]  # the second checkpoint converted the short list and the 5 new events
    assert got.to_pylist() == real([e for kg in (1, 2) for k in ("bot", "short")
                                    for e in (t.get(kg, k, None) or [])]).to_pylist()


def test_reuse_applies_to_immutable_list_state_without_ttl_only():
    kgs = KeyGroupRange(0, 3)
    assert ListReuse.applies(HeapStateTable(ListStateDescriptor("a", Ev), kgs))
    assert ListReuse.applies(HeapStateTable(ListStateDescriptor("b", str), kgs))
    assert ListReuse.applies(HeapStateTable(ListStateDescriptor("c", tuple[str, int]), kgs))
    assert not ListReuse.applies(HeapStateTable(ListStateDescriptor("d", Mutable), kgs))
    assert not ListReuse.applies(HeapStateTable(ListStateDescriptor("e", list[int]), kgs))
    assert not ListReuse.applies(HeapStateTable(ListStateDescriptor("f", Ev, ttl=StateTtlConfig(1000)), kgs))
    assert not ListReuse.applies(HeapStateTable(ValueStateDescriptor("g", Ev), kgs))
