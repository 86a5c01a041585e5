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
from typing import Any, Iterator

from ...errors import StateMigrationError
from ...keygroups import KeyGroupRange
from ..state import STATE_CLASSES, KeyContext, StateDescriptor, StateKind, _State
from ..ttl import is_expired

#: one stored row, flattened: list elements and map entries get one row each
#: (key_group, key, namespace, user_key_or_index_or_None, value, last_access_ms_or_None)
Row = tuple[int, Any, Any, Any, Any, "int | None"]


class StateTable(ABC):
    """Storage of one keyed state in one backend."""

    def __init__(self, descriptor: StateDescriptor, key_groups: KeyGroupRange) -> None:
        self.descriptor = descriptor
        self.kind: StateKind = descriptor.kind
        self.key_groups = key_groups
        self.has_ttl = getattr(descriptor, "ttl", None) is not None

    @property
    def name(self) -> str:
        return self.descriptor.name

    # --- single-address operations -------------------------------------------------
    @abstractmethod
    def get(self, key_group: int, key: Any, namespace: Any) -> Any: ...

    @abstractmethod
    def put(self, key_group: int, key: Any, namespace: Any, entry: Any) -> None: ...

    @abstractmethod
    def remove(self, key_group: int, key: Any, namespace: Any) -> None: ...

    def get_many(self, key_groups: list[int], keys: list[Any], namespace: Any = None) -> list[Any]:
        """``get`` for many keys of one namespace (backends may do it in bulk)."""
        get = self.get
        return [get(g, k, namespace) for g, k in zip(key_groups, keys)]

    def put_many(self, key_groups: list[int], keys: list[Any], entries: list[Any], namespace: Any = None) -> None:
        """``put`` for many keys of one namespace (backends may do it in bulk)."""
        put = self.put
        for g, k, e in zip(key_groups, keys, entries):
            put(g, k, namespace, e)

    def append(self, key_group: int, key: Any, namespace: Any, elements: list[Any]) -> None:
        cur = self.get(key_group, key, namespace)
        self.put(key_group, key, namespace, (list(cur) if cur else []) + list(elements))

    @abstractmethod
    def map_get(self, key_group: int, key: Any, namespace: Any, user_key: Any) -> Any: ...

    @abstractmethod
    def map_put(self, key_group: int, key: Any, namespace: Any, user_key: Any, entry: Any) -> None: ...

    @abstractmethod
    def map_remove(self, key_group: int, key: Any, namespace: Any, user_key: Any) -> None: ...

    @abstractmethod
    def map_items(self, key_group: int, key: Any, namespace: Any) -> Iterator[tuple[Any, Any]]: ...

    def map_contains(self, key_group: int, key: Any, namespace: Any, user_key: Any) -> bool:
        """Whether ``user_key`` is stored, even with a ``None`` value (``map_get`` cannot tell)."""
        return any(uk == user_key for uk, _ in self.map_items(key_group, key, namespace))

    # --- bulk operations ---------------------------------------------------------------
    @abstractmethod
    def addresses(self, key_groups: KeyGroupRange | None = None) -> Iterator[tuple[int, Any, Any]]:
        """Every (key_group, key, namespace) that holds something, in key-group order."""

    def keys(self, namespace: Any = None) -> Iterator[Any]:
        for _, key, ns in self.addresses():
            if ns == namespace:
                yield key

    def rows(self, key_groups: KeyGroupRange | None = None) -> Iterator[Row]:
        """Every stored entry flattened to :data:`Row`, in key-group order."""
        ttl = self.has_ttl
        kind = self.kind
        for kg, key, ns in self.addresses(key_groups):
            if kind is StateKind.MAP:
                for uk, e in self.map_items(kg, key, ns):
                    if ttl:
                        yield (kg, key, ns, uk, e[0], e[1])
                    else:
                        yield (kg, key, ns, uk, e, None)
            elif kind is StateKind.LIST:
                for i, e in enumerate(self.get(kg, key, ns) or ()):
                    if ttl:
                        yield (kg, key, ns, i, e[0], e[1])
                    else:
                        yield (kg, key, ns, i, e, None)
            else:
                e = self.get(kg, key, ns)
                if e is None:
                    continue
                if ttl:
                    yield (kg, key, ns, None, e[0], e[1])
                else:
                    yield (kg, key, ns, None, e, None)

    def load_restored(self, pending: Any, descriptor: StateDescriptor, operator: str) -> int:
        """Load a restored state (``pending.rows(descriptor, operator)``) into this empty table;
        a backend with a faster bulk path for the pending kind overrides this."""
        return self.load_rows(pending.rows(descriptor, operator))

    def load_rows(self, rows: Iterator[Row]) -> int:
        """Put rows back (restore). Returns how many were loaded."""
        n = 0
        ttl = self.has_ttl
        kind = self.kind
        pending_lists: dict[tuple[int, Any, Any], list[Any]] = {}
        for kg, key, ns, uk, value, ts in rows:
            if ttl and ts is None:
                raise StateMigrationError(
                    f"state {self.name!r} has TTL but a restored entry has no last-access time"
                )
            entry = (value, ts) if ttl else value
            if kind is StateKind.MAP:
                self.map_put(kg, key, ns, uk, entry)
            elif kind is StateKind.LIST:
                pending_lists.setdefault((kg, key, ns), []).append(entry)
            else:
                self.put(kg, key, ns, entry)
            n += 1
        for (kg, key, ns), elems in pending_lists.items():
            self.append(kg, key, ns, elems)
        return n

    def drop_expired(self, now_ms: int, ttl_ms: int) -> int:
        """Remove every expired entry (a full sweep). Returns how many were removed."""
        if not self.has_ttl:
            return 0
        removed = 0
        for kg, key, ns in list(self.addresses()):
            removed += self.drop_expired_at(kg, key, ns, now_ms, ttl_ms)
        return removed

    def drop_expired_at(self, kg: int, key: Any, ns: Any, now_ms: int, ttl_ms: int) -> int:
        kind = self.kind
        if kind is StateKind.MAP:
            gone = [uk for uk, (_, ts) in list(self.map_items(kg, key, ns)) if is_expired(ts, ttl_ms, now_ms)]
            for uk in gone:
                self.map_remove(kg, key, ns, uk)
            return len(gone)
        e = self.get(kg, key, ns)
        if e is None:
            return 0
        if kind is StateKind.LIST:
            alive = [x for x in e if not is_expired(x[1], ttl_ms, now_ms)]
            if len(alive) == len(e):
                return 0
            if alive:
                self.put(kg, key, ns, alive)
            else:
                self.remove(kg, key, ns)
            return len(e) - len(alive)
        if is_expired(e[1], ttl_ms, now_ms):
            self.remove(kg, key, ns)
            return 1
        return 0

    def entries_per_key_group(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for row in self.rows():
            counts[row[0]] = counts.get(row[0], 0) + 1
        return counts

    def clear_all(self) -> None:
        for kg, key, ns in list(self.addresses()):
            self.remove(kg, key, ns)


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
        self._states: dict[str, _State] = {}
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

    def get_state(self, descriptor: StateDescriptor, columnar: Any = None) -> _State:
        st = self._states.get(descriptor.name)
        if st is not None and st.descriptor == descriptor:
            return st
        table = self.register(descriptor, columnar)
        cls = STATE_CLASSES[descriptor.kind]
        st = cls(descriptor, table, self.ctx, self.clock, self._cleanup_hook(descriptor, table))
        self._states[descriptor.name] = st
        return st

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
