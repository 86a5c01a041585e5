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

from typing import Any

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


def to_arrow(values: list[Any], type: pa.DataType | None = None) -> pa.Array:
    """An Arrow array of Python values: of ``type`` (from the decoder) when given and the values fit it
    (maps stay maps, a struct keeps its fields even where the first values are null), else Arrow's
    inference (structs for dicts); falls back to text for mixed types (raw bytes among decoded values)."""
    if type is not None:
        try:
            return pa.array(values, type=type, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError):
            pass
    try:
        return pa.array(values, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([None if v is None else repr(v) for v in values], type=pa.string())
