"""Vectorised decoding of key/value-layout entries with NumPy and Arrow.

The key/value layout (``rows``) stores every entry as two byte ranges. Once the
ranges of one state are known (``fullformat.scan`` or the SST reader), most
types can be decoded for all entries at once instead of entry by entry:

* fixed-width big-endian numbers are gathered into an ``(n, width)`` byte
  matrix (a zero-copy sliding-window view of the buffer) and viewed as
  ``>i8``/``>f8``...;
* ``StringValue`` strings are decoded into Arrow's buffers (UTF-8 bytes and
  offsets) by a numba kernel (``_column_kernels``), with their Java hash codes;
* keys that are POJOs, tuples and TTL wrappers decode field by field, as long as
  no field is null (a null shifts the following bytes row by row);
* lists of fixed-width elements split at every ``width + 1`` bytes.

Java ``hashCode`` values for key-group checks are computed the same way
(``String.hashCode`` by Horner's rule over UTF-16 units in wrapping uint32
arithmetic, in the string kernel). Values, map keys and list elements of every
other type (POJOs with nulls, Rows, collections, java.time, Kryo...) are decoded
column-wise by :mod:`.valuecolumns`, typed as the row path would type them.

Anything else raises :class:`Fallback`, and the caller decodes that state row by
row with ``rows.KeyValueDecoder``: same results, just slower.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from . import valuecolumns
from .buffers import Buf, Fallback, strings
from .serializers import (
    PRIMITIVES,
    Decoder,
    PojoDecoder,
    TimerDecoder,
    TimeWindowDecoder,
    TtlDecoder,
    TupleDecoder,
)
from .statemeta import StateMeta

_MASK32 = np.uint64(0xFFFFFFFF)
_SIGN = np.int64(-(1 << 63))

def _check(buf: Buf, pos: np.ndarray, width: int) -> None:
    if len(pos) and (pos.min() < 0 or pos.max() + width > len(buf.np)):
        raise Fallback("position out of range")


def _gather(buf: Buf, pos: np.ndarray, width: int) -> np.ndarray:
    """``(n, width)`` bytes starting at each position."""
    _check(buf, pos, width)
    if width == 1:
        return buf.np[pos][:, None]
    return buf.windows(width)[pos].view(np.uint8).reshape(len(pos), width)


def _fixed(buf: Buf, pos: np.ndarray, width: int, dtype: str) -> np.ndarray:
    _check(buf, pos, width)
    return buf.numbers(dtype)[pos].astype(dtype.replace(">", "="))


@dataclass
class Column:
    """A decoded column: Arrow values, Java hash codes (if reproducible), TTL timestamps."""

    values: pa.Array
    codes: np.ndarray | None = None
    ttl: np.ndarray | None = None
    #: results computed from this column, kept for states sharing it (``KeyCache``): max parallelism -> key groups
    key_groups: dict[int, np.ndarray] = field(default_factory=dict)


def _prim_name(dec: Decoder) -> str | None:
    for k, v in PRIMITIVES.items():
        if v is dec:
            return k
    return None


_FIXED = {
    "LongSerializer": (8, ">i8", pa.int64()),
    "IntSerializer": (4, ">i4", pa.int32()),
    "ShortSerializer": (2, ">i2", pa.int16()),
    "ByteSerializer": (1, ">i1", pa.int8()),
    "DoubleSerializer": (8, ">f8", pa.float64()),
    "FloatSerializer": (4, ">f4", pa.float32()),
}


def _long_codes(v: np.ndarray) -> np.ndarray:
    u = v.view(np.uint64)
    return ((u ^ (u >> np.uint64(32))) & _MASK32).astype(np.uint32)


def read(dec: Decoder, buf: Buf, pos: np.ndarray, want_codes: bool = False) -> tuple[Column, np.ndarray]:
    """Decode one value of ``dec`` at every position; returns the column and the positions after."""
    n = len(pos)
    name = _prim_name(dec)
    if name in _FIXED:
        width, dtype, arrow = _FIXED[name]
        v = _fixed(buf, pos, width, dtype)
        codes = None
        if want_codes:
            if name == "LongSerializer":
                codes = _long_codes(v)
            elif name == "IntSerializer":
                codes = v.astype(np.int64).astype(np.uint32)
            elif name == "DoubleSerializer":
                bits = v.view(np.int64).copy()
                bits[np.isnan(v)] = 0x7FF8000000000000
                codes = _long_codes(bits)
        return Column(pa.array(v, type=arrow), codes), pos + width
    if name == "BooleanSerializer":
        v = _gather(buf, pos, 1)[:, 0] != 0
        codes = np.where(v, 1231, 1237).astype(np.uint32) if want_codes else None
        return Column(pa.array(v, type=pa.bool_()), codes), pos + 1
    if name == "VoidNamespaceSerializer":
        return Column(pa.nulls(n)), pos + 1
    if name == "StringSerializer":
        return _strings(buf, pos, want_codes)
    if isinstance(dec, TimeWindowDecoder):
        start, end = _fixed(buf, pos, 8, ">i8"), _fixed(buf, pos + 8, 8, ">i8")
        arr = pa.StructArray.from_arrays([pa.array(start), pa.array(end)], names=["start", "end"])
        return Column(arr), pos + 16
    if isinstance(dec, TtlDecoder):
        ts = _fixed(buf, pos, 8, ">i8")
        col, end = read(dec.value, buf, pos + 8)
        return Column(col.values, None, ts), end
    if isinstance(dec, PojoDecoder):
        flags = _gather(buf, pos, 1)[:, 0]
        if n and not (flags == 2).all():
            raise Fallback("null or subclass POJO values")
        p = pos + 1
        arrays, names = [], []
        for fname, fdec in dec.fields:
            if fdec is None:
                raise Fallback("unknown POJO field serializer")
            if n and _gather(buf, p, 1).any():
                raise Fallback("null POJO fields")
            col, p = read(fdec, buf, p + 1)
            arrays.append(col.values)
            names.append(fname)
        return Column(pa.StructArray.from_arrays(arrays, names=names) if names else pa.nulls(n)), p
    if isinstance(dec, TupleDecoder):
        p = pos
        arrays, codes = [], None
        for i, f in enumerate(dec.fields):
            col, p = read(f, buf, p, want_codes and dec.key_kind == "tuple")
            arrays.append(col.values)
            if want_codes and dec.key_kind == "tuple":
                if col.codes is None:
                    want_codes = False
                    codes = None
                else:
                    c = col.codes.astype(np.uint32)
                    codes = c if codes is None else (codes * np.uint32(31) + c)
        names = [f"f{i}" for i in range(len(arrays))]
        return Column(pa.StructArray.from_arrays(arrays, names=names), codes if want_codes else None), p
    raise Fallback(f"no column decoder for {dec.describe() if dec is not None else 'an unknown serializer'}")


def _strings(buf: Buf, pos: np.ndarray, want_codes: bool) -> tuple[Column, np.ndarray]:
    """``StringValue`` strings with their Java hash codes (:func:`.buffers.strings`)."""
    values, codes, ends = strings(buf, pos, want_codes)
    return Column(values, codes), ends


class KeyCache:
    """The key column last decoded from a key buffer, reused when the next state's keys are the same bytes.

    The value states of one operator (one column family each) often hold the
    same keys in the same order; their key buffers (``sstvec`` rows, zero past
    each key) are then equal, and so are their key columns and hash codes. The
    check is exact: the same decoder and key-group prefix, equal key ranges and
    an equal buffer, byte for byte.
    """

    def __init__(self, size: int = 4) -> None:
        self._size = size
        self._entries: list[tuple] = []  # newest last
        self.hits = 0

    def read(self, key_dec: Decoder, prefix: int, buf: Buf, ks: np.ndarray, ke: np.ndarray) -> tuple[Column, np.ndarray]:
        for e in self._entries:
            if (e[0] is key_dec and e[1] == prefix and np.array_equal(e[2], ks) and np.array_equal(e[3], ke)
                    and np.array_equal(e[4], buf.np)):
                self.hits += 1
                return e[5], e[6]
        key, p = read(key_dec, buf, ks + prefix, True)
        if self._size > 0:
            self._entries = (self._entries + [(key_dec, prefix, ks, ke, buf.np, key, p)])[-self._size :]
        return key, p


@dataclass
class StateColumns:
    key: Column
    key_group: np.ndarray
    namespace: pa.Array
    user_key: pa.Array
    value: pa.Array
    last_access: np.ndarray | None
    size: np.ndarray


def _skip(dec: Decoder, buf: Buf, pos: np.ndarray, want_ttl: bool) -> Column:
    """An undecoded column of ``dec`` values at ``pos``: nulls, with TTL timestamps if wanted and stored."""
    ttl = _fixed(buf, pos, 8, ">i8") if want_ttl and isinstance(dec, TtlDecoder) else None
    return Column(pa.nulls(len(pos)), None, ttl)


def decode_state(
    meta: StateMeta, key_dec: Decoder, prefix: int, buf: Buf,
    ks: np.ndarray, ke: np.ndarray, vs: np.ndarray, ve: np.ndarray,
    columns: frozenset[str] | None = None, vbuf: Buf | None = None, key_cache: KeyCache | None = None,
) -> StateColumns:
    """Decode every entry of one state (key/value layout) at once; raises :class:`Fallback`.

    ``columns``: the contract columns wanted (None: all). Values and map keys
    not wanted are not decoded (they come back as nulls); keys, key groups,
    namespaces and sizes always are. ``vbuf``: the buffer ``vs``/``ve`` index,
    if not ``buf`` (which ``ks``/``ke`` index). ``key_cache``: see :class:`KeyCache`.
    """
    vbuf = buf if vbuf is None else vbuf
    want_value = columns is None or "value" in columns
    want_user_key = columns is None or "user_key" in columns
    want_ttl = columns is None or "last_access" in columns or "expires_at" in columns
    n = len(ks)
    nsdec = meta.namespace_decoder
    if key_dec.fixed_length < 0 and nsdec is not None and nsdec.fixed_length < 0:
        raise Fallback("ambiguous key/namespace lengths")
    head = _gather(buf, ks, prefix).astype(np.int64)
    kg = (head[:, 0] & 0x7F) if prefix == 1 else (((head[:, 0] & 0x7F) << 8) | head[:, 1])
    p = ks + prefix
    vdec = meta.value_decoder
    if isinstance(vdec, TimerDecoder):
        ts = _fixed(buf, p, 8, ">i8") ^ _SIGN
        key, p = read(vdec.key, buf, p + 8, True)
        ns, p = read(vdec.namespace, buf, p)
        if n and not np.array_equal(p, ke):
            raise Fallback("timer key length mismatch")
        return StateColumns(key, kg, ns.values, pa.nulls(n), pa.array(ts, type=pa.int64()), None, ke - ks)
    if key_cache is not None:
        key, p = key_cache.read(key_dec, prefix, buf, ks, ke)
    else:
        key, p = read(key_dec, buf, p, True)
    if nsdec is not None:
        nscol, p = read(nsdec, buf, p)
        ns = nscol.values
    else:
        ns = pa.nulls(n)
    kind = meta.kind
    elem = meta.element_decoder
    if kind == "map":
        if want_user_key:  # (the row path types map keys by Arrow's inference over their values)
            ukv, _, p = valuecolumns.values(meta.user_key_decoder, buf, p, ke, infer=True)
            uk = Column(ukv)
            if n and not np.array_equal(p, ke):
                raise Fallback("map key length mismatch")
        else:
            uk = Column(pa.nulls(n))
        if want_value:
            present = _gather(vbuf, vs, 1)[:, 0] == 0 if n else np.ones(0, dtype=bool)
            values, ttl, q = valuecolumns.values(elem, vbuf, vs + 1, ve, present)
            if n and not np.array_equal(q, ve):
                raise Fallback("map value length mismatch")
            return StateColumns(key, kg, ns, uk.values, values, ttl, ve - vs)
        if n and _gather(vbuf, vs, 1).any():
            raise Fallback("null map values")
        v = _skip(elem, vbuf, vs + 1, want_ttl)
        return StateColumns(key, kg, ns, uk.values, v.values, v.ttl, ve - vs)
    if n and not np.array_equal(p, ke):
        raise Fallback("key length mismatch")
    if kind == "list":
        width = elem.fixed_length if not isinstance(elem, TtlDecoder) else (
            8 + elem.value.fixed_length if elem.value.fixed_length >= 0 else -1)
        if width < 0 or _column_read(elem) is None:
            if not want_value:
                raise Fallback("variable-width list elements, values not wanted")
            values, ttl, rows, within, sizes = valuecolumns.elements(elem, vbuf, vs, ve)
            take = pa.array(rows)
            keycol = Column(key.values.take(take), key.codes[rows] if key.codes is not None else None)
            return StateColumns(keycol, kg[rows], ns.take(take), pa.array(within, type=pa.int64()),
                                values, ttl, sizes)
        span = ve - vs + 1
        if n and (span % (width + 1)).any():
            raise Fallback("list length not a multiple of the element width")
        counts = span // (width + 1)
        counts[ve == vs] = 0
        total = int(counts.sum())
        first = np.cumsum(counts) - counts
        within = np.arange(total) - np.repeat(first, counts)
        epos = np.repeat(vs, counts) + within * (width + 1)
        v = read(elem, vbuf, epos)[0] if want_value else _skip(elem, vbuf, epos, want_ttl)
        rows = np.repeat(np.arange(n), counts)
        take = pa.array(rows)
        keycol = Column(key.values.take(take), key.codes[rows] if key.codes is not None else None)
        return StateColumns(keycol, kg[rows], ns.take(take), pa.array(within, type=pa.int64()),
                            v.values, v.ttl, np.full(total, width, dtype=np.int64))
    if not want_value:
        v = _skip(elem, vbuf, vs, want_ttl)
        return StateColumns(key, kg, ns, pa.nulls(n), v.values, v.ttl, ve - vs)
    values, ttl, q = valuecolumns.values(elem, vbuf, vs, ve)
    if n and not np.array_equal(q, ve):
        raise Fallback("value length mismatch")
    return StateColumns(key, kg, ns, pa.nulls(n), values, ttl, ve - vs)


def _column_read(dec: Decoder) -> Decoder | None:
    """``dec`` (a TTL wrapper's value) if :func:`read` decodes it exactly as the row path types it, else None."""
    inner = dec.value if isinstance(dec, TtlDecoder) else dec
    name = _prim_name(inner)
    if name in _FIXED or name == "BooleanSerializer" or isinstance(inner, TimeWindowDecoder):
        return inner
    return None


def warm_kernels() -> None:
    """Load this reader's numba kernels from numba's cache, compiling them if it has none
    (:mod:`explorer.kernels`, at install)."""
    from . import _column_kernels

    _column_kernels.warm()
