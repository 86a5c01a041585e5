"""Spark's ``UnsafeRow`` bytes as Arrow columns, decoded column-wise with NumPy (no JVM, no per-row Python).

An ``UnsafeRow`` of ``n`` fields (facts from Spark's ``UnsafeRow``; no code copied):

* a null bit set of ``ceil(n / 64)`` 8-byte words (bit ``j`` of the little-endian
  words: field ``j`` is null);
* one 8-byte little-endian slot per field: a fixed-size value in place (``long``,
  ``int`` in the low 4 bytes, ``double``, ``boolean`` ...), or for strings, binaries
  and nested rows ``offset << 32 | size``, the offset from the row's own start;
* the variable-length bytes (8-byte aligned).

All rows of a store partition are joined into one byte buffer with a start per row;
field ``j`` of every row is then one gather of 8 bytes at ``start + bitset + 8 j``,
strings one gather of their bytes into an Arrow string buffer, nested rows the same
recursively from their starts. A row whose slots or data run past its end is a damaged
file (an error naming it), never a wrong value.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa

from ...errors import SnapshotCorruptError, SnapshotFormatError
from .keys import unique_names

__all__ = ["arrow_type", "decode_rows", "json_leaf_types"]

_ARROW = {"long": pa.int64(), "integer": pa.int32(), "short": pa.int16(), "byte": pa.int8(), "double": pa.float64(),
          "float": pa.float32(), "boolean": pa.bool_(), "string": pa.string(), "binary": pa.binary(),
          "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"), "date": pa.date32(),
          "void": pa.null()}
#: fixed-size types: (NumPy dtype of the slot's low bytes, its width)
_FIXED = {"long": ("<i8", 8), "integer": ("<i4", 4), "short": ("<i2", 2), "byte": ("i1", 1), "double": ("<f8", 8),
          "float": ("<f4", 4), "boolean": ("?", 1), "timestamp": ("<i8", 8), "timestamp_ntz": ("<i8", 8),
          "date": ("<i4", 4)}
_PARTITIONING_TYPES = {"long": "long", "integer": "int", "short": "short", "byte": "byte", "double": "double",
                       "float": "float", "boolean": "boolean", "string": "string", "binary": "binary",
                       "timestamp": "timestamp", "timestamp_ntz": "timestamp", "date": "date"}


_DECIMAL = re.compile(r"^decimal\((\d+),\s*(-?\d+)\)$")


def _decimal(t: Any) -> tuple[int, int] | None:
    """(precision, scale) of a Spark ``decimal(p,s)`` type name, None for other types."""
    m = _DECIMAL.match(t) if isinstance(t, str) else None
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def arrow_type(t: Any, where: str) -> pa.DataType:
    """The Arrow type of a Spark schema JSON type (struct field names made unique by position)."""
    dec = _decimal(t)
    if dec is not None and 0 < dec[0] <= 38:
        return pa.decimal128(*dec)
    if isinstance(t, dict) and t.get("type") == "struct":
        names = unique_names([f["name"] for f in t["fields"]])
        return pa.struct([pa.field(n, arrow_type(f["type"], where)) for n, f in zip(names, t["fields"])])
    if isinstance(t, str) and t in _ARROW:
        return _ARROW[t]
    raise SnapshotFormatError(f"{where}: state column type {t!r} is not read without Spark yet "
                              f"(known: {sorted(_ARROW)} and structs); read it through Spark's data source")


def json_leaf_types(t: Any) -> list[str]:
    """Spark type names of a schema's leaves, in order (nested structs flattened), for the partitioning."""
    if isinstance(t, dict) and t.get("type") == "struct":
        return [x for f in t["fields"] for x in json_leaf_types(f["type"])]
    return [_PARTITIONING_TYPES.get(t, str(t))]


def _gather(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """``width`` bytes at each of ``pos``, as an (n, width) array."""
    return buf[pos[:, None] + np.arange(width, dtype=np.int64)]


def _validity(valid: np.ndarray) -> pa.Buffer | None:
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _struct(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, valid: np.ndarray, schema: dict,
            t: pa.StructType, where: str) -> pa.StructArray:
    fields = schema["fields"]
    n_fields = len(fields)
    n = len(starts)
    bitset = ((n_fields + 63) // 64) * 8
    header = bitset + 8 * n_fields
    short = valid & (starts + header > ends)
    if short.any():
        i = int(np.flatnonzero(short)[0])
        raise SnapshotCorruptError(f"{where}: row {i} has {int(ends[i] - starts[i])} bytes, fewer than the "
                                   f"{header} of its null bits and {n_fields} field slots")
    # rows that are null themselves read the zero padding at the end of the buffer: all fields null there
    pad = len(buf) - header
    starts = np.where(valid, starts, pad)
    ends = np.where(valid, ends, len(buf))
    children = []
    for j, f in enumerate(fields):
        ft = f["type"]
        child_type = t.field(j).type
        is_null = (buf[starts + (j >> 3)] >> (j & 7)) & 1 == 1
        ok = valid & ~is_null
        slot = starts + bitset + 8 * j
        if ft == "void":
            children.append(pa.nulls(n))
            continue
        if isinstance(ft, str) and ft in _FIXED:
            dtype, width = _FIXED[ft]
            vals = np.ascontiguousarray(_gather(buf, slot, width)).view(dtype).reshape(n)
            mask = None if ok.all() else ~ok
            if ft in ("timestamp", "timestamp_ntz", "date"):
                arr = pa.array(vals, mask=mask).cast(child_type)
            else:
                arr = pa.array(vals, type=child_type, mask=mask)
            children.append(arr)
            continue
        dec = _decimal(ft)
        if dec is not None and dec[0] <= 18:  # the unscaled value as a long, in place
            children.append(_decimals_from_longs(np.ascontiguousarray(_gather(buf, slot, 8)).view("<i8").reshape(n),
                                                 ok, child_type))
            continue
        word = np.ascontiguousarray(_gather(buf, slot, 8)).view("<u8").reshape(n)
        off = (word >> np.uint64(32)).astype(np.int64)
        size = (word & np.uint64(0xFFFFFFFF)).astype(np.int64)
        off = np.where(ok, off, 0)
        size = np.where(ok, size, 0)
        begin = starts + off
        past = ok & ((begin + size > ends) | (off < header))
        if past.any():
            i = int(np.flatnonzero(past)[0])
            raise SnapshotCorruptError(f"{where}: field {f['name']!r} of row {i} points at bytes {int(off[i])}.."
                                       f"{int(off[i] + size[i])} outside its row of {int(ends[i] - starts[i])} bytes")
        if isinstance(ft, dict):
            children.append(_struct(buf, begin, begin + size, ok, ft, child_type, where))
            continue
        if dec is not None:  # precision > 18: the unscaled value's big-endian two's complement bytes
            children.append(_decimals_from_bytes(buf, begin, size, ok, child_type, f"{where}: field {f['name']!r}"))
            continue
        if ft not in ("string", "binary"):
            arrow_type(ft, where)  # raises: not read without Spark
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(size, out=offsets[1:])
        total = int(offsets[-1])
        pos = np.repeat(begin - offsets[:-1], size) + np.arange(total, dtype=np.int64)
        data = buf[pos]
        big = total >= 2**31
        atype = (pa.large_string() if ft == "string" else pa.large_binary()) if big else child_type
        arr = pa.Array.from_buffers(atype, n, [_validity(ok), pa.py_buffer(offsets.astype(np.int64 if big else np.int32)),
                                                pa.py_buffer(data)])
        if ft == "string":
            try:
                arr.validate(full=True)
            except pa.ArrowInvalid as exc:
                raise SnapshotCorruptError(f"{where}: field {f['name']!r} holds bytes that are not UTF-8 ({exc})") from exc
        children.append(arr)
    mask = None if valid.all() else pa.array(~valid)
    return pa.StructArray.from_arrays(children, fields=[t.field(i) for i in range(t.num_fields)], mask=mask)


def _decimals_from_longs(unscaled: np.ndarray, ok: np.ndarray, t: pa.DataType) -> pa.Array:
    """Decimals of precision <= 18 (Spark keeps the unscaled value as a long) as Arrow decimal128 (16 bytes,
    little-endian two's complement: the long and its sign)."""
    words = np.empty((len(unscaled), 2), np.int64)
    words[:, 0] = unscaled
    words[:, 1] = np.where(unscaled < 0, -1, 0)
    return pa.Array.from_buffers(t, len(unscaled), [_validity(ok), pa.py_buffer(words.tobytes())])


def _decimals_from_bytes(buf: np.ndarray, begin: np.ndarray, size: np.ndarray, ok: np.ndarray, t: pa.DataType,
                         where: str) -> pa.Array:
    """Decimals of precision > 18: Spark writes the unscaled ``BigInteger``'s big-endian bytes (at most 16)."""
    if (size[ok] > 16).any() or (size[ok] < 1).any():
        i = int(np.flatnonzero(ok & ((size > 16) | (size < 1)))[0])
        raise SnapshotCorruptError(f"{where}: row {i} holds a decimal of {int(size[i])} bytes; expected 1 to 16")
    out = bytearray(16 * len(begin))
    for i in np.flatnonzero(ok).tolist():
        v = int.from_bytes(buf[begin[i]:begin[i] + size[i]].tobytes(), "big", signed=True)
        out[16 * i:16 * i + 16] = v.to_bytes(16, "little", signed=True)
    return pa.Array.from_buffers(t, len(begin), [_validity(ok), pa.py_buffer(bytes(out))])


def _max_header(schema: dict) -> int:
    """The largest null-bit set plus slots of a struct and its nested structs (the zero padding null rows read)."""
    n = len(schema["fields"])
    own = ((n + 63) // 64) * 8 + 8 * n
    return max([own] + [_max_header(f["type"]) for f in schema["fields"] if isinstance(f["type"], dict)])


def decode_rows(rows: list[bytes], schema: dict, where: str, skip: int = 0,
                lead: int | None = None) -> pa.StructArray:
    """``rows`` (``UnsafeRow`` bytes, each after ``skip`` leading bytes) as one Arrow struct array of ``schema``
    (Spark's JSON of a struct type). ``lead``: the value the first leading byte must have (an encoding
    version), checked for every row."""
    t = arrow_type(schema, where)
    n = len(rows)
    lens = np.fromiter(map(len, rows), np.int64, n)
    ends = np.cumsum(lens)
    starts = ends - lens + skip
    pad = _max_header(schema)
    buf = np.frombuffer(b"".join(rows) + bytes(pad), np.uint8)
    if skip and n:
        short = lens < skip
        if short.any():
            raise SnapshotCorruptError(f"{where}: row {int(np.flatnonzero(short)[0])} has fewer than {skip} bytes")
        if lead is not None:
            bad = buf[starts - skip] != lead
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise SnapshotCorruptError(f"{where}: row {i} starts with encoding version {int(buf[starts[i] - skip])}, "
                                           f"expected {lead}")
    return _struct(buf, starts, ends, np.ones(n, bool), schema, t, where)
