"""Operator state (non-keyed) and broadcast state.

* Operator list state: each subtask holds a list. On rescale the lists of all
  subtasks are concatenated and dealt out again: *even split* gives each new
  subtask a contiguous share; *union* gives every new subtask the whole list.
* Broadcast state: a map that is the same on every subtask. Only the broadcast
  side may write it; the data side reads it. On rescale every subtask gets a copy.
"""

from __future__ import annotations

import enum
from typing import Any, Iterable

from ..errors import StateError
from .state import ListStateDescriptor, MapStateDescriptor


class OperatorStateMode(enum.Enum):
    SPLIT_DISTRIBUTE = "SPLIT_DISTRIBUTE"
    UNION = "UNION"
    BROADCAST = "BROADCAST"


class OperatorListState:
    def __init__(self, descriptor: ListStateDescriptor, mode: OperatorStateMode) -> None:
        self.descriptor = descriptor
        self.mode = mode
        self.items: list[Any] = []
        self._info = descriptor.value_info

    def get(self) -> list[Any]:
        return list(self.items)

    def __iter__(self):
        return iter(list(self.items))

    def add(self, value: Any) -> None:
        self._info.check(value, f"operator state {self.descriptor.name!r}")
        self.items.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        for v in values:
            self.add(v)

    def update(self, values: Iterable[Any]) -> None:
        self.items = []
        self.add_all(values)

    def clear(self) -> None:
        self.items = []


class BroadcastState:
    def __init__(self, descriptor: MapStateDescriptor) -> None:
        self.descriptor = descriptor
        self.entries: dict[Any, Any] = {}

    def view(self, writable: bool) -> "BroadcastStateView":
        return BroadcastStateView(self, writable)


class BroadcastStateView:
    """Broadcast state as a function sees it: a mapping, writable on the broadcast side only."""

    def __init__(self, state: BroadcastState, writable: bool) -> None:
        self._s = state
        self._w = writable

    def _write(self) -> dict[Any, Any]:
        if not self._w:
            raise StateError(
                f"broadcast state {self._s.descriptor.name!r} is read-only on the data side; "
                "change it in process_broadcast_element"
            )
        return self._s.entries

    def get(self, key: Any, default: Any = None) -> Any:
        return self._s.entries.get(key, default)

    def __getitem__(self, key: Any) -> Any:
        return self._s.entries[key]

    def contains(self, key: Any) -> bool:
        return key in self._s.entries

    __contains__ = contains

    def items(self) -> list[tuple[Any, Any]]:
        return list(self._s.entries.items())

    def keys(self) -> list[Any]:
        return list(self._s.entries)

    def values(self) -> list[Any]:
        return list(self._s.entries.values())

    def __iter__(self):
        return iter(list(self._s.entries))

    def __len__(self) -> int:
        return len(self._s.entries)

    def put(self, key: Any, value: Any) -> None:
        d = self._s.descriptor
        d.user_key_info.check(key, f"broadcast state {d.name!r} key")
        d.value_info.check(value, f"broadcast state {d.name!r}")
        self._write()[key] = value

    __setitem__ = put

    def remove(self, key: Any) -> None:
        self._write().pop(key, None)

    def clear(self) -> None:
        self._write().clear()


class OperatorStateStore:
    """All operator and broadcast state of one operator subtask."""

    def __init__(self) -> None:
        self.lists: dict[str, OperatorListState] = {}
        self.broadcast: dict[str, BroadcastState] = {}
        #: what a restore handed us before the function registered its descriptors
        self.restored_lists: dict[str, list[Any]] = {}
        self.restored_broadcast: dict[str, dict[Any, Any]] = {}

    def get_list_state(self, descriptor: ListStateDescriptor, union: bool) -> OperatorListState:
        mode = OperatorStateMode.UNION if union else OperatorStateMode.SPLIT_DISTRIBUTE
        st = self.lists.get(descriptor.name)
        if st is None:
            st = self.lists[descriptor.name] = OperatorListState(descriptor, mode)
            if descriptor.name in self.restored_lists:
                st.items = [_as_declared(st._info, v) for v in self.restored_lists.pop(descriptor.name)]
        elif st.mode is not mode:
            raise StateError(
                f"operator state {descriptor.name!r} is {st.mode.value} and was asked for as {mode.value}"
            )
        return st

    def get_broadcast_state(self, descriptor: MapStateDescriptor, writable: bool) -> BroadcastStateView:
        st = self.broadcast.get(descriptor.name)
        if st is None:
            st = self.broadcast[descriptor.name] = BroadcastState(descriptor)
            if descriptor.name in self.restored_broadcast:
                info = descriptor.value_info
                st.entries = {k: _as_declared(info, v) for k, v in self.restored_broadcast.pop(descriptor.name).items()}
        return st.view(writable)


def _as_declared(info, value: Any) -> Any:
    """A restored value as the declared type builds it: a restore reads snapshots without the
    job's classes (dataclasses come back as dicts); the descriptor claiming them has them."""
    return value if value is None else info.from_arrow(info.to_arrow(value))


def redistribute_list(per_subtask: list[list[Any]], mode: OperatorStateMode, new_parallelism: int) -> list[list[Any]]:
    """Deal operator list state out to ``new_parallelism`` subtasks (Flink's round-robin split or union)."""
    everything = [x for part in per_subtask for x in part]
    if mode is OperatorStateMode.UNION:
        return [list(everything) for _ in range(new_parallelism)]
    if mode is OperatorStateMode.BROADCAST:
        first = per_subtask[0] if per_subtask else []
        return [list(first) for _ in range(new_parallelism)]
    n = len(everything)
    base, extra = divmod(n, new_parallelism)
    out, pos = [], 0
    for i in range(new_parallelism):
        size = base + (1 if i < extra else 0)
        out.append(everything[pos : pos + size])
        pos += size
    return out
