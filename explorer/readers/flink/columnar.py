"""Vectorised decoding of key/value-layout entries with NumPy and Arrow.

The key/value layout (``rows``) stores every entry as two byte ranges. Once the
ranges of one state are known (``fullformat.scan`` or the SST reader), most
types can be decoded for all entries at once instead of entry by entry:

* fixed-width big-endian numbers are gathered into an ``(n, width)`` byte
  matrix (a zero-copy sliding-window view of the buffer) and viewed as
  ``>i8``/``>f8``...;
* ``StringValue`` strings whose length fits the one-byte length prefix and whose
  characters are all ASCII are exactly their bytes, so Arrow builds the string
  array straight from the buffer; other rows are decoded one by one;
* POJOs, tuples and TTL wrappers decode field by field, as long as no field is
  null (a null shifts the following bytes row by row);
* lists of fixed-width elements split at every ``width + 1`` bytes.

Java ``hashCode`` values for key-group checks are computed the same way
(``String.hashCode`` by Horner's rule in wrapping uint32 arithmetic).

Anything else raises :class:`Fallback`, and the caller decodes that state row by
row with ``rows.KeyValueDecoder``: same results, just slower.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .datainput import DataInput
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
# _SUFFIX[k]: the top k bytes of a little-endian uint64 word (the last k of its 8 bytes in memory)
_SUFFIX = np.array([0] + [((1 << 64) - 1) ^ ((1 << (8 * (8 - k))) - 1) for k in range(1, 9)], dtype=np.uint64)
_HIGH_BITS = np.uint64(0x8080808080808080)
_SIGN = np.int64(-(1 << 63))


class Fallback(Exception):
    """This state cannot be decoded column-wise; decode it row by row."""


class Buf:
    """A byte buffer viewed as NumPy."""

    def __init__(self, data: bytes | np.ndarray) -> None:
        """``data``: bytes, or a uint8 NumPy array (used in place; ``data`` is then a memoryview of it)."""
        if isinstance(data, np.ndarray):
            self.np = data.view(np.uint8).reshape(-1)
            self.data = memoryview(self.np)
        else:
            self.data = data
            self.np = np.frombuffer(data, dtype=np.uint8)
        self._windows: dict[int | str, np.ndarray] = {}

    def windows(self, width: int) -> np.ndarray:
        """A zero-copy view of ``width``-byte rows, one starting at every byte: row ``i`` is ``buf[i : i + width]``.

        A 1-D array of ``width``-byte void items (fancy indexing copies each row
        with one memcpy; a 2-D ``(len, width)`` strided view is several times slower).
        """
        w = self._windows.get(width)
        if w is None:
            n = max(len(self.np) - width + 1, 0)
            w = np.ndarray((n,), dtype=np.dtype((np.void, width)), buffer=self.np, strides=(1,))
            self._windows[width] = w
        return w

    def numbers(self, dtype: str) -> np.ndarray:
        """A zero-copy view of ``dtype`` numbers (such as ``>i8``), one starting at every byte."""
        w = self._windows.get(dtype)
        if w is None:
            size = np.dtype(dtype).itemsize
            w = np.ndarray((max(len(self.np) - size + 1, 0),), dtype=dtype, buffer=self.np, strides=(1,))
            self._windows[dtype] = w
        return w


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
    raise Fallback(f"no column decoder for {dec.describe()}")


def _strings(buf: Buf, pos: np.ndarray, want_codes: bool) -> tuple[Column, np.ndarray]:
    """``StringValue`` strings: vectorised for short ASCII ones, row by row for the rest."""
    n = len(pos)
    b0 = _gather(buf, pos, 1)[:, 0].astype(np.int64)
    simple = (b0 >= 1) & (b0 < 0x80)
    start = pos + 1
    lens = np.where(simple, b0 - 1, 0)
    end = start + lens
    if n and end.max() > len(buf.np):
        raise Fallback("string runs past the buffer")
    hashed, ascii_ok = _ascii_string_hash(buf, start, lens, want_codes)
    simple &= ascii_ok
    codes = hashed if want_codes else None
    perm = None
    order_ok = not n or bool(np.all(start[1:] >= end[:-1]))
    if not order_ok:  # ranges out of buffer order (entries merged from several SST files): sort them first
        perm = np.argsort(start, kind="stable")
        order_ok = bool(np.all(start[perm][1:] >= end[perm][:-1]))
    # the rest (null, long, non-ASCII, or all rows when ranges overlap) one by one
    new_pos = end.copy()
    idx = np.flatnonzero(~simple) if order_ok else np.arange(n)
    repl = []
    if len(idx):
        from ...keygroups import java_hash_code

        for i in idx.tolist():
            inp = DataInput(buf.data, int(pos[i]))
            s = inp.read_flink_string()
            new_pos[i] = inp.pos
            repl.append(s)
            if codes is not None:
                codes[i] = (java_hash_code(s) & 0xFFFFFFFF) if s is not None else 0
    if order_ok and n:
        # Arrow strings [start_i, end_i) of the buffer: offsets (s0, e0, s1, e1, ...), keep every other one;
        # rows decoded one by one are taken from a second chunk holding them
        s_, e_ = (start, end) if perm is None else (start[perm], end[perm])
        small = len(buf.np) < (1 << 31)
        offs = np.empty(2 * n + 1, dtype=np.int32 if small else np.int64)
        offs[0:-1:2] = s_
        offs[1::2] = e_
        offs[-1] = e_[-1]
        kind = pa.StringArray if small else pa.LargeStringArray
        arr = kind.from_buffers(2 * n, pa.py_buffer(offs), pa.py_buffer(buf.data))
        pick = np.arange(0, 2 * n, 2)
        if perm is not None:
            inv = np.empty(n, dtype=np.int64)
            inv[perm] = np.arange(n)
            pick = pick[inv]
        if len(idx):
            pick[idx] = 2 * n + np.arange(len(idx))
            taken = pc.take(pa.chunked_array([arr, pa.array(repl, type=arr.type)]), pa.array(pick))
            values = taken.chunk(0) if taken.num_chunks == 1 else taken.combine_chunks()
        else:
            values = pc.take(arr, pa.array(pick))
        if not small:
            values = values.cast(pa.string())
    else:
        values = pa.array(repl, type=pa.string())
    return Column(values, codes), new_pos


def _ascii_string_hash(buf: Buf, start: np.ndarray, lens: np.ndarray,
                       want_hash: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Java ``String.hashCode`` of byte ranges, and whether each range is all ASCII.

    The hash is right for ASCII ranges (the caller re-does the others): Horner's
    rule over the strings right-aligned in a zero-padded matrix (leading zeros do
    not change ``h = 31 * h + c``), one column at a time, in uint32 arithmetic
    that wraps like Java's ``int``. The matrix rows are the ``width`` bytes that
    end where each string ends (one memcpy per row from a strided view of the
    buffer), with the bytes before the string zeroed. Ranges longer than 64
    bytes, or too close to the buffer's start for a full row, are left unhashed
    (not ASCII-simple). ``want_hash`` False: only the ASCII check (codes stay 0).
    """
    n = len(start)
    codes = np.zeros(n, dtype=np.uint32)
    ascii_ok = np.ones(n, dtype=bool)
    if not n:
        return codes, ascii_ok
    long_rows = lens > 64
    short = np.where(long_rows, 0, lens)
    width = int(short.max())
    end = start + short
    if width == 0:
        ascii_ok[long_rows] = False  # decoded (and hashed) one by one by the caller
        return codes, ascii_ok
    width = -(-width // 8) * 8  # whole little-endian words per row
    long_rows |= end < width  # a full row would start before the buffer
    ascii_ok[long_rows] = False
    if len(buf.np) < width:
        return codes, ascii_ok
    rows_at = np.ndarray((len(buf.np) - width + 1,), dtype=np.dtype((np.void, width)), buffer=buf.np,
                         strides=(1,))
    # row k: the words of a row that keep its last k bytes
    suffix_masks = _SUFFIX[np.clip(np.arange(width + 1)[:, None] - (width - 8 * np.arange(1, width // 8 + 1)), 0, 8)]
    for lo in range(0, n, 1 << 18):  # in slices, to bound the matrix size
        sl = slice(lo, lo + (1 << 18))
        e = np.where(long_rows[sl], width, end[sl])
        words = rows_at[e - width].view("<u8").reshape(len(e), -1)
        # keep each word's bytes at columns >= width - len: its top `k` bytes
        words &= np.take(suffix_masks, short[sl], axis=0)  # (np.take: ~10x a 2-D fancy index)
        high = words[:, 0] & _HIGH_BITS
        for k in range(1, words.shape[1]):
            high |= words[:, k] & _HIGH_BITS
        ascii_ok[sl] &= high == 0
        if not want_hash:
            continue
        m = words.view(np.uint8)
        h = np.zeros(len(e), dtype=np.uint32)
        with np.errstate(over="ignore"):
            for j in range(width - int(short[sl].max()), width):  # leading zero columns leave h at 0
                h *= np.uint32(31)
                h += m[:, j]
        codes[sl] = h
    return codes, ascii_ok


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
        if want_user_key:
            uk, p = read(meta.user_key_decoder, buf, p)
            if n and not np.array_equal(p, ke):
                raise Fallback("map key length mismatch")
        else:
            uk = Column(pa.nulls(n))
        if n and _gather(vbuf, vs, 1).any():
            raise Fallback("null map values")
        if want_value:
            v, q = read(elem, vbuf, vs + 1)
            if n and not np.array_equal(q, ve):
                raise Fallback("map value length mismatch")
        else:
            v = _skip(elem, vbuf, vs + 1, want_ttl)
        return StateColumns(key, kg, ns, uk.values, v.values, v.ttl, ve - vs)
    if n and not np.array_equal(p, ke):
        raise Fallback("key length mismatch")
    if kind == "list":
        width = elem.fixed_length if not isinstance(elem, TtlDecoder) else (
            8 + elem.value.fixed_length if elem.value.fixed_length >= 0 else -1)
        if width < 0:
            raise Fallback("variable-width list elements")
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
    v, q = read(elem, vbuf, vs)
    if n and not np.array_equal(q, ve):
        raise Fallback("value length mismatch")
    return StateColumns(key, kg, ns, pa.nulls(n), v.values, v.ttl, ve - vs)
