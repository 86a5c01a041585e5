"""Our state descriptors as Spark state variables, and the engine's state API over them.

Each descriptor becomes one Spark state variable of the same name:

==========================  ======================================================
descriptor                  Spark state variable (schema)
==========================  ======================================================
ValueStateDescriptor(T)     ``getValueState(name, struct<value: T>)``
ListStateDescriptor(T)      ``getListState(name, struct<value: T>)``
MapStateDescriptor(K, V)    ``getMapState(name, struct<key: K>, struct<value: V>)``
ReducingStateDescriptor     a value state holding the reduced value
AggregatingStateDescriptor  a value state holding the accumulator
==========================  ======================================================

with ``T`` the Spark type of the declared type's Arrow type
(:mod:`explorer.format.types`): dataclasses are structs, ``list[T]`` arrays,
``dict[K, V]`` maps, tuples structs of ``f0, f1 ...``. TTL becomes the state
variable's ``ttlDurationMs``.

**Read once, write once.** Every call on a Spark state variable is a round
trip from the Python worker to the JVM. The proxies below read a key's state
at its first use in a micro-batch, keep reads and writes in Python while the
key's records are processed, and write what changed once when the key is done
(list appends without a read become one ``appendList``; registered timers are
deduplicated). That is what makes the adapter several times faster than a
straightforward processor that calls the state API per record.

TTL semantics on Spark: Spark refreshes an entry's expiry on every write
(``ON_CREATE_AND_WRITE``) and never returns expired entries. ``ON_READ_AND_WRITE``
is emulated by writing back what was read; ``RETURN_EXPIRED_IF_NOT_CLEANED_UP``
cannot be reproduced (Spark drops expired values before we see them) and
behaves as ``NEVER_RETURN_EXPIRED``. TTL runs on Spark's processing time (the
micro-batch timestamp), not on an engine clock.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

from ..engine.state import MapMethods
from ..errors import JobError, SerializationError, StateNotDeclaredError
from ..format import types as ft

__all__ = ["spark_type", "state_schema", "StateBinding"]

_ABSENT = object()


# --- types ---------------------------------------------------------------------------------
def spark_type(declared: Any):
    """The Spark SQL type a declared state type is stored as."""
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(ft.type_info(declared).arrow_type)


def state_schema(declared: Any, field: str = "value"):
    """``struct<field: T>``: the schema of one state variable's values (or map keys)."""
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(field, spark_type(declared), True)])


def converters(info: ft.TypeInfo) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """(to_spark, from_spark) for values of ``info``: Python values <-> Spark's internal row values.

    Primitives pass through untouched (the common case costs nothing).
    """
    if isinstance(info, (ft._Int, ft._Float, ft._Bool, ft._Str, ft._Bytes)):
        return _identity, _identity
    if isinstance(info, ft._Optional):
        to_i, from_i = converters(info.inner)
        if to_i is _identity:
            return _identity, _identity
        return (lambda v: None if v is None else to_i(v)), (lambda v: None if v is None else from_i(v))
    if isinstance(info, ft._List):
        to_e, from_e = converters(info.element)
        if to_e is _identity:
            return list, (lambda v: None if v is None else list(v))
        return (lambda v: [to_e(x) for x in v]), (lambda v: None if v is None else [from_e(x) for x in v])
    if isinstance(info, ft._Dict):
        to_k, from_k = converters(info.key)
        to_v, from_v = converters(info.value)
        return (
            (lambda d: {to_k(k): to_v(v) for k, v in d.items()}),
            (lambda d: None if d is None else {from_k(k): from_v(v) for k, v in d.items()}),
        )
    if isinstance(info, ft._Tuple):
        pairs = [converters(f) for f in info.fields]
        return (
            (lambda t: tuple(p[0](x) for p, x in zip(pairs, t))),
            (lambda r: None if r is None else tuple(p[1](x) for p, x in zip(pairs, r))),
        )
    if isinstance(info, ft._Struct):
        names = [n for n, _, _ in info.fields]
        pairs = [converters(t) for _, t, _ in info.fields]
        cls = info.cls

        def to_spark(v):
            get = v.__getitem__ if isinstance(v, dict) else v.__getattribute__
            return tuple(p[0](get(n)) for p, n in zip(pairs, names))

        def from_spark(r):
            if r is None:
                return None
            vals = {n: p[1](x) for p, n, x in zip(pairs, names, r)}
            return cls(**vals) if cls is not None else vals

        return to_spark, from_spark
    raise SerializationError(f"no Spark conversion for declared type {info!r}")


def _identity(v: Any) -> Any:
    return v


# --- proxies -------------------------------------------------------------------------------
class _Proxy:
    """One state variable of the current key: cached reads, buffered writes."""

    __slots__ = ("descriptor", "name", "handle", "info", "check", "to_spark", "from_spark", "update_on_read",
                 "_binding", "where")

    def __init__(self, descriptor, handle, binding: "StateBinding") -> None:
        self.descriptor = descriptor
        self.name = descriptor.name
        self.handle = handle
        self.info = descriptor.value_info
        self.check = self.info.check
        self.to_spark, self.from_spark = converters(self.info)
        ttl = getattr(descriptor, "ttl", None)
        self.update_on_read = bool(ttl is not None and ttl.update_on_read)
        self._binding = binding
        self.where = f"state {self.name!r}"  # for messages; built once, not per call

    def _where(self) -> str:
        return self.where

    def _touch(self) -> None:
        if not self._binding.in_key:
            raise StateNotDeclaredError(
                f"{self._where()} was used outside a keyed context (no current key); "
                "keyed state is only available in process_element/on_timer"
            )
        self._binding.touched.append(self)

    def flush(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class ValueStateProxy(_Proxy):
    __slots__ = ("_loaded", "_value", "_dirty", "_stored")

    def __init__(self, descriptor, handle, binding) -> None:
        super().__init__(descriptor, handle, binding)
        self._reset()

    def _reset(self) -> None:
        self._loaded = False
        self._value = None
        self._dirty = False
        self._stored: bool | None = None  # None: not read, so unknown

    def _load(self) -> None:
        self._touch()
        row = self.handle.get()
        self._stored = row is not None
        self._value = None if row is None else self.from_spark(row[0])
        self._loaded = True
        if self.update_on_read and self._value is not None:
            self._dirty = True

    def value(self, default: Any = None) -> Any:
        if not self._loaded:
            self._load()
        v = self._value
        return default if v is None else v

    def update(self, value: Any) -> None:
        if value is None:
            self.clear()
            return
        self.check(value, self.where)
        if not self._loaded and not self._dirty:
            self._touch()
        self._value = value
        self._loaded = True
        self._dirty = True

    def clear(self) -> None:
        if not self._loaded and not self._dirty:
            self._touch()
        self._value = None
        self._loaded = True
        self._dirty = True

    def flush(self) -> None:
        if self._dirty:
            if self._value is None:
                if self._stored is not False:  # stored, or unknown: clear to be sure
                    self.handle.clear()
            else:
                self.handle.update((self.to_spark(self._value),))
        self._reset()


class ReducingStateProxy(ValueStateProxy):
    __slots__ = ()

    def get(self, default: Any = None) -> Any:
        return self.value(default)

    def add(self, value: Any) -> None:
        cur = self.value()
        self.update(value if cur is None else self.descriptor.reduce_function(cur, value))


class AggregatingStateProxy(ValueStateProxy):
    __slots__ = ()

    def get(self, default: Any = None) -> Any:
        acc = self.value()
        return default if acc is None else self.descriptor.aggregate_function.get_result(acc)

    def add(self, value: Any) -> None:
        fn = self.descriptor.aggregate_function
        acc = self.value()
        if acc is None:
            acc = fn.create_accumulator()
        self.update(fn.add(value, acc))


class ListStateProxy(_Proxy):
    __slots__ = ("_base", "_appended", "_replaced", "_active")

    def __init__(self, descriptor, handle, binding) -> None:
        super().__init__(descriptor, handle, binding)
        self._reset()

    def _reset(self) -> None:
        self._base: list | None = None  # what the store holds (None: not read)
        self._appended: list = []
        self._replaced = False
        self._active = False

    def _activate(self) -> None:
        if not self._active:
            self._touch()
            self._active = True

    def get(self) -> list[Any]:
        self._activate()
        if self._base is None:
            f = self.from_spark
            self._base = [f(r[0]) for r in self.handle.get()]
            if self.update_on_read and self._base:
                self._replaced = True  # write back to refresh every element's TTL
        return self._base + self._appended

    def __iter__(self) -> Iterator[Any]:
        return iter(self.get())

    def add(self, value: Any) -> None:
        if value is None:
            raise SerializationError(f"{self._where()}: cannot add None to a list state")
        self.check(value, self.where)
        self._activate()
        self._appended.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        for v in values:
            self.add(v)

    def update(self, values: Iterable[Any]) -> None:
        values = list(values)
        for v in values:
            if v is None:
                raise SerializationError(f"{self._where()}: cannot add None to a list state")
            self.check(v, self.where)
        self._activate()
        self._base = values
        self._appended = []
        self._replaced = True

    def clear(self) -> None:
        self.update([])

    def flush(self) -> None:
        to = self.to_spark
        if self._replaced:
            items = (self._base or []) + self._appended
            if items:
                self.handle.put([(to(v),) for v in items])
            else:
                self.handle.clear()
        elif self._appended:
            self.handle.appendList([(to(v),) for v in self._appended])
        self._reset()


class MapStateProxy(MapMethods, _Proxy):
    __slots__ = ("_cache", "_all", "_writes", "_removes", "_cleared", "_active", "key_to", "key_from", "key_check")

    def __init__(self, descriptor, handle, binding) -> None:
        super().__init__(descriptor, handle, binding)
        kinfo = descriptor.user_key_info
        self.key_to, self.key_from = converters(kinfo)
        self.key_check = kinfo.check
        self._reset()

    def _reset(self) -> None:
        self._cache: dict = {}  # user key -> value or _ABSENT, as stored
        self._all = False  # _cache holds the whole stored map
        self._writes: dict = {}
        self._removes: set = set()
        self._cleared = False
        self._active = False

    def _activate(self) -> None:
        if not self._active:
            self._touch()
            self._active = True

    def _stored(self, uk: Any) -> Any:
        if self._cleared:
            return _ABSENT
        try:
            return self._cache[uk]
        except KeyError:
            pass
        if self._all:
            return _ABSENT
        row = self.handle.getValue((self.key_to(uk),))
        v = _ABSENT if row is None else self.from_spark(row[0])
        self._cache[uk] = v
        if self.update_on_read and v is not _ABSENT and uk not in self._writes:
            self._writes[uk] = v
        return v

    def get(self, user_key: Any, default: Any = None) -> Any:
        self._activate()
        if user_key in self._writes:
            return self._writes[user_key]
        if user_key in self._removes:
            return default
        v = self._stored(user_key)
        return default if v is _ABSENT else v

    def put(self, user_key: Any, value: Any) -> None:
        if user_key is None:
            raise SerializationError(f"{self._where()}: a map key must not be None")
        self.key_check(user_key, self._where() + " key")
        if value is not None:
            self.check(value, self.where)
        self._activate()
        self._writes[user_key] = value
        self._removes.discard(user_key)

    def remove(self, user_key: Any) -> None:
        self._activate()
        self._writes.pop(user_key, None)
        self._removes.add(user_key)

    def items(self) -> list[tuple[Any, Any]]:
        self._activate()
        if not self._all and not self._cleared:
            kf, vf = self.key_from, self.from_spark
            self._cache = {kf(k[0]): vf(v[0]) for k, v in self.handle.iterator()}
            self._all = True
            if self.update_on_read:
                for k, v in self._cache.items():
                    self._writes.setdefault(k, v)
        merged = {} if self._cleared else {k: v for k, v in self._cache.items() if v is not _ABSENT}
        for k in self._removes:
            merged.pop(k, None)
        merged.update(self._writes)
        return list(merged.items())

    def clear(self) -> None:
        self._activate()
        self._cleared = True
        self._writes.clear()
        self._removes.clear()
        self._cache.clear()

    def flush(self) -> None:
        h, kt, vt = self.handle, self.key_to, self.to_spark
        if self._cleared:
            h.clear()
        else:
            for k in self._removes:
                if self._cache.get(k, None) is not _ABSENT:  # skip keys known not to be stored
                    h.removeKey((kt(k),))
        for k, v in self._writes.items():
            h.updateValue((kt(k),), (vt(v),))
        self._reset()


_PROXIES = {
    "value": ValueStateProxy,
    "list": ListStateProxy,
    "map": MapStateProxy,
    "reducing": ReducingStateProxy,
    "aggregating": AggregatingStateProxy,
}


class StateBinding:
    """The state variables of one running function, bound to a Spark ``StatefulProcessorHandle``."""

    def __init__(self, handle, ttl_allowed: bool) -> None:
        self.handle = handle
        self.ttl_allowed = ttl_allowed
        self.proxies: dict[str, _Proxy] = {}
        self.touched: list[_Proxy] = []
        self.in_key = False

    def get_state(self, descriptor) -> _Proxy:
        name = descriptor.name
        if name in self.proxies:
            if self.proxies[name].descriptor != descriptor:
                raise JobError(f"state {name!r} is declared twice with different descriptors")
            return self.proxies[name]
        kind = descriptor.kind.value
        ttl = getattr(descriptor, "ttl", None)
        ttl_ms = None if ttl is None else int(ttl.ttl_ms)
        if ttl_ms is not None and not self.ttl_allowed:
            raise JobError(
                f"state {name!r} has a TTL; Spark runs TTL on processing time: run it with "
                "time_mode='processing' (or 'event', where Spark uses the batch timestamp for TTL)"
            )
        h = self.handle
        if kind in ("value", "reducing", "aggregating"):
            spark_handle = h.getValueState(name, state_schema(_declared(descriptor)), ttl_ms)
        elif kind == "list":
            spark_handle = h.getListState(name, state_schema(descriptor.element_type), ttl_ms)
        elif kind == "map":
            spark_handle = h.getMapState(name, state_schema(descriptor.key_type, "key"),
                                         state_schema(descriptor.value_type), ttl_ms)
        else:  # pragma: no cover - every StateKind is listed
            raise JobError(f"state {name!r}: kind {kind!r} has no Spark mapping")
        proxy = _PROXIES[kind](descriptor, spark_handle, self)
        self.proxies[name] = proxy
        return proxy

    def flush(self) -> None:
        """Write what the current key changed (once per state variable)."""
        touched, self.touched = self.touched, []
        seen = set()
        for p in touched:
            if id(p) not in seen:
                seen.add(id(p))
                p.flush()


def _declared(descriptor) -> Any:
    kind = descriptor.kind.value
    if kind == "aggregating":
        return descriptor.accumulator_type
    return descriptor.type
