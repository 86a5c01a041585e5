"""The heap table's own rows() lists exactly what the generic row walk (addresses, then get) lists."""

from __future__ import annotations

import random

import pytest

from explorer.engine.backends.heap import HeapStateTable
from explorer.engine.backends.table import StateTable
from explorer.engine.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from explorer.keygroups import KeyGroupRange


@pytest.mark.parametrize("descriptor", [ValueStateDescriptor("v", int), ListStateDescriptor("l", int),
                                        MapStateDescriptor("m", str, int)], ids=lambda d: d.kind.value)
def test_heap_rows_are_the_generic_rows(descriptor):
    t = HeapStateTable(descriptor, KeyGroupRange(0, 127))
    r = random.Random(1)
    for _ in range(600):
        kg, k, ns, e = r.randrange(128), f"k{r.randrange(80)}", r.choice([None, "w"]), r.randrange(100)
        if descriptor.kind.value == "list":
            t.append(kg, k, ns, [e, e + 1])
        elif descriptor.kind.value == "map":
            t.map_put(kg, k, ns, f"u{r.randrange(5)}", e)
        else:
            t.put(kg, k, ns, e)
        if r.random() < 0.1:
            t.remove(kg, k, ns)
    assert len(list(t.rows())) > 100
    assert list(t.rows()) == list(StateTable.rows(t))
    assert list(t.rows(KeyGroupRange(10, 50))) == list(StateTable.rows(t, KeyGroupRange(10, 50)))
