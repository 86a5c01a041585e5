"""Column-wise decoding of raw RocksDB entries into the canonical keyed-state table.

The RocksDB backend stores keys and values in our own encodings
(:mod:`explorer.format.keycodec` for keys, :mod:`explorer.format.types` for
values; layout in :mod:`.layout`). A full snapshot
turns a state's raw entries into the Parquet table of :mod:`explorer.format.keyed`.
Decoding entry by entry makes several Python objects per row; here one batch of
raw entries is joined into one byte buffer and cut into Arrow columns with
NumPy, for the common shapes:

* keys and map user keys: ``str`` (no escaped zero bytes) or ``int``;
* namespace: the default (``None``) only;
* values: ``int``, ``float``, ``bool``, ``str`` and ``bytes`` (up to 16383 bytes),
  in value / reducing / aggregating and map states (null map values too), and
  list states of ``int`` / ``float`` / ``bool`` elements; with or without TTL.

:func:`decode_batch` returns None for any batch outside these shapes (or with
anything unexpected in its bytes); the caller decodes that batch the
row-by-row way. The result is the table :func:`explorer.format.keyed.rows_to_table`
builds from the decoded rows: the same columns, types and values.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pyarrow as pa

from ..keycodec import INT, NONE, STR
from ..sst.columns import pooled_empty
from ..ttl import alive as ttl_alive
from .layout import LIST_DELIMITER

__all__ = ["decode_batch", "decode_flat", "supported"]

_FIXED = {"int": (8, pa.int64(), ">i8"), "float": (8, pa.float64(), ">f8"), "bool": (1, pa.bool_(), None)}
_SIGN = np.uint64(1 << 63)


def _type_name(info: Any) -> str | None:
    try:
        d = info.describe()
    except Exception:  # noqa: BLE001 - an unknown TypeInfo: not vectorised
        return None
    return d.get("type") if len(d) == 1 else None


def supported(kind: str, value_info: Any, user_key: Any) -> bool:
    """Whether a state of ``kind`` with these types can take the column-wise path at all."""
    v = _type_name(value_info)
    if kind == "list":
        return v in _FIXED
    if v not in ("int", "float", "bool", "str", "bytes"):
        return False
    if kind == "map":
        return _type_name(user_key) in ("int", "str")
    return user_key is None


def _flat(chunks: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One uint8 buffer with start offsets and lengths of each chunk."""
    n = len(chunks)
    lens = np.fromiter(map(len, chunks), dtype=np.int64, count=n)
    starts = np.zeros(n, dtype=np.int64)
    if n > 1:
        np.cumsum(lens[:-1], out=starts[1:])
    buf = np.frombuffer(b"".join(chunks), dtype=np.uint8)
    return buf, starts, lens


def _gather(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """``width`` bytes at each position, as an (n, width) array."""
    return buf[pos[:, None] + np.arange(width, dtype=np.int64)]


def _be_int64(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(_gather(buf, pos, 8)).view(">i8").reshape(-1).astype(np.int64)


def _spans(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Every byte position of the (start, length) spans, in order."""
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]), dtype=np.int64)


def _segments(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bytes of each (start, length) segment concatenated, and Arrow int32 offsets.

    Segments are in buffer order and do not overlap (one per row). Short segments
    are gathered by index; long ones (values) by masking out the short gaps
    between them, so no index array is ever as long as the data.
    """
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return np.zeros(0, dtype=np.uint8), offsets.astype(np.int32)
    ends = starts + lengths
    gap_starts = np.concatenate(([0], ends))
    gap_lens = np.concatenate((starts, [len(buf)])) - gap_starts
    if bool(np.any(gap_lens < 0)):
        raise _Unsupported  # overlapping segments: not a shape decoded here
    if total <= len(buf) - total:
        data = buf[_spans(starts, lengths)]
    else:
        mask = np.ones(len(buf), dtype=bool)
        mask[_spans(gap_starts, gap_lens)] = False
        data = buf[mask]
    return data, offsets.astype(np.int32)


def _gathered(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_segments`, the bytes copied by one numba kernel (:func:`explorer.format.sst.kernels.gather_segments`,
    a loop over the segments instead of an index array as long as the data) where the segments are in
    bounds, in buffer order and do not overlap; by :func:`_segments` otherwise."""
    n = len(starts)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1]) if n else 0
    ends = starts + lengths
    if n and 0 < total < 1 << 31 and bool((lengths >= 0).all()) and int(starts[0]) >= 0 \
            and int(ends[-1]) <= len(buf) and bool((starts[1:] >= ends[:-1]).all()):
        from ..sst.kernels import gather_segments  # numba: loaded where used

        data = np.empty(total, dtype=np.uint8)
        gather_segments(buf, starts.astype(np.int64, copy=False), lengths.astype(np.int64, copy=False), data, offsets)
        return data, offsets.astype(np.int32)
    return _segments(buf, starts, lengths)


def _string_array(data: np.ndarray, offsets: np.ndarray, valid: np.ndarray | None = None,
                  binary: bool = False) -> pa.Array:
    n = len(offsets) - 1
    bitmap = None
    nulls = 0
    if valid is not None and not valid.all():
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
        nulls = int(n - valid.sum())
    arr = pa.Array.from_buffers(pa.binary() if binary else pa.string(), n,
                                [bitmap, pa.py_buffer(np.ascontiguousarray(offsets)), pa.py_buffer(np.ascontiguousarray(data))], null_count=nulls)
    if not binary:
        arr.validate(full=True)  # UTF-8
    return arr


def _viewed_array(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, valid: np.ndarray | None,
                  binary: bool, alloc: Callable[[int], np.ndarray] | None = None) -> pa.Array:
    """The (start, length) segments of ``buf`` as a binary / UTF-8 string array.

    Long segments (values) are copied by one numba kernel straight into the array's data
    buffer (:func:`explorer.format.sst.kernels.gather_segments`, outside the GIL); short ones,
    or any set whose bounds do not check out, are first described as an Arrow binary-view
    array over ``buf`` itself (16 bytes per row: the length, then the bytes inline when at
    most 12, else a 4-byte prefix, buffer 0 and the offset), which Arrow then casts to a
    plain binary array with one copy per segment.
    """
    n = len(starts)
    bitmap = None
    nulls = 0
    if valid is not None and not valid.all():
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
        nulls = int(n - valid.sum())
    total = int(lengths.sum()) if n else 0
    if n and total >= 16 * n and total < 1 << 31 and bool((starts >= 0).all()) \
            and bool((starts + lengths <= len(buf)).all()) and bool((lengths >= 0).all()):
        from ..sst.kernels import gather_segments  # numba: loaded where used

        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data = pooled_empty(total) if alloc is None else alloc(total)
        gather_segments(buf, starts.astype(np.int64, copy=False), lengths.astype(np.int64, copy=False), data, offsets)
        arr = pa.Array.from_buffers(pa.binary(), n, [bitmap, pa.py_buffer(offsets.astype(np.int32)),
                                                     data.base if alloc is None else pa.py_buffer(data)],
                                    null_count=nulls)
    else:
        views = np.zeros((n, 16), dtype=np.uint8)
        views[:, :4] = lengths.astype("<i4").view(np.uint8).reshape(n, 4)
        last = max(len(buf) - 1, 0)
        width = np.arange(12, dtype=np.int64)
        short = lengths <= 12
        if len(buf):
            s = starts[short]
            inline = buf[np.minimum(s[:, None] + width, last)]
            inline[width[None, :] >= lengths[short][:, None]] = 0
            views[short, 4:] = inline
            lng = ~short
            views[lng, 4:8] = buf[np.minimum(starts[lng][:, None] + width[:4], last)]
            views[lng, 12:16] = starts[lng].astype("<i4").view(np.uint8).reshape(-1, 4)
        arr = pa.Array.from_buffers(pa.binary_view(), n, [bitmap, pa.py_buffer(views), pa.py_buffer(buf)],
                                    null_count=nulls).cast(pa.binary())
    if binary:
        return arr
    out = pa.Array.from_buffers(pa.string(), n, arr.buffers(), null_count=arr.null_count)
    out.validate(full=True)  # UTF-8
    return out


class _Unsupported(Exception):
    pass


def _need(cond: Any) -> None:
    if not bool(np.all(cond)):
        raise _Unsupported


def _key_part(buf: np.ndarray, pos: np.ndarray, zeros: np.ndarray) -> tuple[str, Any, np.ndarray]:
    """Decode one encoded key part at ``pos`` in every row: (kind, column builder args, position after)."""
    tags = buf[pos]
    if bool(np.all(tags == INT)):
        u = np.ascontiguousarray(_gather(buf, pos + 1, 8)).view(">u8").reshape(-1).astype(np.uint64)
        return "int", pa.array((u ^ _SIGN).view(np.int64), type=pa.int64()), pos + 9
    if bool(np.all(tags == STR)):
        first = pos + 1
        i = np.searchsorted(zeros, first)
        _need(i < len(zeros))
        end = zeros[i]
        _need(buf[np.minimum(end + 1, len(buf) - 1)] == 1)  # 00 01 terminator, not an escaped 00 FF
        _need(end + 1 < len(buf))
        data, offsets = _gathered(buf, first, end - first)
        return "str", _string_array(data, offsets), end + 2
    raise _Unsupported


def _decode(kflat, vflat, kind: str, prefix_bytes: int, ttl: bool, value_info: Any, user_key: Any,
            alloc: Callable[[int], np.ndarray] | None = None) -> tuple[dict[str, Any], str, np.ndarray | None]:
    kbuf, kstart, klen = kflat
    n = len(kstart)
    kend = kstart + klen
    kzeros = np.flatnonzero(kbuf == 0)
    _need(klen > prefix_bytes + 1)
    kg = kbuf[kstart].astype(np.int32)
    for j in range(1, prefix_bytes):
        kg = kg * 256 + kbuf[kstart + j]
    key_kind, key_col, pos = _key_part(kbuf, kstart + prefix_bytes, kzeros)
    _need(pos < kend)
    _need(kbuf[np.minimum(pos, len(kbuf) - 1)] == NONE)  # the default namespace only
    pos = pos + 1
    uk_col: Any = None
    if kind == "map":
        _need(pos < kend)
        uk_kind, uk_col, pos = _key_part(kbuf, pos, kzeros)
        if uk_kind != _type_name(user_key):
            raise _Unsupported
    _need(pos == kend)

    vbuf, vstart, vlen = vflat
    vname = _type_name(value_info)
    skip = 8 if ttl else 0
    if kind == "list":
        width, atype, dtype = _FIXED[vname]
        w = skip + width
        _need(vlen >= w)
        _need((vlen + 1) % (w + 1) == 0)
        counts = (vlen + 1) // (w + 1)
        row = np.repeat(np.arange(n, dtype=np.int64), counts)
        first_of_row = np.zeros(n, dtype=np.int64)
        if n > 1:
            np.cumsum(counts[:-1], out=first_of_row[1:])
        j = np.arange(len(row), dtype=np.int64) - first_of_row[row]
        epos = vstart[row] + j * (w + 1)
        last = j == counts[row] - 1
        _need(vbuf[epos[~last] + w] == LIST_DELIMITER[0])  # the "," between elements
        ts = _be_int64(vbuf, epos) if ttl else None
        vals = _fixed_values(vbuf, epos + skip, vname, width, dtype, atype, None)
        cols = {
            "key_group": pa.array(kg[row], type=pa.int32()),
            "key": key_col.take(pa.array(row)),
            "namespace": pa.nulls(len(row)),
            "user_key": pa.array(j.astype(np.int32), type=pa.int32()),
            "value": vals,
        }
        return cols, key_kind, ts
    ts = _be_int64(vbuf, vstart) if ttl else None
    pos = vstart + skip
    valid = None
    if kind == "map":
        _need(vlen > skip)
        flag = vbuf[pos]
        _need(flag <= 1)
        valid = flag == 1
        _need(vlen[~valid] == skip + 1)  # a null value: nothing after the flag
        pos = pos + 1
    vend = vstart + vlen
    if vname in _FIXED:
        width, atype, dtype = _FIXED[vname]
        if valid is not None:
            _need(pos[valid] + width == vend[valid])
            pos = np.where(valid, pos, 0)
        else:
            _need(pos + width == vend)
        vals = _fixed_values(vbuf, pos, vname, width, dtype, atype, valid)
    else:  # str / bytes: varint length (1 or 2 bytes), UTF-8 / raw bytes
        ok = valid if valid is not None else np.ones(n, dtype=bool)
        p = np.where(ok, pos, 0)
        b0 = vbuf[p].astype(np.int64) if len(vbuf) else np.zeros(n, dtype=np.int64)
        two = ok & (b0 >= 0x80)
        b1 = np.where(two, vbuf[np.minimum(p + 1, max(len(vbuf) - 1, 0))].astype(np.int64), 0) if len(vbuf) else b0 * 0
        _need(b1[two] < 0x80)
        length = np.where(two, (b0 & 0x7F) | (b1 << 7), b0)
        hdr = np.where(two, 2, 1)
        start = p + hdr
        _need((start + length == vend)[ok])
        length = np.where(ok, length, 0)
        if len(vbuf) < 1 << 31:
            vals = _viewed_array(vbuf, np.where(ok, start, 0), length, valid, binary=vname == "bytes", alloc=alloc)
        else:
            data, offsets = _segments(vbuf, np.where(ok, start, vend), length)  # a null: empty, in place
            vals = _string_array(data, offsets, valid, binary=vname == "bytes")
    cols = {
        "key_group": pa.array(kg, type=pa.int32()),
        "key": key_col,
        "namespace": pa.nulls(n),
        "user_key": pa.nulls(n) if uk_col is None else uk_col,
        "value": vals,
    }
    return cols, key_kind, ts


def _fixed_values(buf: np.ndarray, pos: np.ndarray, vname: str, width: int, dtype: str | None, atype: pa.DataType,
                  valid: np.ndarray | None) -> pa.Array:
    mask = None if valid is None or valid.all() else ~valid
    if len(pos) == 0:
        return pa.array([], type=atype)
    if vname == "bool":
        v = buf[pos] != 0
    else:
        big = np.dtype(dtype)
        v = np.ascontiguousarray(_gather(buf, pos, width)).view(big).reshape(-1).astype(big.newbyteorder("="))
    return pa.array(v, type=atype, mask=mask)


def decode_batch(keys: list[bytes], values: list[bytes], kind: str, prefix_bytes: int, ttl: bool,
                 value_info: Any, user_key: Any, expire: tuple[int, int] | None = None
                 ) -> tuple[pa.Table, dict[str, str]] | None:
    """One batch of raw entries (in RocksDB order) as the canonical keyed-state table, or None
    when the batch is not in a shape decoded here (then decode it row by row).

    ``expire`` = ``(ttl_ms, now_ms)`` drops entries (list elements) that have expired at ``now_ms``.
    """
    if not keys or not supported(kind, value_info, user_key):
        return None
    return decode_flat(_flat(keys), _flat(values), kind, prefix_bytes, ttl, value_info, user_key, expire)


def decode_flat(kflat: tuple[np.ndarray, np.ndarray, np.ndarray], vflat: tuple[np.ndarray, np.ndarray, np.ndarray],
                kind: str, prefix_bytes: int, ttl: bool, value_info: Any, user_key: Any,
                expire: tuple[int, int] | None = None, alloc: Callable[[int], np.ndarray] | None = None
                ) -> tuple[pa.Table, dict[str, str]] | None:
    """:func:`decode_batch` of entries given as ``(buffer, starts, lengths)`` of uint8 keys and values
    (no Python object per entry). Keys must lie in buffer order, without overlapping; values may
    lie anywhere in theirs (a buffer of 2 GiB or more then needs them in order). ``alloc(n)``: where
    long values are gathered (an uninitialised uint8 array of ``n`` bytes; default :func:`pooled_empty`),
    e.g. :meth:`explorer.format.sst.columns.Recycled.empty`."""
    if not len(kflat[1]) or not supported(kind, value_info, user_key):
        return None
    try:
        cols, key_kind, ts = _decode(kflat, vflat, kind, prefix_bytes, ttl, value_info, user_key, alloc)
    except (_Unsupported, pa.ArrowInvalid, IndexError):
        return None
    rows = len(cols["key_group"])
    cols["last_access"] = pa.array(ts, type=pa.int64()) if ts is not None else pa.nulls(rows, pa.int64())
    table = pa.table(cols)
    if expire is not None and ts is not None:
        ttl_ms, now_ms = expire
        alive = ttl_alive(ts, ttl_ms, now_ms)
        if not alive.all():
            table = table.filter(pa.array(alive))
    if table.num_rows == 0:
        return None  # the row path builds an empty table's columns its own way
    return table, {"key_kind": key_kind, "namespace_kind": "null"}
