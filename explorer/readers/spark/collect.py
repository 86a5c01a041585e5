"""``collect_list`` / ``collect_set`` buffers of Spark aggregations, decoded from their serialized bytes.

Facts (from Spark's ``Collect`` aggregate, a ``TypedImperativeAggregate``; no code copied): its buffer is
kept in the state as ``binary`` (named ``buf``): an ``UnsafeRow`` of one field, an ``UnsafeArrayData`` of
the element type: an 8-byte element count, a null bit set of ``ceil(n / 64)`` 8-byte words, the elements
(fixed-size ones packed at their width, padded to 8 bytes; strings and binaries as ``offset << 32 | size``
slots from the array's start), then the variable-length bytes (8-byte aligned). The element type is not
in the checkpoint: strings are recognised by their slots and UTF-8, fixed-size elements by the width
every row of the column agrees on (8 bytes are shown as longs, 4 as ints: a double's or float's bits
would show as integers; a note says so). A column that fits none stays bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["decode_collect_buffers"]

_INTS = {8: ("<i8", pa.int64()), 4: ("<i4", pa.int32()), 2: ("<i2", pa.int16()), 1: ("i1", pa.int8())}


def _r8(n: int) -> int:
    return (n + 7) // 8 * 8


def _array(b: bytes) -> tuple[bytes, int, int] | None:
    """(the array's bytes, element count, header size) of a one-field UnsafeRow holding an array."""
    if len(b) < 16 or b[0] & 1:
        return None
    word = int.from_bytes(b[8:16], "little")
    off, size = word >> 32, word & 0xFFFFFFFF
    if off < 16 or off + size > len(b) or size < 8:
        return None
    a = b[off:off + size]
    n = int.from_bytes(a[:8], "little", signed=True)
    if n < 0 or 8 + _r8(n) // 8 * 0 + ((n + 63) // 64) * 8 > size:
        return None
    return a, n, 8 + ((n + 63) // 64) * 8


def _strings(a: bytes, n: int, head: int) -> list[str | None] | None:
    if head + 8 * n > len(a):
        return None
    out: list[str | None] = []
    end = head + 8 * n
    for i in range(n):
        if a[8 + i // 8] >> (i % 8) & 1:
            out.append(None)
            continue
        w = int.from_bytes(a[head + 8 * i:head + 8 * i + 8], "little")
        o, s = w >> 32, w & 0xFFFFFFFF
        if o < head + 8 * n or o + s > len(a):
            return None
        try:
            out.append(a[o:o + s].decode("utf-8"))
        except UnicodeDecodeError:
            return None
        end = max(end, o + _r8(s))
    return out if end == len(a) else None


def _widths(a: bytes, n: int, head: int) -> set[int]:
    return {w for w in _INTS if _r8(w * n) == len(a) - head}


def decode_collect_buffers(arr: pa.Array, where: str, notes: list[str]) -> pa.Array:
    """``arr`` (an aggregation's value struct) with each ``buf`` binary field that holds collect buffers
    replaced by a list column; others unchanged."""
    if not pa.types.is_struct(arr.type):
        return arr
    children, fields, changed = [], [], False
    for i in range(arr.type.num_fields):
        f, col = arr.type.field(i), arr.field(i)
        new = None
        if f.name.split("_")[0] == "buf" and pa.types.is_binary(f.type):
            new = _decode_column(col.to_pylist(), f.name, where, notes)
        if new is not None:
            changed = True
            children.append(new)
            fields.append(pa.field(f.name, new.type))
        else:
            children.append(col)
            fields.append(f)
    if not changed:
        return arr
    return pa.StructArray.from_arrays(children, fields=fields, mask=arr.is_null() if arr.null_count else None)


def _decode_column(values: list[bytes | None], name: str, where: str, notes: list[str]) -> pa.Array | None:
    arrays = [None if v is None else _array(v) for v in values]
    if any(v is not None and a is None for v, a in zip(values, arrays)):
        return None
    found = [a for a in arrays if a is not None]
    strings = [_strings(*a) for a in found]
    if found and all(s is not None for s in strings):
        it = iter(strings)
        return pa.array([None if a is None else next(it) for a in arrays], pa.list_(pa.string()))
    widths = set(_INTS)
    for a in found:
        widths &= _widths(*a)
    if not found or not widths:
        return None
    w = max(widths)
    dtype, t = _INTS[w]
    out: list[Any] = []
    for a in arrays:
        if a is None:
            out.append(None)
            continue
        data, n, head = a
        vals = np.frombuffer(data, dtype, n, head).tolist()
        out.append([None if data[8 + j // 8] >> (j % 8) & 1 else x for j, x in enumerate(vals)])
    notes.append(f"{where}: {name!r} is a collect_list/collect_set buffer decoded as a list of {t} (the element "
                 f"type is not in the checkpoint: {w}-byte elements; a {'double' if w == 8 else 'float'}'s bits "
                 "would show as integers)")
    return pa.array(out, pa.list_(t))
