"""Heap list state taken copy-on-write, long lists converted once
(:mod:`explorer.engine.checkpoint.list_reuse`): each checkpoint's table is exactly the one the
rows make at the barrier, whatever happened to the lists in between or while it was written."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from explorer.engine.backends.heap import HeapStateTable
from explorer.engine.checkpoint.list_reuse import ListReuse
from explorer.engine.state import ListStateDescriptor, ValueStateDescriptor
from explorer.engine.ttl import StateTtlConfig
from explorer.format.keyed import columns_to_table, rows_to_table
from explorer.keygroups import KeyGroupRange


@dataclass(frozen=True, slots=True)
class Ev:
    user: str
    ts: int
    kind: str | None


@dataclass
class Mutable:
    n: int


def _rows_table(t: HeapStateTable):
    return rows_to_table(list(t.rows()), t.descriptor.value_info, "index")[0]


def _write(snap, reuse: ListReuse):
    return columns_to_table(value_info=reuse.table.descriptor.value_info, user_key="index",
                            **snap.columns(reuse.values(snap)))[0]


def _mutate(t: HeapStateTable, r: random.Random, keys: list[str], popped: list) -> None:
    for _ in range(r.randrange(1, 60)):
        kg, k = r.randrange(16), r.choice(keys)
        op = r.random()
        if op < 0.6:  # a list grows (handed over or copied)
            t.append_many([kg], [k], [[Ev(k, r.randrange(99), r.choice(["view", None]))
                                       for _ in range(r.randrange(1, 6))]], handed_over=r.random() < 0.5)
        elif op < 0.7:
            t.remove(kg, k, None)
        elif op < 0.8:  # a list handed out, to be changed in place by its new owner...
            got = t.pop_many([kg], [k])[0]
            if got:
                popped.append((kg, k, got))
        elif op < 0.9 and popped:  # ... which changes it and may hand it back where it was
            kg, k, lst = popped.pop(r.randrange(len(popped)))
            r.choice([lst.reverse, lst.pop, lambda: lst.__setitem__(0, Ev("x", -1, "swapped"))])()
            if r.random() < 0.7 and not t.get(kg, k, None):
                t.append_many([kg], [k], [lst], handed_over=True)
        elif (cur := t.get(kg, k, None)):  # replaced by an equal list of equal but other objects
            t.put(kg, k, None, [Ev(e.user, e.ts, e.kind) for e in cur])


@pytest.mark.parametrize("seed", range(6))
def test_reuse_makes_the_rows_table_checkpoint_after_checkpoint(seed):
    """Snapshots taken, the table changed (and handed-out lists changed by their owners) while
    they wait, then written: each the table of the rows at its barrier."""
    r = random.Random(seed)
    desc = ListStateDescriptor("session", Ev)
    t = HeapStateTable(desc, KeyGroupRange(0, 15))
    reuse = t.snapshot_reuse = ListReuse(t)
    keys = [f"u{i}" for i in range(12)]
    popped: list = []
    waiting = []
    for _ in range(40):
        _mutate(t, r, keys, popped)
        waiting.append((t.snapshot_columns(), _rows_table(t)))
        _mutate(t, r, keys, popped)
        drain = r.random() < 0.5  # all written: the next lists handed out are the table's own
        while waiting and (drain or len(waiting) > 2 or r.random() < 0.6):  # written later, sometimes out of order
            snap, want = waiting.pop(r.randrange(len(waiting)) if r.random() < 0.2 else 0)
            assert _write(snap, reuse).equals(want)
    assert reuse._kept  # lists were kept and reused


def test_a_snapshot_holds_the_lists_copy_on_write():
    desc = ListStateDescriptor("l", Ev)
    t = HeapStateTable(desc, KeyGroupRange(0, 3))
    reuse = t.snapshot_reuse = ListReuse(t)
    t.append(1, "a", None, [Ev("a", i, "view") for i in range(3)])
    snap = t.snapshot_columns()
    want = _rows_table(t)
    t.append(1, "a", None, [Ev("a", 9, "view")])
    handed = t.pop_many([1], ["a"])[0]
    handed.clear()  # the caller's copy: the snapshot's list is untouched
    assert _write(snap, reuse).equals(want)
    again = t.snapshot_columns()
    t.append(2, "b", None, [Ev("b", 1, None)])
    mine = t.pop_many([2], ["b"])[0]
    assert _write(again, reuse).num_rows == 0
    assert mine is not None and not t._pins  # written: lists are handed out as they are again


def test_reuse_reads_only_new_elements_of_a_growing_list(monkeypatch):
    desc = ListStateDescriptor("l", Ev)
    t = HeapStateTable(desc, KeyGroupRange(0, 3))
    reuse = t.snapshot_reuse = ListReuse(t)
    seen = []
    real = desc.value_info.to_arrow_array
    monkeypatch.setattr(desc.value_info, "to_arrow_array", lambda vals: seen.append(len(vals)) or real(vals))
    t.append(1, "bot", None, [Ev("bot", i, "view") for i in range(100)])
    t.append(2, "short", None, [Ev("short", 0, None)])
    reuse.values(t.snapshot_columns())
    t.append(1, "bot", None, [Ev("bot", 100 + i, "view") for i in range(5)])
    got = reuse.values(t.snapshot_columns())
    assert seen == [101, 5]  # the second checkpoint converted the 5 new events only
    assert got.equals(_rows_table(t).column("value").combine_chunks())


def test_reuse_applies_to_immutable_list_state_without_ttl_only():
    kgs = KeyGroupRange(0, 3)
    assert ListReuse.applies(HeapStateTable(ListStateDescriptor("a", Ev), kgs))
    assert ListReuse.applies(HeapStateTable(ListStateDescriptor("b", str), kgs))
    assert ListReuse.applies(HeapStateTable(ListStateDescriptor("c", tuple[str, int]), kgs))
    assert not ListReuse.applies(HeapStateTable(ListStateDescriptor("d", Mutable), kgs))
    assert not ListReuse.applies(HeapStateTable(ListStateDescriptor("e", list[int]), kgs))
    assert not ListReuse.applies(HeapStateTable(ListStateDescriptor("f", Ev, ttl=StateTtlConfig(1000)), kgs))
    assert not ListReuse.applies(HeapStateTable(ValueStateDescriptor("g", Ev), kgs))
