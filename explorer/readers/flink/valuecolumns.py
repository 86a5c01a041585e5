"""Value-heavy Flink state decoded column-wise: POJOs, Rows, tuples, lists, maps, arrays, java.time.

:mod:`.columnar` decodes keys and simple values for every entry of a state at
once. This module does the same for the values production jobs keep: a value
of a composite serializer is decoded *field by field over all entries*, each
field a NumPy gather at an array of positions (one per entry), so the Python
cost is per (state, field), not per value:

* a nullable part (a POJO field's ``isNull`` byte, a ``Row``'s null mask, a
  ``NullableSerializer``, an ``Either``'s side, null sentinels of java.time) is
  decoded on the subset of entries where it is present, then spread back with
  nulls (:func:`_spread`);
* a list, array or map is decoded in *waves*: element ``j`` of every entry that
  has more than ``j`` elements, all at once, then the elements put in entry
  order (:func:`_take`); fixed-width elements need no waves;
* strings go through :mod:`._column_kernels` (numba), like keys;
* a serializer with no column form here (Kryo, pickles, SQL rows...) is read
  value by value with its own decoder, inside the columns around it
  (:class:`Py`): the rest of the value stays column-wise.

The result is what the row-by-row path (``rows.KeyValueDecoder`` then
``rows.to_arrow``) makes of the same bytes, value for value and type for type:
the decoder's Arrow type where it has one (:func:`typed`), else Arrow's own
inference over the Python values, reproduced column-wise (:func:`lossless`,
``rows.to_arrow``'s rules). Anything outside what is reproduced exactly (a value
that would not decode, run past its entry, a null map key, a duplicate map key,
a timestamp pandas cannot hold, a count a hostile file could make huge...)
raises :class:`~.buffers.Fallback` and the state is decoded row by row: the
same answer or the same error, only slower. Nothing here executes or unpickles
anything, and every position is checked against its own entry's end (``lim``).
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...format import budget
from . import kryocolumns
from .buffers import Buf, Fallback, strings
from .columntree import MAX_SECONDS as _MAX_SECONDS
from .columntree import MAX_WAVES, Leaf, Pairs, Py, Seq, Struct
from .columntree import concat as _concat
from .columntree import epoch_days as _days
from .columntree import length as _len
from .columntree import spread as _spread
from .columntree import take as _take
from .datainput import DataInput
from .kryo import KryoDecoder
from .rows import infer_array
from .serializers import (
    PRIMITIVES,
    Decoder,
    ListDecoder,
    MapDecoder,
    NullableDecoder,
    PojoDecoder,
    TimeWindowDecoder,
    TtlDecoder,
    TupleDecoder,
)
from .valuetypes import ArrayDecoder, EitherDecoder, EnumDecoder, RowDecoder, SetDecoder

_LONG_MIN = -(1 << 63)
_INT_MIN = -(1 << 31)


# --- bounded reads ------------------------------------------------------------------------------------

def _need(pos: np.ndarray, lim: np.ndarray, width: int | np.ndarray) -> None:
    if len(pos) and ((pos < 0).any() or (pos + width > lim).any()):
        raise Fallback("a value runs past its entry")


def _num(buf: Buf, pos, lim, dtype: str) -> np.ndarray:
    width = np.dtype(dtype).itemsize
    _need(pos, lim, width)
    if width == 1:
        v = buf.np[pos]
        return v.view(np.int8) if dtype == "i1" else v
    return buf.numbers(dtype)[pos].astype(dtype.replace(">", "="))


def _count(buf: Buf, pos, lim, min_width: int, what: str) -> np.ndarray:
    """``int`` counts, checked as ``DataInput.read_count`` checks them (else the row path reports it)."""
    n = _num(buf, pos, lim, ">i4").astype(np.int64)
    if len(n) and ((n < 0).any() or (n * max(min_width, 1) > lim - pos - 4).any()):
        raise Fallback(f"a count of {what} the entry cannot hold")
    total = int(n.sum())
    budget.check(total * 8, file="a value column", what=f"{total:,} {what} (a slot each)")
    return n


# --- decoding -------------------------------------------------------------------------------------------

_FIXED_PRIMS = {
    "LongSerializer": ">i8", "IntSerializer": ">i4", "ShortSerializer": ">i2", "ByteSerializer": "i1",
    "DoubleSerializer": ">f8", "FloatSerializer": ">f4",
}
_PRIM_NAMES = {id(v): k for k, v in PRIMITIVES.items()}


def decode(dec: Decoder | None, buf: Buf, pos: np.ndarray, lim: np.ndarray):
    """One value of ``dec`` at every position (each read no further than its ``lim``): (column, ends)."""
    if dec is None:
        raise Fallback("no serializer")
    n = len(pos)
    prim = _PRIM_NAMES.get(id(dec))
    if prim in _FIXED_PRIMS:
        dtype = _FIXED_PRIMS[prim]
        return Leaf(pa.array(_num(buf, pos, lim, dtype), type=dec.arrow)), pos + np.dtype(dtype).itemsize
    if prim == "BooleanSerializer":
        return Leaf(pa.array(_num(buf, pos, lim, "u1") != 0, type=pa.bool_())), pos + 1
    if prim == "CharSerializer":
        return Leaf(_chars(_num(buf, pos, lim, ">u2"))), pos + 2
    if prim == "StringSerializer":
        return _strings(buf, pos, lim)
    if prim == "VoidNamespaceSerializer":
        _need(pos, lim, 1)
        return Leaf(pa.nulls(n)), pos + 1
    if prim == "BytePrimitiveArraySerializer":
        return _byte_array(buf, pos, lim)
    if prim == "BigIntSerializer":
        return _big_int(buf, pos, lim)
    if isinstance(dec, TimeWindowDecoder):
        s, e = _num(buf, pos, lim, ">i8"), _num(buf, pos + 8, lim, ">i8")
        kids = [Leaf(pa.array(s, type=pa.int64())), Leaf(pa.array(e, type=pa.int64()))]
        return Struct(["start", "end"], kids, [PRIMITIVES["LongSerializer"]] * 2, np.ones(n, dtype=bool)), pos + 16
    if isinstance(dec, EnumDecoder):
        return _enum(dec, _num(buf, pos, lim, ">i4")), pos + 4
    label = type(dec).__name__ == "_Fixed" and dec.name
    if label in _TIME:
        return _TIME[label](buf, pos, lim)
    if isinstance(dec, NullableDecoder):
        return _nullable(dec.inner, buf, pos, lim, _num(buf, pos, lim, "u1") == 0, pos + 1)
    if isinstance(dec, PojoDecoder):
        return _pojo(dec, buf, pos, lim)
    if isinstance(dec, TupleDecoder):
        if not dec.fields:
            raise Fallback("a tuple without fields")
        kids, p = [], pos
        for f in dec.fields:
            col, p = decode(f, buf, p, lim)
            kids.append(col)
        names = [f"f{i}" for i in range(len(kids))]
        return Struct(names, kids, list(dec.fields), np.ones(n, dtype=bool)), p
    if isinstance(dec, RowDecoder):
        return _row(dec, buf, pos, lim)
    if isinstance(dec, EitherDecoder):
        left = _num(buf, pos, lim, "u1") != 0
        lcol, lend = _nullable(dec.left, buf, pos + 1, lim, left, pos + 1)
        rcol, rend = _nullable(dec.right, buf, pos + 1, lim, ~left, pos + 1)
        return (Struct(["left", "right"], [lcol, rcol], [dec.left, dec.right], np.ones(n, dtype=bool)),
                np.where(left, lend, rend))
    if isinstance(dec, SetDecoder):
        return _sequence(dec.elem, buf, pos, lim, nulls="isNull", negative_is_null=False)
    if isinstance(dec, ArrayDecoder):
        return _sequence(dec.elem, buf, pos, lim, nulls="present" if dec.nullable else None, negative_is_null=True)
    if isinstance(dec, ListDecoder):
        return _sequence(dec.elem, buf, pos, lim, nulls=None, negative_is_null=False)
    if isinstance(dec, MapDecoder):
        return _map(dec, buf, pos, lim)
    if isinstance(dec, KryoDecoder):
        try:
            return kryocolumns.decode(dec, buf, pos, lim)
        except kryocolumns.NotColumnar:
            pass
    return _python(dec, buf, pos, lim)


def _python(dec: Decoder, buf: Buf, pos, lim):
    """Value by value with ``dec`` itself (a serializer without a column form here)."""
    vals, ends = [], np.empty(len(pos), dtype=np.int64)
    data = buf.data
    for i, (p, e) in enumerate(zip(pos.tolist(), lim.tolist())):
        inp = DataInput(data, p, e)
        vals.append(dec.read(inp))
        ends[i] = inp.pos
    return Py(vals), ends


def _nullable(dec: Decoder, buf: Buf, pos, lim, present: np.ndarray, at: np.ndarray):
    """``dec`` at ``at`` where ``present``, nulls elsewhere; the ends (``at`` where absent)."""
    ends = at.copy()
    if not present.any():
        sub, _ = decode(dec, buf, at[:0], lim[:0])
        return _take(sub, np.full(len(at), -1, dtype=np.int64)), ends
    sub, sub_end = decode(dec, buf, at[present], lim[present])
    ends[present] = sub_end
    return _spread(sub, present), ends


def _chars(units: np.ndarray) -> pa.Array:
    if len(units) and (((units >= 0xD800) & (units <= 0xDFFF)) | (units == 0)).any():
        raise Fallback("a surrogate or NUL char (NumPy's strings drop a trailing NUL)")
    return pa.array(units.astype(np.uint32).view("<U1"), type=pa.string())


def _strings(buf: Buf, pos, lim):
    _need(pos, lim, 1)
    try:
        values, _, ends = strings(buf, pos)
    except (EOFError, IndexError, ValueError) as exc:
        raise Fallback(f"a string the row path reports: {exc}") from exc
    if len(ends) and (ends > lim).any():
        raise Fallback("a string runs past its entry")
    return Leaf(values), ends


def _ranges(buf: Buf, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bytes ``buf[start:start+length]`` of every row, joined, and their offsets."""
    off = np.zeros(len(start) + 1, dtype=np.int64)
    np.cumsum(length, out=off[1:])
    idx = np.repeat(start - off[:-1], length) + np.arange(off[-1], dtype=np.int64)
    return buf.np[idx], off


def _byte_array(buf: Buf, pos, lim):
    n = _num(buf, pos, lim, ">i4").astype(np.int64)
    null = n < 0
    length = np.where(null, 0, n)
    _need(pos + 4, lim, length)
    data, off = _ranges(buf, pos + 4, length)
    if off[-1] >= 1 << 31:
        raise Fallback("binary column past 2 GiB")
    arr = pa.BinaryArray.from_buffers(pa.binary(), len(pos), [
        pa.py_buffer(np.packbits(~null, bitorder="little")) if null.any() else None,
        pa.py_buffer(off.astype(np.int32)), pa.py_buffer(data)], null_count=int(null.sum()))
    return Leaf(arr), pos + 4 + length


def _signed_be(buf: Buf, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Big-endian two's-complement integers of 1 to 8 bytes each (length 0: 0)."""
    out = np.zeros(len(start), dtype=np.uint64)
    for k in range(8):
        has = length > k
        if not has.any():
            break
        b = buf.np[np.where(has, start + k, 0)].astype(np.uint64)
        out = np.where(has, (out << np.uint64(8)) | b, out)
    bits = (length * 8).astype(np.uint64)
    sign = (length > 0) & ((out >> np.maximum(bits, 1).astype(np.uint64) - np.uint64(1)) & np.uint64(1)).astype(bool)
    ext = np.where(sign & (length < 8), ~np.uint64(0) << np.minimum(bits, 63).astype(np.uint64), np.uint64(0))
    return (out | ext).view(np.int64)


def _big_int_parts(buf: Buf, pos, lim):
    """``BigIntSerializer``'s ``int n`` (0..3: null, 0, 1, 10) + ``n - 4`` bytes: (values, null, ends, length)."""
    n = _num(buf, pos, lim, ">i4").astype(np.int64)
    if len(n) and (n < 0).any():
        raise Fallback("a negative BigInteger length")
    length = np.maximum(n - 4, 0)
    if len(n) and (length > 8).any():
        raise Fallback("a BigInteger wider than 64 bits")
    _need(pos + 4, lim, length)
    v = _signed_be(buf, pos + 4, length)
    small = np.array([0, 0, 1, 10], dtype=np.int64)
    v = np.where(n < 4, small[np.minimum(n, 3)], v)
    return v, n == 0, pos + 4 + length, n


def _big_int(buf: Buf, pos, lim):
    n = _num(buf, pos, lim, ">i4").astype(np.int64)
    if len(n) and (n > 12).any():  # wider than 64 bits: Python ints (Arrow infers their column as the row path does)
        if (n < 0).any():
            raise Fallback("a negative BigInteger length")
        length = np.maximum(n - 4, 0)
        _need(pos + 4, lim, length)
        narrow = np.minimum(length, 8)
        v = _signed_be(buf, pos + 4, narrow).tolist()
        data = buf.data
        consts = (None, 0, 1, 10)
        vals = [consts[k] if k < 4 else (v[i] if k <= 12 else int.from_bytes(data[p + 4 : p + k], "big", signed=True))
                for i, (k, p) in enumerate(zip(n.tolist(), pos.tolist()))]
        return Py(vals), pos + 4 + length
    v, null, ends, _ = _big_int_parts(buf, pos, lim)
    return Leaf(pa.array(v, type=pa.int64(), mask=null if null.any() else None)), ends


def _big_dec(buf: Buf, pos, lim):
    """``BigDecSerializer``: the unscaled value as ``BigIntSerializer``, then (not for null, 0, 1, 10) the scale.
    Values are ``Decimal`` objects (Arrow infers their type from them, as the row path does)."""
    v, null, ends, n = _big_int_parts(buf, pos, lim)
    scaled = n >= 4
    scale = np.zeros(len(pos), dtype=np.int64)
    if scaled.any():
        scale[scaled] = _num(buf, ends[scaled], lim[scaled], ">i4")
    ends = ends + np.where(scaled, 4, 0)
    consts = (None, Decimal(0), Decimal(1), Decimal(10))
    vals = [consts[k] if k < 4 else Decimal(u).scaleb(-s)
            for k, u, s in zip(n.tolist(), v.tolist(), scale.tolist())]
    return Py(vals), ends


def _enum(dec: EnumDecoder, ordinal: np.ndarray) -> Leaf:
    names = list(dec.names)
    bad = (ordinal < 0) | (ordinal >= len(names))
    idx = ordinal.astype(np.int64)
    if bad.any():  # the row path names them after the class and ordinal
        extra = sorted(set(ordinal[bad].tolist()))
        where = {o: len(names) + i for i, o in enumerate(extra)}
        names = names + [f"{dec.cls}#{o}" for o in extra]
        idx = idx.copy()
        idx[bad] = [where[o] for o in ordinal[bad].tolist()]
    return Leaf(pa.array(names, type=pa.string()).take(pa.array(idx)))


# --- java.time and java.sql -------------------------------------------------------------------------------

def _ts(ns: np.ndarray, null: np.ndarray, tz: str | None) -> Leaf:
    return Leaf(pa.array(ns, type=pa.timestamp("ns", tz=tz), mask=null if null.any() else None))


def _instant(buf, pos, lim):
    sec, nano = _num(buf, pos, lim, ">i8"), _num(buf, pos + 8, lim, ">i4").astype(np.int64)
    null = sec == _LONG_MIN
    sec = np.where(null, 0, sec)
    if len(sec) and (np.abs(sec) > _MAX_SECONDS).any():
        raise Fallback("an Instant outside the range kept column-wise")
    return _ts(sec * 1_000_000_000 + nano, null, "UTC"), pos + 12


def _epoch_ms(buf, pos, lim):
    ms = _num(buf, pos, lim, ">i8")
    null = ms == _LONG_MIN
    ms = np.where(null, 0, ms)
    if len(ms) and (np.abs(ms) > _MAX_SECONDS * 1000).any():
        raise Fallback("a date outside the range kept column-wise")
    return _ts(ms * 1_000_000, null, "UTC"), pos + 8


def _sql_timestamp(buf, pos, lim):
    ms, nano = _num(buf, pos, lim, ">i8"), _num(buf, pos + 8, lim, ">i4").astype(np.int64)
    null = ms == _LONG_MIN
    ms = np.where(null, 0, ms)
    if len(ms) and (np.abs(ms) > _MAX_SECONDS * 1000).any():
        raise Fallback("a timestamp outside the range kept column-wise")
    return _ts((ms // 1000) * 1_000_000_000 + nano, null, "UTC"), pos + 12


def _local_date(buf, pos, lim):
    year = _num(buf, pos, lim, ">i4").astype(np.int64)
    month, day = _num(buf, pos + 4, lim, "i1").astype(np.int64), _num(buf, pos + 5, lim, "i1").astype(np.int64)
    null = year == _INT_MIN
    days = _days(np.where(null, 1970, year), np.where(null, 1, month), np.where(null, 1, day))
    return Leaf(pa.array(days.astype(np.int32), type=pa.date32(), mask=null if null.any() else None)), pos + 6


def _time_parts(buf, pos, lim):
    h, m = _num(buf, pos, lim, "i1").astype(np.int64), _num(buf, pos + 1, lim, "i1").astype(np.int64)
    s, nano = _num(buf, pos + 2, lim, "i1").astype(np.int64), _num(buf, pos + 3, lim, ">i4").astype(np.int64)
    null = h == -128
    ok = null | ((h >= 0) & (h < 24) & (m >= 0) & (m < 60) & (s >= 0) & (s < 60) & (nano >= 0) & (nano < 10**9))
    if len(ok) and not ok.all():
        raise Fallback("an invalid time")
    return h, m, s, nano, null


def _local_time(buf, pos, lim):
    h, m, s, nano, null = _time_parts(buf, pos, lim)
    if len(nano) and (nano[~null] % 1000).any():
        raise Fallback("a LocalTime with nanoseconds (the row path gives a Timedelta)")
    us = ((h * 60 + m) * 60 + s) * 1_000_000 + nano // 1000
    return Leaf(pa.array(np.where(null, 0, us), type=pa.time64("us"), mask=null if null.any() else None)), pos + 7


def _local_datetime(buf, pos, lim):
    year = _num(buf, pos, lim, ">i4").astype(np.int64)
    month, day = _num(buf, pos + 4, lim, "i1").astype(np.int64), _num(buf, pos + 5, lim, "i1").astype(np.int64)
    h, m, s, nano, tnull = _time_parts(buf, pos + 6, lim)
    null = (year == _INT_MIN) | tnull
    days = _days(np.where(year == _INT_MIN, 1970, year), np.where(year == _INT_MIN, 1, month),
                 np.where(year == _INT_MIN, 1, day))
    secs = days * 86400 + np.where(tnull, 0, (h * 60 + m) * 60 + s)
    secs = np.where(null, 0, secs)
    if len(secs) and (np.abs(secs) > _MAX_SECONDS).any():
        raise Fallback("a LocalDateTime outside the range kept column-wise")
    return _ts(secs * 1_000_000_000 + np.where(null, 0, nano), null, None), pos + 13


def _global_window(buf, pos, lim):
    _need(pos, lim, 1)
    return Leaf(pa.array(["GlobalWindow"] * len(pos), type=pa.string())), pos + 1


_TIME = {
    "Instant": _instant, "LocalDate": _local_date, "LocalTime": _local_time, "LocalDateTime": _local_datetime,
    "java.util.Date": _epoch_ms, "java.sql.Date": _epoch_ms, "java.sql.Time": _epoch_ms,
    "java.sql.Timestamp": _sql_timestamp, "BigDecimal": _big_dec, "GlobalWindow": _global_window,
}


# --- composites ---------------------------------------------------------------------------------------------

def _pojo(dec: PojoDecoder, buf: Buf, pos, lim):
    names = [f for f, _ in dec.fields]
    if not names or len(set(names)) != len(names) or dec.unknown_fields:
        raise Fallback("a POJO without fields, with repeated or undecodable ones")
    flags = _num(buf, pos, lim, "u1")
    if len(flags) and ((flags != 1) & (flags != 2)).any():
        raise Fallback("a POJO subclass instance")
    present = flags == 2
    p, q = pos[present] + 1, lim[present]
    kids = []
    for _, fdec in dec.fields:
        has = _num(buf, p, q, "u1") == 0
        col, p = _nullable(fdec, buf, p, q, has, p + 1)
        kids.append(col)
    ends = pos + 1
    ends[present] = p
    node = Struct(names, kids, [d for _, d in dec.fields], np.ones(int(present.sum()), dtype=bool))
    return _spread(node, present), ends


def _row(dec: RowDecoder, buf: Buf, pos, lim):
    nb = dec.mask_bytes
    if nb > 8 or not dec.fields:
        raise Fallback("a Row of no fields or more than 62")
    _need(pos, lim, nb)
    mask = np.zeros(len(pos), dtype=np.uint64)
    for k in range(nb):
        mask = (mask << np.uint64(8)) | buf.np[pos + k].astype(np.uint64)
    total = nb * 8
    p, kids = pos + nb, []
    for i, f in enumerate(dec.fields):
        bit = np.uint64(total - 1 - (dec.kind_bits + i))
        present = ((mask >> bit) & np.uint64(1)) == 0
        col, p = _nullable(f, buf, p, lim, present, p)
        kids.append(col)
    names = [f"f{i}" for i in range(len(kids))]
    return Struct(names, kids, list(dec.fields), np.ones(len(pos), dtype=bool)), p


def _flag_ok(buf, p, q, flag: str | None):
    """Where an element is present: ``present`` byte 1, ``isNull`` byte 0; (present, the value's position)."""
    if flag is None:
        return np.ones(len(p), dtype=bool), p
    b = _num(buf, p, q, "u1")
    return (b != 0) if flag == "present" else (b == 0), p + 1


def _sequence(elem: Decoder, buf: Buf, pos, lim, nulls: str | None, negative_is_null: bool):
    """``int n`` then ``n`` elements (each after a flag byte when ``nulls``): a :class:`Seq`."""
    raw = _num(buf, pos, lim, ">i4").astype(np.int64)
    null = raw < 0
    if null.any() and not negative_is_null:
        raise Fallback("a negative element count")
    counts = np.where(null, 0, raw)
    width = 1 if nulls else max(_min_width(elem), 1)
    if len(counts) and (counts * width > lim - pos - 4).any():
        raise Fallback("an element count the entry cannot hold")
    items, ends = _elements(elem, buf, pos + 4, lim, counts, nulls)
    off = np.zeros(len(pos) + 1, dtype=np.int64)
    np.cumsum(counts, out=off[1:])
    return Seq(off, items, ~null), ends


def _min_width(dec: Decoder) -> int:
    return dec.fixed_length if dec.fixed_length >= 0 else 1


def _elements(elem: Decoder, buf: Buf, start, lim, counts: np.ndarray, nulls: str | None, delimiter: bool = False):
    """The elements of every row (``counts[i]`` of them from ``start[i]``), flat in row order, and each row's end."""
    total = int(counts.sum())
    budget.check(total * 8, file="a value column", what=f"{total:,} list elements (a slot each)")
    width = elem.fixed_length
    if nulls is None and not delimiter and width >= 0:  # fixed width: every element's position at once
        off = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=off[1:])
        rows = np.repeat(np.arange(len(counts)), counts)
        epos = start[rows] + (np.arange(total, dtype=np.int64) - off[:-1][rows]) * width
        items, _ = decode(elem, buf, epos, lim[rows])
        return items, start + counts * width
    most = int(counts.max()) if len(counts) else 0
    if most > MAX_WAVES:
        raise Fallback("lists too long for waves")
    cur = start.copy()
    waves, flat_at = [], []
    first = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    for j in range(most):
        rows = np.flatnonzero(counts > j)
        p, q = cur[rows], lim[rows]
        if delimiter and j:
            if (_num(buf, p, q, "u1") != 0x2C).any():
                raise Fallback("a list element delimiter that is not ','")
            p = p + 1
        present, p = _flag_ok(buf, p, q, nulls)
        col, e = _nullable(elem, buf, p, q, present, p)
        cur[rows] = e
        waves.append(col)
        flat_at.append(first[rows] + j)
    if not waves:
        items, _ = decode(elem, buf, start[:0], lim[:0])
        return items, cur
    order = np.argsort(np.concatenate(flat_at), kind="stable")
    return _take(_concat(waves), order), cur


def _scalar(dec: Decoder) -> bool:
    """Whether values of ``dec`` are scalars (hashable dict keys in the row path), not dicts or lists."""
    if isinstance(dec, NullableDecoder):
        return _scalar(dec.inner)
    return (_PRIM_NAMES.get(id(dec)) not in (None, "BytePrimitiveArraySerializer") or isinstance(dec, EnumDecoder)
            or (type(dec).__name__ == "_Fixed" and dec.name != "BigDecimal"))


def _map(dec: MapDecoder, buf: Buf, pos, lim):
    """``int n`` then ``n`` (key, ``bool isNull``, value): a :class:`Pairs` (the row path's dicts)."""
    kdec = dec.key
    if not _scalar(kdec):
        raise Fallback("map keys that are not scalars")
    counts = _count(buf, pos, lim, _min_width(kdec) + 1, "map entries")
    total = int(counts.sum())
    rows = np.repeat(np.arange(len(pos)), counts)
    most = int(counts.max()) if len(counts) else 0
    if most > MAX_WAVES:
        raise Fallback("maps too large for waves")
    cur = pos + 4
    first = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    kw, vw, at = [], [], []
    for j in range(most):
        r = np.flatnonzero(counts > j)
        p, q = cur[r], lim[r]
        k, p = decode(kdec, buf, p, q)
        present = _num(buf, p, q, "u1") == 0
        v, p = _nullable(dec.value, buf, p + 1, q, present, p + 1)
        cur[r] = p
        kw.append(k)
        vw.append(v)
        at.append(first[r] + j)
    if kw:
        order = np.argsort(np.concatenate(at), kind="stable")
        keys, vals = _take(_concat(kw), order), _take(_concat(vw), order)
    else:
        keys, _ = decode(kdec, buf, pos[:0], lim[:0])
        vals, _ = decode(dec.value, buf, pos[:0], lim[:0])
    karr = keys.arr if isinstance(keys, Leaf) else pa.array(keys.values)
    if karr.null_count:
        raise Fallback("a null map key")
    if total:  # the row path's dict() keeps one entry per key: any repeated key goes row by row
        codes = pc.dictionary_encode(karr).indices.to_numpy(zero_copy_only=False).astype(np.int64)
        pair = rows * (int(codes.max()) + 1) + codes
        if len(np.unique(pair)) != total:
            raise Fallback("a repeated map key")
    off = np.zeros(len(pos) + 1, dtype=np.int64)
    np.cumsum(counts, out=off[1:])
    return Pairs(off, keys, vals, np.ones(len(pos), dtype=bool)), cur


# --- to Arrow: as the row path's rows.to_arrow would --------------------------------------------------------

def typed(dec: Decoder, node, t: pa.DataType) -> pa.Array:
    """``node`` as an array of Arrow type ``t`` (``dec.arrow_type()``), as ``pa.array(values, type=t)`` gives."""
    while isinstance(dec, NullableDecoder):
        dec = dec.inner
    if isinstance(node, Leaf):
        return node.arr if node.arr.type == t else node.arr.cast(t)
    if isinstance(node, Py):
        try:
            return pa.array(node.values, type=t)
        except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
            raise Fallback(f"values that do not fit {t}") from exc
    mask = pa.array(~node.valid) if not node.valid.all() else None
    if isinstance(node, Struct):
        kids = [typed(d, c, t.field(i).type) for i, (d, c) in enumerate(zip(node.decs, node.children))]
        return pa.StructArray.from_arrays(kids, fields=list(t), mask=mask)
    off = pa.array(node.offsets.astype(np.int32), type=pa.int32())
    if isinstance(node, Seq):
        return pa.ListArray.from_arrays(off, typed(_elem_of(dec), node.items, t.value_type), type=t, mask=mask)
    keys = typed(dec.key, node.keys, t.key_type)
    vals = typed(dec.value, node.vals, t.item_type)
    return pa.MapArray.from_arrays(off, keys, vals, type=t, mask=mask)


def _elem_of(dec: Decoder | None) -> Decoder | None:
    return dec.elem if dec is not None else None  # (None: a Kryo collection, always typed by inference)


_LOSSLESS = {
    pa.int8(): pa.int64(), pa.int16(): pa.int64(), pa.int32(): pa.int64(), pa.float32(): pa.float64(),
}


def lossless(dec: Decoder, node) -> pa.Array:
    """``node`` as ``rows.infer_array`` types the same Python values (one Python type per column here)."""
    while isinstance(dec, NullableDecoder):
        dec = dec.inner
    if isinstance(node, Py):
        return infer_array(node.values)
    n = _len(node)
    if isinstance(node, Leaf):
        arr = node.arr
        if arr.null_count == n:
            return pa.nulls(n)
        t = _LOSSLESS.get(arr.type)
        return arr.cast(t) if t is not None else arr
    valid = node.valid
    if not valid.any():
        return pa.nulls(n)
    mask = pa.array(~valid) if not valid.all() else None
    if isinstance(node, Struct):
        kids = [lossless(d, c) for d, c in zip(node.decs, node.children)]
        return pa.StructArray.from_arrays(kids, names=node.names, mask=mask)
    off = pa.array(node.offsets.astype(np.int32), type=pa.int32())
    if isinstance(node, Seq):
        return pa.ListArray.from_arrays(off, lossless(_elem_of(dec), node.items), mask=mask)
    return _lossless_map(dec, node, mask)


def _lossless_map(dec: MapDecoder, node: Pairs, mask) -> pa.Array:
    """``rows._dicts``: maps whose keys are all the same strings in the same order are a struct, others a map."""
    keys = lossless(dec.key, node.keys)
    off = node.offsets
    lengths = off[1:] - off[:-1]
    live = lengths[node.valid]
    if pa.types.is_string(keys.type) and len(live) and live.min() == live.max() > 0:
        width = int(live[0])
        ks = keys.to_pylist()
        starts = off[:-1][node.valid].tolist()
        names = ks[starts[0] : starts[0] + width]
        if all(ks[s : s + width] == names for s in starts) and len(set(names)) == width:
            vals = node.vals
            idx = np.full((len(node.valid), width), -1, dtype=np.int64)
            idx[node.valid] = off[:-1][node.valid, None] + np.arange(width)
            kids = [lossless(dec.value, _take(vals, idx[:, j])) for j in range(width)]
            return pa.StructArray.from_arrays(kids, names=names, mask=mask)
    if keys.type == pa.null():
        raise Fallback("maps without keys")
    return pa.MapArray.from_arrays(pa.array(off.astype(np.int32), type=pa.int32()), keys,
                                   lossless(dec.value, node.vals), mask=mask)


def _guarded(fn):
    """Any failure while decoding column-wise is the row path's to report: a :class:`Fallback`."""
    try:
        return fn()
    except Fallback:
        raise
    except Exception as exc:  # noqa: BLE001 - damaged bytes, a decoder's own refusal (UnknownLayout...)
        raise Fallback(f"{type(exc).__name__}: {exc}") from exc


def _arrow(dec: Decoder, node) -> pa.Array:
    t = dec.arrow_type()
    return typed(dec, node, t) if t is not None else lossless(dec, node)


def values(dec: Decoder, buf: Buf, pos: np.ndarray, lim: np.ndarray, present: np.ndarray | None = None,
           infer: bool = False):
    """One value of ``dec`` per position (``present``: only there, nulls elsewhere) as the row path's Arrow
    column: ``(values, TTL timestamps or None, ends)``; raises :class:`Fallback`. ``infer``: typed by Arrow's
    inference over the values even where ``dec`` has an Arrow type (the row path's map keys)."""
    def run():
        inner, ttl, p = dec, None, pos
        if isinstance(dec, TtlDecoder):
            if present is not None and not present.all():
                raise Fallback("null TTL values")
            inner, ttl, p = dec.value, _num(buf, pos, lim, ">i8"), pos + 8
        if present is None:
            node, ends = decode(inner, buf, p, lim)
        else:
            node, ends = _nullable(inner, buf, p, lim, present, p)
        return (lossless(inner, node) if infer else _arrow(inner, node)), ttl, ends
    return _guarded(run)


def elements(dec: Decoder, buf: Buf, start: np.ndarray, end: np.ndarray):
    """A list state's entries (elements joined by ``,``): ``(values of all elements, TTL timestamps or None,
    the entry of each element, its index in the entry, its size in bytes)``; raises :class:`Fallback`."""
    def run():
        inner = dec.value if isinstance(dec, TtlDecoder) else dec
        node, ttl, rows, within, sizes = _list_state(dec, buf, start, end)
        return _arrow(inner, node), ttl, rows, within, sizes
    return _guarded(run)


#: a list state's waves after which the few entries still going are finished one element at a time
_TAIL_WAVES, _TAIL_ROWS = 64, 32


def _list_state(dec: Decoder, buf: Buf, start, end):
    ttl_wrapped = isinstance(dec, TtlDecoder)
    inner = dec.value if ttl_wrapped else dec
    width = inner.fixed_length + (8 if ttl_wrapped else 0) if inner.fixed_length >= 0 else -1
    if width >= 0:
        return _fixed_list_state(inner, ttl_wrapped, width, buf, start, end)
    n = len(start)
    cur = start.copy()
    active = np.flatnonzero(end > start)
    waves, ttls, owners, index, sizes, j = [], [], [], [], [], 0
    while len(active):
        if j >= _TAIL_WAVES and len(active) <= _TAIL_ROWS:
            tail = _tail(inner, ttl_wrapped, buf, cur, end, active, j)
            if tail is None:
                raise Fallback("lists too long for waves")
            col, ts, own, within, size = tail
            waves.append(col)
            ttls.append(ts)
            owners.append(own)
            index.append(within)
            sizes.append(size)
            break
        if j >= MAX_WAVES:
            raise Fallback("lists too long for waves")
        p, q = cur[active], end[active]
        if j:
            if (_num(buf, p, q, "u1") != 0x2C).any():
                raise Fallback("a list element delimiter that is not ','")
            p = p + 1
        s = p
        if ttl_wrapped:
            ttls.append(_num(buf, p, q, ">i8"))
            p = p + 8
        col, e = decode(inner, buf, p, q)
        waves.append(col)
        owners.append(active)
        index.append(np.full(len(active), j, dtype=np.int64))
        sizes.append(e - s)
        cur[active] = e
        active = active[e < q]
        j += 1
    if not waves:
        node, _ = decode(inner, buf, start[:0], end[:0])
        empty = np.zeros(0, dtype=np.int64)
        return node, (empty if ttl_wrapped else None), empty, empty, empty
    own = np.concatenate(owners)
    within = np.concatenate(index)
    counts = np.bincount(own, minlength=n)
    first = np.zeros(n, dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    order = np.argsort(first[own] + within, kind="stable")
    ttl = np.concatenate(ttls)[order] if ttl_wrapped else None
    return _take(_concat(waves), order), ttl, own[order], within[order], np.concatenate(sizes)[order]


def _fixed_list_state(inner: Decoder, ttl_wrapped: bool, width: int, buf: Buf, start, end):
    """Elements of one width: every position at once (each after a ``,``, checked)."""
    span = end - start + 1
    if len(span) and (span % (width + 1)).any():
        raise Fallback("list length not a multiple of the element width")
    counts = np.where(end > start, span // (width + 1), 0)
    total = int(counts.sum())
    budget.check(total * 8, file="a value column", what=f"{total:,} list elements (a slot each)")
    first = np.cumsum(counts) - counts
    rows = np.repeat(np.arange(len(start)), counts)
    within = np.arange(total, dtype=np.int64) - first[rows]
    epos = start[rows] + within * (width + 1)
    lim = end[rows]
    later = within > 0
    if later.any() and (_num(buf, epos[later] - 1, lim[later], "u1") != 0x2C).any():
        raise Fallback("a list element delimiter that is not ','")
    ttl = _num(buf, epos, lim, ">i8") if ttl_wrapped else None
    node, _ = decode(inner, buf, epos + 8 if ttl_wrapped else epos, lim)
    return node, ttl, rows, within, np.full(total, width, dtype=np.int64)


def _tail(inner: Decoder, ttl_wrapped: bool, buf: Buf, cur, end, active, j: int):
    """The elements left of a few long lists, one at a time with ``inner``'s own decoder, as a :class:`Leaf`
    (None where ``inner`` is not a scalar of an Arrow type: the caller falls back)."""
    t = inner.arrow_type() if _scalar(inner) and not isinstance(inner, NullableDecoder) else None
    if t is None:
        return None
    data = buf.data
    vals, ts, own, within, size = [], [], [], [], []
    for r in active.tolist():
        p, q, k = int(cur[r]), int(end[r]), j
        while p < q:
            if k:
                if data[p] != 0x2C:
                    raise Fallback("a list element delimiter that is not ','")
                p += 1
            inp = DataInput(data, p, q)
            if ttl_wrapped:
                ts.append(inp.read_long())
            vals.append(inner.read(inp))
            own.append(r)
            within.append(k)
            size.append(inp.pos - p)
            p, k = inp.pos, k + 1
    as_int = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
    return (Leaf(pa.array(vals, type=t)), as_int(ts) if ttl_wrapped else None, as_int(own), as_int(within),
            as_int(size))
