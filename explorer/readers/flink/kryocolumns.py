"""Kryo values (``KryoSerializer``, Kryo 5) decoded column-wise, for :mod:`.valuecolumns`.

The same reading as :class:`.kryo.KryoDecoder` (see :mod:`.kryo` for the wire
format), done for all entries of a state at once, where all of them take the
same path through it: one class per value slot (the top-level value, a field
of a non-final type, an ``Optional``'s content), every object new (reference
marker 1, or 0 for null where null is allowed: a value that refers back to an
object read before goes the other way), Kryo 5's encodings of ``String``,
boxed and primitive numbers, ``Optional``, lists of a final element type,
enums, ``LocalDate`` and ``FieldSerializer`` classes. Anything else raises
:class:`NotColumnar`, and :mod:`.valuecolumns` reads that column value by value
with the Kryo decoder itself: the values are the same either way, as Python
values (``dict`` for an object, ``{"present", "value"}`` for an ``Optional``...)
typed by Arrow's inference.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ...format import budget
from . import columntree as ct
from .buffers import Buf, Fallback, python_first
from .datainput import DataInput
from .kryo import LIST_CLASSES, PRIMITIVE_BOX, WRAPPER_CLASSES, KryoDecoder, read_string


class NotColumnar(Exception):
    """These values take different paths through Kryo: read them one by one."""


def _need(pos, lim, width) -> None:
    if len(pos) and ((pos < 0).any() or (pos + width > lim).any()):
        raise NotColumnar("a value runs past its entry")


def _varint(buf: Buf, pos, lim, most: int = 5):
    """Kryo's variable-length ints (7-bit groups, low first) of at most ``most`` bytes: (uint64 values, ends)."""
    out = np.zeros(len(pos), dtype=np.uint64)
    cur = pos.copy()
    going = np.ones(len(pos), dtype=bool)
    for k in range(most):
        idx = np.flatnonzero(going)
        if not len(idx):
            break
        p = cur[idx]
        _need(p, lim[idx], 1)
        b = buf.np[p].astype(np.uint64)
        if most == 9 and k == 8:
            out[idx] |= b << np.uint64(56)
            cur[idx] = p + 1
            going[idx] = False
            break
        out[idx] |= (b & np.uint64(0x7F)) << np.uint64(7 * k)
        cur[idx] = p + 1
        going[idx] = b >= 0x80
    if going.any():
        raise NotColumnar("a variable-length int longer than Kryo reads it")
    return out, cur


def _int(buf: Buf, pos, lim, positive: bool):
    r, end = _varint(buf, pos, lim)
    r = (r & np.uint64(0xFFFFFFFF)).astype(np.int64)
    if positive:
        return np.where(r >= 1 << 31, r - (1 << 32), r), end
    return (r >> 1) ^ -(r & 1), end


def _long(buf: Buf, pos, lim, positive: bool):
    r, end = _varint(buf, pos, lim, 9)
    if positive:
        return r.view(np.int64), end
    return ((r >> np.uint64(1)) ^ (np.uint64(0) - (r & np.uint64(1)))).view(np.int64), end


def _fixed(buf: Buf, pos, lim, dtype: str, v5: bool):
    width = np.dtype(dtype).itemsize
    _need(pos, lim, width)
    return buf.numbers(("<" if v5 else ">") + dtype)[pos].astype("=" + dtype), pos + width


class Reader:
    """Kryo columns of one :class:`.kryo.KryoDecoder` (see module doc)."""

    def __init__(self, dec: KryoDecoder, buf: Buf) -> None:
        if dec.kryo_version < 5:
            raise NotColumnar("Kryo 2")
        self.dec, self.buf = dec, buf
        self.named: set[int] = set()  # class name ids met so far (any row): a second use reads no name

    def value(self, pos, lim, jt=None):
        """``writeClassAndObject`` at every position (``jt``: the declared type of a field, whose generic
        arguments a collection's elements use): (column, ends)."""
        cid, p = _int(self.buf, pos, lim, True)
        live = cid != 0
        if not live.any():
            return ct.Leaf(pa.nulls(len(pos))), p
        q = p[live]
        cls, q = self._class(cid[live], q, lim[live])
        p[live] = q
        col, e = self.obj(cls, jt, False, q, lim[live])
        ends = p.copy()
        ends[live] = e
        return ct.spread(col, live), ends

    def _class(self, cids: np.ndarray, pos, lim) -> tuple[str, np.ndarray]:
        """The one class of these values (registered, or named inline the first time in every value), and
        the positions after it."""
        first = int(cids[0])
        if (cids != first).any():
            raise NotColumnar("values of several classes")
        if first == 1:  # unregistered: a name id, then (its first time in the value) the name
            nid, p = _int(self.buf, pos, lim, True)
            name_id = int(nid[0])
            if (nid != name_id).any() or name_id in self.named:
                raise NotColumnar("class names met before in the value")
            self.named.add(name_id)
            names, p = self.strings(p, lim)
            got = set(names.arr.to_pylist())
            if len(got) != 1 or None in got:
                raise NotColumnar("several class names")
            return got.pop(), p
        if first < 2:
            raise NotColumnar("a null class")
        reg = self.dec.ids.get(first - 2)
        if reg is None or reg[1]:
            raise NotColumnar("a class not registered, or with a serializer of the job's own")
        return reg[0], pos

    def obj(self, cls: str, jt, may_be_null: bool, pos, lim):
        dec = self.dec
        if cls in WRAPPER_CLASSES or cls in PRIMITIVE_BOX or dec.is_enum(cls):
            if may_be_null:
                flag, p = _int(self.buf, pos, lim, True)
                if (flag == 0).any():
                    raise NotColumnar("a null boxed value")
                return self.body(cls, jt, p, lim)
            return self.body(cls, jt, pos, lim)
        rid, p = _int(self.buf, pos, lim, True)
        new = rid == 1
        if not (new | ((rid == 0) & may_be_null)).all():
            raise NotColumnar("a reference to an object read before")
        if new.all():
            return self.body(cls, jt, p, lim)
        col, e = self.body(cls, jt, p[new], lim[new])
        ends = p.copy()
        ends[new] = e
        return ct.spread(col, new), ends

    def body(self, cls: str, jt, pos, lim):
        buf, v5 = self.buf, True
        if cls in self.dec.config.custom_defaults:
            raise NotColumnar("a default serializer of the job's own")
        if cls == "java.lang.String":
            return self.strings(pos, lim)
        if cls in ("java.lang.Integer", "int"):
            v, e = _int(buf, pos, lim, False)
            return ct.Leaf(pa.array(v, type=pa.int64())), e
        if cls in ("java.lang.Long", "long"):
            v, e = _long(buf, pos, lim, False)
            return ct.Leaf(pa.array(v, type=pa.int64())), e
        if cls in ("java.lang.Boolean", "boolean"):
            _need(pos, lim, 1)
            return ct.Leaf(pa.array(buf.np[pos] != 0, type=pa.bool_())), pos + 1
        if cls in ("java.lang.Byte", "byte"):
            _need(pos, lim, 1)
            return ct.Leaf(pa.array(buf.np[pos].view(np.int8).astype(np.int64), type=pa.int64())), pos + 1
        if cls in ("java.lang.Short", "short"):
            v, e = _fixed(buf, pos, lim, "i2", v5)
            return ct.Leaf(pa.array(v.astype(np.int64), type=pa.int64())), e
        if cls in ("java.lang.Float", "float"):
            v, e = _fixed(buf, pos, lim, "f4", v5)
            return ct.Leaf(pa.array(v.astype(np.float64), type=pa.float64())), e
        if cls in ("java.lang.Double", "double"):
            v, e = _fixed(buf, pos, lim, "f8", v5)
            return ct.Leaf(pa.array(v, type=pa.float64())), e
        if cls == "java.util.Optional":
            inner, e = self.value(pos, lim)
            present = _valid(inner)
            kids = [ct.Leaf(pa.array(present, type=pa.bool_())), inner]
            return ct.Struct(["present", "value"], kids, [None, None], np.ones(len(pos), dtype=bool)), e
        if cls in LIST_CLASSES:
            return self.collection(cls, jt, pos, lim)
        if cls == "java.time.LocalDate":
            year, p = _int(buf, pos, lim, True)
            _need(p, lim, 2)
            month = buf.np[p].view(np.int8).astype(np.int64)
            day = buf.np[p + 1].view(np.int8).astype(np.int64)
            try:
                days = ct.epoch_days(year, month, day)
            except Fallback as exc:
                raise NotColumnar(str(exc)) from exc
            return ct.Leaf(pa.array(days.astype(np.int32), type=pa.date32())), p + 2
        if cls == "java.time.LocalDateTime":
            return self.local_datetime(pos, lim)
        if cls.startswith("java.") or cls.endswith("[]"):
            raise NotColumnar(f"{cls} is read value by value")
        layout = self.dec.layout(cls)
        if layout is None:
            raise NotColumnar(f"no class layout for {cls}")
        if layout.is_enum or layout.super_name == "java.lang.Enum":
            n, e = _int(buf, pos, lim, True)
            names = layout.enum_constants
            if len(n) and ((n < 1) | (n > len(names))).any():
                raise NotColumnar("a null or unknown enum constant")
            return ct.Leaf(pa.array(list(names), type=pa.string()).take(pa.array(n - 1))), e
        return self.fields(cls, layout, pos, lim)

    def local_datetime(self, pos, lim):
        """Kryo 5's ``LocalDateTime``: a date (varint year, byte month, byte day) and a time whose first negative
        byte (``~value``) ends it: hour, minute, second, then a varint of nanos."""
        buf = self.buf
        year, p = _int(buf, pos, lim, True)
        _need(p, lim, 2)
        month, day = buf.np[p].view(np.int8).astype(np.int64), buf.np[p + 1].view(np.int8).astype(np.int64)
        p = p + 2
        parts = np.zeros((4, len(pos)), dtype=np.int64)
        going = np.ones(len(pos), dtype=bool)
        for k in range(3):
            idx = np.flatnonzero(going)
            if not len(idx):
                break
            _need(p[idx], lim[idx], 1)
            b = buf.np[p[idx]].view(np.int8).astype(np.int64)
            parts[k, idx] = np.where(b < 0, ~b, b)
            p[idx] += 1
            going[idx] = b >= 0
        idx = np.flatnonzero(going)
        if len(idx):
            nano, e = _int(buf, p[idx], lim[idx], True)
            parts[3, idx] = nano
            p[idx] = e
        h, m, sec, nano = parts
        if len(h) and not ((h < 24) & (m < 60) & (sec < 60) & (nano >= 0)).all():
            raise NotColumnar("an invalid time")
        try:
            days = ct.epoch_days(year, month, day)
        except Fallback as exc:
            raise NotColumnar(str(exc)) from exc
        secs = days * 86400 + (h * 60 + m) * 60 + sec
        if len(secs) and (np.abs(secs) > ct.MAX_SECONDS).any():
            raise NotColumnar("a LocalDateTime outside the range kept column-wise")
        return ct.Leaf(pa.array(secs * 1_000_000_000 + nano, type=pa.timestamp("ns"))), p

    def fields(self, cls: str, layout, pos, lim):
        names, kids, p = [], [], pos
        for f in self.dec.field_order(cls, layout):
            t = f.type
            if t.is_primitive:
                col, p = self.body(t.name, t, p, lim)
            elif self.dec.is_final(t.name):
                col, p = self.obj(PRIMITIVE_BOX.get(t.name, t.name), t, True, p, lim)
            else:
                col, p = self.value(p, lim, t)
            names.append(f.name)
            kids.append(col)
        if not names or len(set(names)) != len(names):
            raise NotColumnar("a class without fields, or with repeated names")
        return ct.Struct(names, kids, [None] * len(kids), np.ones(len(pos), dtype=bool)), p

    def collection(self, cls: str, jt, pos, lim):
        """Kryo 5's ``CollectionSerializer`` with a final element type known from the field's generic type."""
        elem = _elem(self.dec, jt)
        if elem is None:
            raise NotColumnar("a collection whose element class is written per element")
        buf = self.buf
        _need(pos, lim, 1)
        first = buf.np[pos].astype(np.int64)
        can_null = (first & 0x80) != 0
        n1 = first & 0x3F
        p = pos + 1
        more = (first & 0x40) != 0
        shift = 6
        for _ in range(4):
            idx = np.flatnonzero(more)
            if not len(idx):
                break
            _need(p[idx], lim[idx], 1)
            b = buf.np[p[idx]].astype(np.int64)
            n1[idx] |= (b & 0x7F) << shift
            p[idx] += 1
            more[idx] = b >= 0x80
            shift += 7
        null = n1 == 0
        counts = np.where(null, 0, n1 - 1)
        if len(counts) and (counts > lim - p).any():
            raise NotColumnar("an element count the entry cannot hold")
        if len(can_null) and (can_null != can_null[0]).any():
            raise NotColumnar("collections of which only some may hold nulls")
        may_be_null = bool(len(can_null) and can_null[0])
        ecls = PRIMITIVE_BOX.get(elem.name, elem.name)
        most = int(counts.max()) if len(counts) else 0
        if most > ct.MAX_WAVES:
            raise NotColumnar("long collections")
        total = int(counts.sum())
        budget.check(total * 8, file="a Kryo column", what=f"{total:,} collection elements (a slot each)")
        cur = p.copy()
        first_at = np.zeros(len(counts), dtype=np.int64)
        np.cumsum(counts[:-1], out=first_at[1:])
        waves, at = [], []
        for j in range(most):
            rows = np.flatnonzero(counts > j)
            col, e = self.obj(ecls, elem, may_be_null, cur[rows], lim[rows])
            cur[rows] = e
            waves.append(col)
            at.append(first_at[rows] + j)
        if waves:
            items = ct.take(ct.concat(waves), np.argsort(np.concatenate(at), kind="stable"))
        else:
            items = ct.Leaf(pa.nulls(0))
        off = np.zeros(len(pos) + 1, dtype=np.int64)
        np.cumsum(counts, out=off[1:])
        return ct.Seq(off, items, ~null), cur

    def strings(self, pos, lim):
        n = len(pos)
        if python_first(n):  # a few: one by one, without importing numba (see buffers.PYTHON_STRINGS)
            vals, ends = [], np.empty(n, dtype=np.int64)
            for i, (p, e) in enumerate(zip(pos.tolist(), lim.tolist())):
                inp = DataInput(self.buf.data, p, e)
                vals.append(read_string(inp, self.dec))
                ends[i] = inp.pos
            return ct.Leaf(pa.array(vals, type=pa.string())), ends
        from . import _column_kernels as kernels

        data, offsets, ends, flags = kernels.kryo_strings(self.buf.np, np.ascontiguousarray(pos, dtype=np.int64),
                                                         np.ascontiguousarray(lim, dtype=np.int64))
        if len(data) >= 1 << 31:
            raise NotColumnar("a string column past 2 GiB")
        null = flags == kernels.NULL
        nulls = int(null.sum())
        bitmap = pa.py_buffer(np.packbits(~null, bitorder="little")) if nulls else None
        arr = pa.StringArray.from_buffers(n, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data), bitmap, nulls)
        redo = np.flatnonzero(flags == kernels.REDO)
        if len(redo):  # (non-ASCII, or damaged: Kryo's own reading, which raises what the row path raises)
            vals = arr.to_pylist()
            for i in redo.tolist():
                inp = DataInput(self.buf.data, int(pos[i]), int(lim[i]))
                vals[i] = read_string(inp, self.dec)
                ends[i] = inp.pos
            arr = pa.array(vals, type=pa.string())
        return ct.Leaf(arr), ends


def _elem(dec: KryoDecoder, jt):
    if jt is None or not jt.args:
        return None
    a = jt.args[0]
    return a if a is not None and dec.is_final(a.name) else None


def _valid(node) -> np.ndarray:
    if isinstance(node, ct.Leaf):
        return np.asarray(node.arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    if isinstance(node, ct.Py):
        return np.array([v is not None for v in node.values], dtype=bool)
    return node.valid


def decode(dec: KryoDecoder, buf: Buf, pos, lim):
    """Column-wise where all values take one path (see module doc); raises :class:`NotColumnar` otherwise."""
    return Reader(dec, buf).value(pos, lim)
