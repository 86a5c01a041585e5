"""Keyed state: descriptors and the state objects a process function uses.

A descriptor names a state and declares what it holds. The name is the
state's identity across restores: rename it and a restore reports the
mismatch. The state objects below carry the semantics (TTL, reduce,
aggregate) once, over a small storage interface (:class:`StateTable`) that
every backend implements, so both backends behave the same by construction.

=====================  ==========================================  ==================
descriptor             object you get                              Flink counterpart
=====================  ==========================================  ==================
ValueStateDescriptor   :class:`ValueState` value/update/clear      ValueState
ListStateDescriptor    :class:`ListState` get/add/add_all/update   ListState
MapStateDescriptor     :class:`MapState` get/put/remove/items, []  MapState
ReducingStateDescriptor :class:`ReducingState` get/add             ReducingState
AggregatingStateDescriptor :class:`AggregatingState` get/add       AggregatingState
=====================  ==========================================  ==================
"""

from __future__ import annotations

from itertools import chain
from typing import Any, Iterable, Iterator

from ..errors import SerializationError, StateNotDeclaredError
from .backends.table import StateTable
from .descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    StateKind,
    ValueStateDescriptor,
)
from .ttl import StateTtlConfig, expires_at, is_expired

__all__ = [
    "AggregateFunction",
    "AggregatingState",
    "AggregatingStateDescriptor",
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "ReducingState",
    "ReducingStateDescriptor",
    "State",
    "StateDescriptor",
    "StateKind",
    "ValueState",
    "ValueStateDescriptor",
]

_MISSING = object()


class KeyContext:
    """The key (and namespace) a keyed operator is processing right now."""

    __slots__ = ("key", "key_group", "namespace", "_set")

    def __init__(self) -> None:
        self.key: Any = None
        self.key_group: int = -1
        self.namespace: Any = None
        self._set = False

    def set(self, key: Any, key_group: int, namespace: Any = None) -> None:
        self.key = key
        self.key_group = key_group
        self.namespace = namespace
        self._set = True


class State:
    """Base of the state objects: the descriptor, its table, the key context, the clock and TTL."""

    __slots__ = ("descriptor", "table", "ctx", "clock", "ttl_ms", "update_on_read", "return_expired", "info", "_cleanup",
                 "_exact", "uk_info", "_uk_exact")

    def __init__(self, descriptor: StateDescriptor, table: StateTable, ctx: KeyContext, clock, cleanup=None) -> None:
        self.descriptor = descriptor
        self.table = table
        self.ctx = ctx
        self.clock = clock
        ttl: StateTtlConfig | None = getattr(descriptor, "ttl", None)
        self.ttl_ms = ttl.ttl_ms if ttl else 0
        self.update_on_read = bool(ttl and ttl.update_on_read)
        self.return_expired = bool(ttl and ttl.return_expired)
        self.info = descriptor.value_info
        self._exact = self.info.exact
        self.uk_info = descriptor.user_key_info
        self._uk_exact = self.uk_info.exact if self.uk_info is not None else None
        self._cleanup = cleanup  # incremental cleanup hook (heap backend), or None

    def _where(self) -> str:
        return f"state {self.descriptor.name!r}"

    def _check_ctx(self) -> KeyContext:
        ctx = self.ctx
        if not ctx._set:
            self._no_key()
        if self._cleanup is not None:
            self._cleanup()
        return ctx

    def _no_key(self) -> None:
        raise StateNotDeclaredError(
            f"{self._where()} was used outside a keyed context (no current key); "
            "keyed state is only available in process_element/on_timer of a keyed stream"
        )

    def _check_value(self, value: Any) -> None:
        if type(value) is not self._exact:
            self.info.check(value, self._where())

    # TTL helpers: entries are stored as (value, last_access_ms) when TTL is on.
    def _now(self) -> int:
        return self.clock.now_ms()

    def clear(self) -> None:
        ctx = self._check_ctx()
        self.table.remove(ctx.key_group, ctx.key, ctx.namespace)

    # --- many keys at once (a batch's distinct keys; see KeyedProcessFunction.process_batch) ---------
    def _plain(self) -> bool:
        """Whether many-key calls may go straight to the table (no TTL, no per-access cleanup)."""
        return not self.ttl_ms and self._cleanup is None

    def _each(self, key_groups: list[int], keys: list[Any], call) -> list[Any]:
        """``call(i)`` with the key context on ``(key_groups[i], keys[i])`` (default namespace) for
        each key in turn, the context restored after: the one-key methods, key by key (with TTL)."""
        ctx = self.ctx
        saved = (ctx.key, ctx.key_group, ctx.namespace, ctx._set)
        out = []
        try:
            for i, (g, k) in enumerate(zip(key_groups, keys)):
                ctx.key, ctx.key_group, ctx.namespace, ctx._set = k, g, None, True
                out.append(call(i))
        finally:
            ctx.key, ctx.key_group, ctx.namespace, ctx._set = saved
        return out

    def clear_many(self, key_groups: list[int], keys: list[Any]) -> None:
        """:meth:`clear` for each key (default namespace)."""
        self.table.remove_many(key_groups, keys)


class ValueState(State):
    """One value per key (and namespace)."""

    __slots__ = ()

    def value(self, default: Any = None) -> Any:
        ctx = self.ctx
        if not ctx._set:
            self._no_key()
        if self._cleanup is not None:
            self._cleanup()
        e = self.table.get(ctx.key_group, ctx.key, ctx.namespace)
        if e is None:
            return default
        if not self.ttl_ms:
            return e
        v, ts = e
        now = self.clock.now_ms()
        if is_expired(ts, self.ttl_ms, now):
            self.table.remove(ctx.key_group, ctx.key, ctx.namespace)
            return v if self.return_expired else default
        if self.update_on_read:
            self.table.put(ctx.key_group, ctx.key, ctx.namespace, (v, now))
        return v

    def update(self, value: Any) -> None:
        ctx = self.ctx
        if not ctx._set:
            self._no_key()
        if self._cleanup is not None:
            self._cleanup()
        if value is None:
            self.table.remove(ctx.key_group, ctx.key, ctx.namespace)
            return
        if type(value) is not self._exact:
            self.info.check(value, self._where())
        self.table.put(ctx.key_group, ctx.key, ctx.namespace, (value, self.clock.now_ms()) if self.ttl_ms else value)

    def values_of(self, key_groups: list[int], keys: list[Any], default: Any = None) -> list[Any]:
        """:meth:`value` of each key (default namespace), read in one call to the backend."""
        if not self._plain():
            return self._each(key_groups, keys, lambda i: self.value(default))
        got = self.table.get_many(key_groups, keys)
        return got if default is None else [default if v is None else v for v in got]

    def update_many(self, key_groups: list[int], keys: list[Any], values: list[Any]) -> None:
        """:meth:`update` of each key (default namespace) to ``values[i]`` (None clears it)."""
        if not self._plain() or None in values:
            self._each(key_groups, keys, lambda i: self.update(values[i]))
            return
        exact = self._exact
        if not set(map(type, values)) <= {exact}:  # one pass in C when every value has the exact type
            for v in values:
                if type(v) is not exact:
                    self.info.check(v, self._where())
        self.table.put_many(key_groups, keys, values)


class ReducingState(State):
    """A value folded with the descriptor's reduce function."""

    __slots__ = ()

    def get(self, default: Any = None) -> Any:
        return ValueState.value(self, default)  # type: ignore[arg-type]

    def add(self, value: Any) -> None:
        ctx = self._check_ctx()
        cur = ValueState.value(self)  # type: ignore[arg-type]
        new = value if cur is None else self.descriptor.reduce_function(cur, value)  # type: ignore[attr-defined]
        ValueState.update(self, new)  # type: ignore[arg-type]
        del ctx


class AggregatingState(State):
    """An accumulator built by the descriptor's :class:`AggregateFunction`."""

    __slots__ = ()

    def get(self, default: Any = None) -> Any:
        acc = ValueState.value(self)  # type: ignore[arg-type]
        if acc is None:
            return default
        return self.descriptor.aggregate_function.get_result(acc)  # type: ignore[attr-defined]

    def add(self, value: Any) -> None:
        fn: AggregateFunction = self.descriptor.aggregate_function  # type: ignore[attr-defined]
        acc = ValueState.value(self)  # type: ignore[arg-type]
        if acc is None:
            acc = fn.create_accumulator()
        ValueState.update(self, fn.add(value, acc))  # type: ignore[arg-type]


class ListState(State):
    """A list per key. With TTL every element carries its own last-access time."""

    __slots__ = ()

    def get(self) -> list[Any]:
        ctx = self._check_ctx()
        elems = self.table.get(ctx.key_group, ctx.key, ctx.namespace)
        if not elems:
            return []
        if not self.ttl_ms:
            return list(elems)
        now = self.clock.now_ms()
        ttl = self.ttl_ms
        alive = [(v, ts) for v, ts in elems if not is_expired(ts, ttl, now)]
        # Flink's TtlListState: unexpired elements are refreshed on read with
        # OnReadAndWrite even when expired ones are returned alongside them.
        out = [v for v, _ in (elems if self.return_expired else alive)]
        if self.update_on_read and alive:
            self.table.put(ctx.key_group, ctx.key, ctx.namespace, [(v, now) for v, _ in alive])
        elif len(alive) != len(elems):
            if alive:
                self.table.put(ctx.key_group, ctx.key, ctx.namespace, alive)
            else:
                self.table.remove(ctx.key_group, ctx.key, ctx.namespace)
        return out

    def __iter__(self) -> Iterator[Any]:
        return iter(self.get())

    def add(self, value: Any) -> None:
        if value is None:
            raise SerializationError(f"{self._where()}: cannot add None to a list state")
        ctx = self.ctx  # _check_ctx and _check_value inlined: add is called once per record in many jobs
        if not ctx._set:
            self._no_key()
        if self._cleanup is not None:
            self._cleanup()
        if type(value) is not self._exact:
            self.info.check(value, self._where())
        self.table.append(ctx.key_group, ctx.key, ctx.namespace, [(value, self.clock.now_ms()) if self.ttl_ms else value])

    def add_all(self, values: Iterable[Any]) -> None:
        values = list(values)
        if not values:
            return
        ctx = self._check_ctx()
        for v in values:
            if v is None:
                raise SerializationError(f"{self._where()}: cannot add None to a list state")
            self._check_value(v)
        if self.ttl_ms:
            now = self.clock.now_ms()
            values = [(v, now) for v in values]
        self.table.append(ctx.key_group, ctx.key, ctx.namespace, values)

    def update(self, values: Iterable[Any]) -> None:
        ctx = self._check_ctx()
        values = list(values)
        if not values:
            self.table.remove(ctx.key_group, ctx.key, ctx.namespace)
            return
        for v in values:
            self._check_value(v)
        if self.ttl_ms:
            now = self.clock.now_ms()
            values = [(v, now) for v in values]
        self.table.put(ctx.key_group, ctx.key, ctx.namespace, values)

    def get_many(self, key_groups: list[int], keys: list[Any]) -> list[list[Any]]:
        """:meth:`get` of each key (default namespace), read in one call to the backend."""
        if not self._plain():
            return self._each(key_groups, keys, lambda i: self.get())
        return [list(e) if e else [] for e in self.table.get_many(key_groups, keys)]

    def pop_many(self, key_groups: list[int], keys: list[Any]) -> list[list[Any]]:
        """:meth:`get` then :meth:`clear` of each key (default namespace): the lists are handed
        over as stored, not copied, since the state no longer holds them."""
        if not self._plain():
            got = self.get_many(key_groups, keys)
            self.clear_many(key_groups, keys)
            return got
        return [e if e else [] for e in self.table.pop_many(key_groups, keys)]

    def _checked(self, lists: list[list[Any]], drawn_from: list[Any] | None = None) -> None:
        if drawn_from is not None and set(map(type, drawn_from)) <= {self._exact}:
            return
        if set(map(type, chain.from_iterable(lists))) <= {self._exact}:
            return
        for elems in lists:
            for v in elems:
                if v is None:
                    raise SerializationError(f"{self._where()}: cannot add None to a list state")
                if type(v) is not self._exact:
                    self.info.check(v, self._where())

    def add_all_many(self, key_groups: list[int], keys: list[Any], lists: list[list[Any]],
                     handed_over: bool = False, drawn_from: list[Any] | None = None) -> None:
        """:meth:`add_all` of ``lists[i]`` to each key's list (default namespace). ``handed_over``:
        the caller neither keeps nor changes the lists after the call (the heap backend then keeps
        a new key's list itself instead of a copy). ``drawn_from``: a list holding every element
        of ``lists`` (say the batch's records, which the lists regroup by key): the elements' types
        are checked there, in its order (one pass over memory read in order, instead of the
        regrouped elements' scattered reads), and in ``lists`` only if one of it fails."""
        if not self._plain():
            self._each(key_groups, keys, lambda i: self.add_all(lists[i]))
            return
        self._checked(lists, drawn_from)
        self.table.append_many(key_groups, keys, lists, handed_over=handed_over)

    def update_many(self, key_groups: list[int], keys: list[Any], lists: list[list[Any]]) -> None:
        """:meth:`update` of each key's list (default namespace) to ``lists[i]`` (empty clears it)."""
        if not self._plain() or not all(lists):
            self._each(key_groups, keys, lambda i: self.update(lists[i]))
            return
        self._checked(lists)
        self.table.put_many(key_groups, keys, [list(x) for x in lists])


class MapMethods:
    """The MapState methods that follow from ``get``, ``put``, ``remove`` and ``items``.

    Shared by the engine's :class:`MapState` and the Spark adapter's map proxy, so the
    two agree on what ``in``, ``len``, ``del`` and iteration mean.
    """

    __slots__ = ()

    def __getitem__(self, user_key: Any) -> Any:
        v = self.get(user_key, _MISSING)
        if v is _MISSING:
            raise KeyError(user_key)
        return v

    def __setitem__(self, user_key: Any, value: Any) -> None:
        self.put(user_key, value)

    def put_all(self, entries: dict[Any, Any]) -> None:
        for k, v in entries.items():
            self.put(k, v)

    def __delitem__(self, user_key: Any) -> None:
        if not self.contains(user_key):
            raise KeyError(user_key)
        self.remove(user_key)

    def contains(self, user_key: Any) -> bool:
        return self.get(user_key, _MISSING) is not _MISSING

    def __contains__(self, user_key: Any) -> bool:
        return self.contains(user_key)

    def keys(self) -> list[Any]:
        return [k for k, _ in self.items()]

    def values(self) -> list[Any]:
        return [v for _, v in self.items()]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.items())

    def is_empty(self) -> bool:
        return not self.items()


class MapState(MapMethods, State):
    """A map per key. With TTL every map entry carries its own last-access time."""

    __slots__ = ()

    def _read(self, ctx: KeyContext, uk: Any, e: Any) -> Any:
        """Apply TTL to one stored map entry; _MISSING when not visible."""
        if not self.ttl_ms:
            return e
        v, ts = e
        now = self.clock.now_ms()
        if is_expired(ts, self.ttl_ms, now):
            self.table.map_remove(ctx.key_group, ctx.key, ctx.namespace, uk)
            return v if self.return_expired else _MISSING
        if self.update_on_read:
            self.table.map_put(ctx.key_group, ctx.key, ctx.namespace, uk, (v, now))
        return v

    def get(self, user_key: Any, default: Any = None) -> Any:
        ctx = self._check_ctx()
        e = self.table.map_get(ctx.key_group, ctx.key, ctx.namespace, user_key)
        if e is None:
            # Without TTL a stored None value (allowed, as in Flink) looks like a missing key.
            if default is not None and not self.ttl_ms and self.table.map_contains(
                ctx.key_group, ctx.key, ctx.namespace, user_key
            ):
                return None
            return default
        v = self._read(ctx, user_key, e)
        return default if v is _MISSING else v

    def put(self, user_key: Any, value: Any) -> None:
        ctx = self._check_ctx()
        if user_key is None:
            raise SerializationError(f"{self._where()}: a map key must not be None")
        if type(user_key) is not self._uk_exact:
            self.uk_info.check(user_key, self._where() + " key")
        if value is not None and type(value) is not self._exact:
            self.info.check(value, self._where())
        self.table.map_put(
            ctx.key_group, ctx.key, ctx.namespace, user_key, (value, self.clock.now_ms()) if self.ttl_ms else value
        )

    def remove(self, user_key: Any) -> None:
        ctx = self._check_ctx()
        self.table.map_remove(ctx.key_group, ctx.key, ctx.namespace, user_key)

    def items(self) -> list[tuple[Any, Any]]:
        ctx = self._check_ctx()
        out = []
        for uk, e in list(self.table.map_items(ctx.key_group, ctx.key, ctx.namespace)):
            v = self._read(ctx, uk, e)
            if v is not _MISSING:
                out.append((uk, v))
        return out


STATE_CLASSES: dict[StateKind, type[State]] = {
    StateKind.VALUE: ValueState,
    StateKind.LIST: ListState,
    StateKind.MAP: MapState,
    StateKind.REDUCING: ReducingState,
    StateKind.AGGREGATING: AggregatingState,
}


def entry_expiry(descriptor: StateDescriptor, last_access_ms: int | None) -> int | None:
    """When a stored entry expires, or None without TTL."""
    ttl: StateTtlConfig | None = getattr(descriptor, "ttl", None)
    if ttl is None or last_access_ms is None:
        return None
    return expires_at(last_access_ms, ttl.ttl_ms)
