"""The interface every keyed state backend implements.

A backend holds the keyed state of one subtask: the key groups in its
:class:`~explorer.keygroups.KeyGroupRange`. Each registered state gets a
:class:`StateTable`, addressed by ``(key_group, key, namespace)`` and, for
map state, a user key. What a table stores per address is an *entry*:

* value / reducing / aggregating state: the value, or ``(value, last_access_ms)`` with TTL;
* list state: a Python list of elements, each ``(element, last_access_ms)`` with TTL;
* map state: per user key, the value, or ``(value, last_access_ms)`` with TTL.

The semantics (TTL, reduce, aggregate) live once in :mod:`explorer.engine.state`;
backends only store. The same test suite runs over every backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ...errors import StateMigrationError
from ...keygroups import KeyGroupRange
from ..descriptors import StateDescriptor
from ..state import STATE_CLASSES, KeyContext, State
from .table import Row, StateTable

__all__ = ["KeyedStateBackend", "Row", "StateTable"]

class KeyedStateBackend(ABC):
    """Keyed state of one subtask: one :class:`StateTable` per registered state."""

    #: short name written into snapshots ("heap", "rocksdb")
    name: str = "?"

    def __init__(self, max_parallelism: int, key_groups: KeyGroupRange, clock) -> None:
        self.max_parallelism = max_parallelism
        self.key_groups = key_groups
        self.clock = clock
        self.ctx = KeyContext()
        self.tables: dict[str, StateTable] = {}
        self._states: dict[str, State] = {}
        #: state restored from a snapshot, loaded when the job registers its descriptor
        self.restored: dict[str, Any] = {}
        self.operator_name = "?"

    @abstractmethod
    def _create_table(self, descriptor: StateDescriptor) -> StateTable: ...

    def _create_columnar_table(self, descriptor: StateDescriptor, dtype: Any) -> StateTable | None:
        """A table keeping numbers of ``dtype`` in columns for the built-in aggregates, or None when
        this backend has none (the aggregate then uses the ordinary table)."""
        return None

    def register(self, descriptor: StateDescriptor, columnar: Any = None) -> StateTable:
        """The table of ``descriptor``, created on first use; a second registration
        under the same name must declare the same kind and type. ``columnar`` (a NumPy
        dtype) asks for a columnar table when the backend has one."""
        table = self.tables.get(descriptor.name)
        if table is None:
            pending = self.restored.pop(descriptor.name, None)
            if pending is not None:
                pending.check(descriptor, self.operator_name)
            made = self._create_columnar_table(descriptor, columnar) if columnar is not None else None
            table = self.tables[descriptor.name] = made if made is not None else self._create_table(descriptor)
            if pending is not None:
                table.load_restored(pending, descriptor, self.operator_name)
            return table
        old = table.descriptor
        if old.kind is not descriptor.kind:
            raise StateMigrationError(
                f"state {descriptor.name!r} is registered as {old.kind.value} state "
                f"and again as {descriptor.kind.value} state"
            )
        if old.describe() != descriptor.describe():
            if old.describe()["value_type"] != descriptor.describe()["value_type"] or old.describe()["ttl"] != descriptor.describe()["ttl"]:
                raise StateMigrationError(
                    f"state {descriptor.name!r} is registered twice with different declarations: "
                    f"{old.describe()} and {descriptor.describe()}"
                )
        table.descriptor = descriptor  # keep the live functions (reduce / aggregate)
        return table

    def get_state(self, descriptor: StateDescriptor, columnar: Any = None) -> State:
        st = self._states.get(descriptor.name)
        if st is not None and st.descriptor == descriptor:
            return st
        table = self.register(descriptor, columnar)
        cls = STATE_CLASSES[descriptor.kind]
        st = cls(descriptor, table, self.ctx, self.clock, self._cleanup_hook(descriptor, table))
        self._states[descriptor.name] = st
        return st

    def has_ttl_state(self) -> bool:
        """Whether any registered state has TTL (the keyed operators' whole-batch paths are then
        left aside: each access's last-access time and cleanup stay exactly per record)."""
        return any(st.ttl_ms for st in self._states.values())

    def _cleanup_hook(self, descriptor: StateDescriptor, table: StateTable):
        return None

    def set_current_key(self, key: Any, key_group: int, namespace: Any = None) -> None:
        self.ctx.set(key, key_group, namespace)

    def end_batch(self) -> None:
        """The operator finished a batch of work (records, or the timers of a watermark or of
        processing time); a backend that buffers writes applies them here."""

    def background_cleanup(self, now_ms: int | None = None) -> int:
        """Drop expired entries of every TTL state (RocksDB: what compaction would drop)."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        n = 0
        for table in self.tables.values():
            ttl = getattr(table.descriptor, "ttl", None)
            if ttl is not None:
                n += table.drop_expired(now, ttl.ttl_ms)
        return n

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
