"""Turning decoded state entries into rows of the public contract.

Both on-disk layouts end up here:

* *key/value layout* (canonical savepoints, RocksDB full snapshots and SST files):
  one entry per value / list / map entry / timer, as a pair of byte strings.
  The key is ``key-group prefix`` (1 byte when max parallelism <= 128, else 2,
  big-endian) + serialized key + serialized namespace (+ map user key). When
  both key and namespace serializers are variable-length, each of them is
  followed by its length as 1-4 little-endian bytes. Timers are keyed by
  ``prefix`` + the timer (timestamp, key, namespace) with an empty value. Values:
  a value state's value; a list's elements joined by ``,`` (0x2C), the
  delimiter of RocksDB's string-append merge operator; a map value as
  ``bool isNull`` + value.
* *heap layout* (HashMap backend checkpoints and native savepoints): decoded
  objects (namespace, key, whole list or map) handed over directly.

:class:`RowBuffer` collects columns for one (operator, state, subtask) and
builds the Arrow piece, unwrapping TTL values into ``last_access``.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any, Callable

import pandas as pd
import pyarrow as pa

from ...errors import FlinkFormatError
from ...keygroups import JavaInt

from .datainput import DataInput
from .serializers import Decoder, TimerDecoder, TtlValue, TupleDecoder, UnknownLayout
from .statemeta import StateMeta

LIST_DELIMITER = 0x2C


def prefix_bytes(max_parallelism: int) -> int:
    return 2 if max_parallelism > 128 else 1


def _var_len_size(n: int) -> int:
    size = 1
    while n >= 256:
        n >>= 8
        size += 1
    return size


class RowBuffer:
    """Columns of one piece; ``add`` unwraps TTL values."""

    __slots__ = ("meta", "keys", "key_groups", "namespaces", "user_keys", "values", "last_access", "sizes", "raw_notes", "raw_reason")

    def __init__(self, meta: StateMeta) -> None:
        self.meta = meta
        self.keys: list[Any] = []
        self.key_groups: list[int] = []
        self.namespaces: list[Any] = []
        self.user_keys: list[Any] = []
        self.values: list[Any] = []
        self.last_access: list[int | None] = []
        self.sizes: list[int] = []
        self.raw_notes = 0
        self.raw_reason: str | None = None  # why the first raw value stayed raw (what would decode it)

    def add(self, kg: int, key: Any, ns: Any, user_key: Any, value: Any, size: int) -> None:
        if type(value) is TtlValue:
            self.last_access.append(value.last_access)
            value = value.value
        else:
            self.last_access.append(None)
        self.key_groups.append(kg)
        self.keys.append(key)
        self.namespaces.append(ns)
        self.user_keys.append(user_key)
        self.values.append(value)
        self.sizes.append(size)

    def __len__(self) -> int:
        return len(self.keys)


class KeyValueDecoder:
    """Decodes key/value-layout entries of one state into a :class:`RowBuffer`."""

    def __init__(self, meta: StateMeta, key_decoder: Decoder, max_parallelism: int) -> None:
        self.meta = meta
        self.key_decoder = key_decoder
        self.prefix = prefix_bytes(max_parallelism)
        ns = meta.namespace_decoder
        self.ns_decoder = ns
        self.ambiguous = key_decoder.fixed_length < 0 and ns is not None and ns.fixed_length < 0
        self.elem = meta.element_decoder
        self.user_key = meta.user_key_decoder
        self.kind = meta.kind
        self.timer = meta.value_decoder if isinstance(meta.value_decoder, TimerDecoder) else None

    def _key_ns(self, inp: DataInput):
        start = inp.pos
        key = self.key_decoder.read(inp)
        if self.ambiguous:
            inp.skip(_var_len_size(inp.pos - start))
        ns_start = inp.pos
        ns = self.ns_decoder.read(inp) if self.ns_decoder is not None else None
        if self.ambiguous:
            inp.skip(_var_len_size(inp.pos - ns_start))
        return key, ns

    def decode(self, out: RowBuffer, kg: int, kbytes: bytes, vbytes: bytes) -> None:
        inp = DataInput(kbytes, self.prefix)
        if self.timer is not None:
            ts, key, ns = self.timer.read(inp)
            out.add(kg, key, ns, None, ts, len(kbytes))
            return
        key, ns = self._key_ns(inp)
        kind = self.kind
        if kind == "map":
            uk = self.user_key.read(inp) if self.user_key is not None else inp.read_bytes(inp.remaining())
            try:
                vin = DataInput(vbytes, bounded=True)
                value = None if vin.read_bool() else self.elem.read(vin)
            except UnknownLayout as exc:
                value = vbytes
                out.raw_notes += 1
                out.raw_reason = out.raw_reason or str(exc)
            out.add(kg, key, ns, uk, value, len(vbytes))
        elif kind == "list":
            vin = DataInput(vbytes)
            i = 0
            try:
                while not vin.at_end():
                    s = vin.pos
                    v = self.elem.read(vin)
                    out.add(kg, key, ns, i, v, vin.pos - s)
                    i += 1
                    if not vin.at_end():
                        d = vin.read_ubyte()
                        if d != LIST_DELIMITER:
                            raise FlinkFormatError(f"key group {kg}: list element delimiter at offset {vin.pos - 1} of the value: found {d:#04x}, expected 0x2c")
            except UnknownLayout as exc:
                out.add(kg, key, ns, None, vbytes, len(vbytes))
                out.raw_notes += 1
                out.raw_reason = out.raw_reason or str(exc)
        else:
            try:
                value = self.elem.read(DataInput(vbytes, bounded=True)) if self.elem is not None else vbytes
            except UnknownLayout as exc:
                value = vbytes
                out.raw_notes += 1
                out.raw_reason = out.raw_reason or str(exc)
            out.add(kg, key, ns, None, value, len(vbytes))


def dict_key(k: Any) -> Any:
    """``k`` where it can be a dict key, else its ``repr`` (a decoded key may be a list or a dict)."""
    try:
        hash(k)
        return k
    except TypeError:
        return repr(k)


def hashable_keys(decoder: Decoder, keys: list[Any]) -> list[Any] | None:
    """Keys as explorer.keygroups hashes them, or None when Java's hash is not reproducible."""
    kind = decoder.key_kind
    if kind in ("str", "long", "bool", "double"):
        return keys
    if kind == "int":
        return [JavaInt(k) for k in keys]
    if kind == "tuple" and isinstance(decoder, TupleDecoder):
        out = []
        for k in keys:
            fields = []
            for i, f in enumerate(decoder.fields):
                v = k[f"f{i}"]
                fields.append(JavaInt(v) if f.key_kind == "int" and v is not None else v)
            out.append(tuple(fields))
        return out
    return None


def to_arrow(values: list[Any], type: pa.DataType | None = None, note: Callable[[str], None] | None = None) -> pa.Array:
    """An Arrow array of Python values that gives the same values back (``base.python_values``).

    Of ``type`` (from the decoder) when given and the values fit it; else built from the values
    themselves: one Python type -> its Arrow type (dicts with one set of string keys -> a struct,
    other dicts -> a map, lists -> a list), several -> a dense union with one child per Python type
    (raw bytes among decoded values, ints among floats, ...), nested the same way. Tuples, sets and
    frozensets are union children named after them (``base.PY_CONTAINER_KINDS``), so they come back as what they were.
    Nothing is turned into text, but a Python type no Arrow type holds (none of the decoders makes one), and then
    ``note`` is told."""
    if type is not None:
        try:
            return pa.array(values, type=type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, TypeError, ValueError):
            pass
    try:
        return _lossless(values)
    except _NoArrowType as exc:  # a Python type no Arrow type holds (no decoder makes one today)
        if note is not None:
            note(f"values of Python type {exc} have no Arrow type; they are shown as their repr text")
        return pa.array([None if v is None else repr(v) for v in values], type=pa.string())


def infer_array(values: list[Any]) -> pa.Array:
    """The Arrow array :func:`to_arrow` makes of ``values`` when no type is given (for the column-wise decoders,
    which reproduce it; a Python type no Arrow type holds raises)."""
    return _lossless(values)


_NONE = type(None)
_AS_IS = (str, bytes, bool, float)  # Arrow's inference keeps these exactly


def _lossless(values: list[Any]) -> pa.Array:
    kinds = set(map(type, values))
    kinds.discard(_NONE)
    if not kinds:
        return pa.nulls(len(values))
    if len(kinds) == 1:
        kind = next(iter(kinds))
        if kind in _AS_IS:
            return pa.array(values, type=_SCALAR_TYPES[kind])
        if kind is dict:
            return _dicts(values)
        if kind is list:
            return _lists(values)
        if kind is int:
            return _ints(values)
        if kind is pd.Timestamp:  # Arrow's inference would keep microseconds only
            zones = {str(v.tz) for v in values if v is not None}
            if len(zones) == 1:
                zone = next(iter(zones))
                return pa.array(values, type=pa.timestamp("ns", tz=None if zone == "None" else zone))
        if kind not in _CONTAINERS:
            try:
                return pa.array(values)  # dates, datetimes, Decimals, ...
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError, TypeError, ValueError):
                pass
    return _union(values)


_CONTAINERS = (tuple, set, frozenset)  # kept as union children named after them (base.PY_CONTAINER_KINDS)
_SCALAR_TYPES = {str: pa.string(), bytes: pa.binary(), bool: pa.bool_(), float: pa.float64()}
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _ints(values: list[Any]) -> pa.Array:
    try:
        return pa.array(values, type=pa.int64())
    except (OverflowError, pa.ArrowInvalid):
        pass
    small = [v if v is None or _INT64[0] <= v <= _INT64[1] else None for v in values]
    if all(a is b for a, b in zip(small, values)):  # pragma: no cover - pa.array would have taken them
        return pa.array(small, type=pa.int64())
    return _union(values, big_ints=True)  # ints beyond int64 are their own union child


def _valid_mask(values: list[Any]) -> pa.Array | None:
    if not any(v is None for v in values):
        return None
    return pa.array([v is None for v in values], type=pa.bool_())


def _dicts(values: list[Any]) -> pa.Array:
    keysets = {tuple(v) for v in values if v is not None}
    mask = _valid_mask(values)
    if len(keysets) == 1:
        names = next(iter(keysets))
        if names and all(type(n) is str for n in names) and len(set(names)) == len(names):
            cols = [_lossless([None if v is None else v[n] for v in values]) for n in names]
            return pa.StructArray.from_arrays(cols, names=list(names), mask=mask)
    offsets, ks, vs = [0], [], []
    for v in values:
        if v is not None:
            ks.extend(v)
            vs.extend(v.values())
        offsets.append(len(ks))
    keys = _lossless(ks)
    if keys.null_count:  # a None key: Arrow's map keys cannot be null
        return _union(values, dict_as_union=True)
    return pa.MapArray.from_arrays(pa.array(offsets, type=pa.int32()), keys, _lossless(vs), mask=mask)


def _lists(values: list[Any]) -> pa.Array:
    offsets, flat = [0], []
    for v in values:
        if v is not None:
            flat.extend(v)
        offsets.append(len(flat))
    return pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), _lossless(flat), mask=_valid_mask(values))


_OWN_CHILDREN = {"tuple", "set", "frozenset", "dict_items", "bigint", "bigint_digits"}  # base.PY_CONTAINER_KINDS


class _NoArrowType(ValueError):
    """Values of one Python type that no Arrow type holds (the caller falls back to their text, with a note)."""


def _union(values: list[Any], big_ints: bool = False, dict_as_union: bool = False) -> pa.Array:
    """A dense union with one child per Python type (nulls go to the first child)."""
    groups: dict[str, list[Any]] = {}
    codes = []
    offsets = []
    first = None
    for v in values:
        if v is None:
            name = first
        else:
            t = type(v)
            name = t.__name__ if t in _CONTAINERS or t in _SCALAR_TYPES or t in (int, dict, list) \
                else f"{t.__module__}.{t.__qualname__}"
            if t is pd.Timestamp or t is dt.datetime or t is dt.time:
                name = f"{name}[{v.tzinfo}]"  # naive and zoned values (or two zones) cannot share a column
            if big_ints and t is int and not _INT64[0] <= v <= _INT64[1]:
                name = "bigint" if len(str(abs(v))) <= 76 else "bigint_digits"
            elif dict_as_union and t is dict:
                name = "dict_items"
            if first is None:
                first = name
                if None in groups:  # leading nulls, before any kind was known
                    groups[name] = groups.pop(None)
        g = groups.setdefault(name, [])
        offsets.append(len(g))
        g.append(v)
        codes.append(name)
    if first is None:
        return pa.nulls(len(values))
    names = list(groups)
    code_of = {n: i for i, n in enumerate(names)}
    if len(names) == 1 and names[0] not in _OWN_CHILDREN:  # one Python type Arrow cannot hold in one column: no union helps
        raise _NoArrowType(names[0])
    children = []
    for n in names:
        g = groups[n]
        if n in ("tuple", "set", "frozenset"):
            children.append(_lists([None if v is None else list(v) for v in g]))
        elif n == "bigint":  # exact as a 76-digit decimal
            children.append(pa.array([None if v is None else Decimal(v) for v in g], type=pa.decimal256(76, 0)))
        elif n == "bigint_digits":
            children.append(pa.array([None if v is None else str(v) for v in g], type=pa.string()))
        elif n == "dict_items":  # a dict with a None key (Arrow's map keys cannot be null): its [key, value] pairs
            children.append(_lists([None if v is None else [[k, x] for k, x in v.items()] for v in g]))
        else:
            children.append(_lossless(g))
    return pa.UnionArray.from_dense(pa.array([code_of[c if c is not None else first] for c in codes], type=pa.int8()),
                                    pa.array(offsets, type=pa.int32()), children, field_names=names)
