"""The storage interface of one keyed state: :class:`StateTable`, and its flattened :data:`Row`.

A table is addressed by ``(key_group, key, namespace)`` and, for map state, a
user key; what it stores per address is an *entry* (see
:mod:`explorer.engine.backends.base`). The state objects
(:mod:`explorer.engine.state`) work over this interface; every backend
implements it (:mod:`.heap`, :mod:`.rocksdb`, the Spark adapter's bucket tables).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from itertools import repeat
from operator import is_, itemgetter
from typing import Any, Iterator

from ...errors import StateMigrationError
from ...keygroups import KeyGroupRange
from ..descriptors import StateDescriptor, StateKind
from ..ttl import is_expired

__all__ = ["ColumnSnapshot", "Row", "StateTable"]

#: one stored row, flattened: list elements and map entries get one row each
#: (key_group, key, namespace, user_key_or_index_or_None, value, last_access_ms_or_None)
Row = tuple[int, Any, Any, Any, Any, "int | None"]


class ColumnSnapshot:
    """The rows of a value or list state, copied column-wise: what :meth:`StateTable.rows` would
    yield, but held as one list per column and one item per address where rows share it.

    ``key_groups``, ``keys`` and ``namespaces`` name each address once, in the rows' order;
    ``counts`` is the number of elements per address (list state; None: one each, value
    state); ``entries`` holds the entries (value state) or the elements (list state), as
    the table stores them (``(value, last_access)`` with TTL), address by address. Taking it
    copies references only (the values are the table's own, as the rows' would be); turning
    it into columns (:meth:`columns`) is the part left to the asynchronous phase.
    """

    __slots__ = ("kind", "ttl", "key_groups", "keys", "namespaces", "counts", "entries", "lists", "__weakref__")

    def __init__(self, kind: StateKind, ttl: bool, key_groups: list[int], keys: list[Any], namespaces: list[Any],
                 counts: list[int] | None, entries: list[Any] | None, lists: list[list[Any]] | None = None) -> None:
        self.kind, self.ttl = kind, ttl
        self.key_groups, self.keys, self.namespaces, self.counts, self.entries = key_groups, keys, namespaces, counts, entries
        #: list state taken copy-on-write (``entries`` None): per address the table's own list,
        #: whose first ``counts[i]`` elements are the snapshot's (the table only appends to a list
        #: it holds, and hands out a copy of one while a snapshot holds it); read with :meth:`elements`
        self.lists = lists

    def elements(self) -> list[Any]:
        """``entries`` of a list state, also when taken copy-on-write (then copied out now)."""
        if self.entries is not None:
            return self.entries
        return [e for lst, n in zip(self.lists, self.counts) for e in lst[:n]]

    def columns(self, values: Any = None) -> dict[str, Any]:
        """Keyword arguments for :func:`explorer.format.keyed.columns_to_table` (without the types);
        ``values``: the elements of a list state without TTL converted already (an Arrow array)."""
        if values is not None:
            if self.kind is not StateKind.LIST or self.ttl:
                raise ValueError(f"converted values are for list state without TTL, not {self.kind.value} state")
            return {"key_groups": self.key_groups, "keys": self.keys, "namespaces": self.namespaces,
                    "counts": self.counts, "values": values, "last_access": None}
        kgs, keys, nss, counts, entries = self.key_groups, self.keys, self.namespaces, self.counts, self.elements()
        if self.kind is not StateKind.LIST and any(map(is_, entries, repeat(None))):  # rows skip empty values
            keep = [i for i, e in enumerate(entries) if e is not None]
            kgs, keys, nss = [kgs[i] for i in keep], [keys[i] for i in keep], [nss[i] for i in keep]
            entries = [entries[i] for i in keep]
        if self.ttl:
            values, last_access = list(map(itemgetter(0), entries)), list(map(itemgetter(1), entries))
        else:
            values, last_access = entries, None
        return {"key_groups": kgs, "keys": keys, "namespaces": nss, "counts": counts, "values": values,
                "last_access": last_access}


class StateTable(ABC):
    """Storage of one keyed state in one backend."""

    #: what a checkpoint writer keeps of this table between checkpoints to reuse (an
    #: optimisation only: :class:`explorer.engine.checkpoint.list_reuse.ListReuse`), or None
    snapshot_reuse: Any = None

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

    def remove_many(self, key_groups: list[int], keys: list[Any], namespace: Any = None) -> None:
        """``remove`` for many keys of one namespace (backends may do it in bulk)."""
        remove = self.remove
        for g, k in zip(key_groups, keys):
            remove(g, k, namespace)

    def append(self, key_group: int, key: Any, namespace: Any, elements: list[Any]) -> None:
        cur = self.get(key_group, key, namespace)
        self.put(key_group, key, namespace, (list(cur) if cur else []) + list(elements))

    def pop_many(self, key_groups: list[int], keys: list[Any], namespace: Any = None) -> list[Any]:
        """``get`` then ``remove`` for many keys of one namespace (the entries handed over)."""
        got = self.get_many(key_groups, keys, namespace)
        remove = self.remove
        for g, k in zip(key_groups, keys):
            remove(g, k, namespace)
        return got

    def append_many(self, key_groups: list[int], keys: list[Any], lists: list[list[Any]], namespace: Any = None,
                    handed_over: bool = False) -> None:
        """``append`` for many keys of one namespace (backends may do it in bulk). ``handed_over``:
        the lists are the caller's no more, so a backend keeping objects may keep them as they are."""
        append = self.append
        for g, k, e in zip(key_groups, keys, lists):
            if e:
                append(g, k, namespace, e)

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

    def snapshot_columns(self) -> ColumnSnapshot | None:
        """A copy of :meth:`rows` taken column-wise (what a heap checkpoint's synchronous phase
        takes), or None when this table has no such copy (then :meth:`rows` is copied)."""
        return None

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
