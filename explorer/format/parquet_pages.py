"""The values of a Parquet ``BYTE_ARRAY`` column chunk located in place: the direct route of a canonical restore.

A canonical checkpoint (profile :data:`explorer.format.keyed.CHECKPOINT`) stores the
``value`` column uncompressed, ``PLAIN``-encoded and without a dictionary: in each data
page every value is its 4-byte little-endian length followed by its bytes. Reading such
a column with Arrow copies every value into a fresh buffer (1 GB of state: 1 GB of new
memory, whose first touch costs more on a VM than the copy itself) only for the restore
to copy it once more into the blocks of an SST file. Here the column chunk's page
headers (Thrift compact protocol) are parsed, every page checksum the writer stored is
verified, the definition levels are checked to say "no nulls", and a numba kernel walks
the values to give each one's start and end in the memory-mapped file
(:class:`ByteSpans`); the SST writer copies straight from there.

:func:`column_spans` returns None, having read nothing but headers, for any chunk not in
that shape (compressed, a dictionary page, another encoding, nulls, repetition levels);
the caller then reads it with Arrow. :func:`check_page_sizes` reads the same headers of the column
chunks Arrow is about to decode and checks what each page declares against the memory budget and
against the footer (whose sizes the row-group check trusted); past a process's first pages it walks them with
one numba call per chunk (:mod:`._page_kernels`), which hands back to the Python parser here, the reference, every
chunk it would not read exactly alike (so every refusal is this parser's). Bytes that contradict themselves (a page or value
running past its chunk, a header Thrift cannot parse, a page checksum that does not
match) raise :class:`~explorer.errors.SnapshotCorruptError` naming the file, the row
group, the offset, what was found and what was expected.
"""

from __future__ import annotations

import mmap
import os
import threading
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import SnapshotCorruptError
from . import budget

__all__ = ["ByteSpans", "Chunk", "RowGroup", "check_page_sizes", "column_spans", "footer_chunks", "map_file"]

# parquet.thrift: PageType, Encoding, CompressionCodec
_DATA_PAGE, _INDEX_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 1, 2, 3
_PLAIN, _RLE = 0, 3

#: MADV_POPULATE_READ (Linux 5.14): map a stretch of the page cache in one call instead of a fault per 64 KiB
_MADV_POPULATE_READ = 22


class ByteSpans:
    """Byte strings given as ``data[starts[i]:ends[i]]`` (no copy of ``data``): what
    :func:`explorer.format.sst.writer.write_sst` takes as values beside Arrow binary arrays.
    Never null; ``take`` and ``concat`` act on the spans, not the bytes."""

    __slots__ = ("data", "starts", "ends", "nbytes")
    null_count = 0

    def __init__(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        self.data = data
        self.starts = starts
        self.ends = ends
        self.nbytes = int((ends - starts).sum())

    def __len__(self) -> int:
        return len(self.starts)

    def lengths(self) -> np.ndarray:
        return self.ends - self.starts

    def take(self, indices: Any) -> "ByteSpans":
        idx = np.asarray(indices.to_numpy(zero_copy_only=False) if hasattr(indices, "to_numpy") else indices)
        return ByteSpans(self.data, self.starts[idx], self.ends[idx])

    def filter(self, mask: np.ndarray) -> "ByteSpans":
        return ByteSpans(self.data, self.starts[mask], self.ends[mask])

    def to_pylist(self) -> list[bytes]:
        return [self.data[s:e].tobytes() for s, e in zip(self.starts.tolist(), self.ends.tolist())]

    @staticmethod
    def concat(parts: "list[ByteSpans]") -> "ByteSpans":
        """The spans of ``parts`` one after the other; they must share one ``data``."""
        data = parts[0].data
        if any(p.data is not data for p in parts):
            raise ValueError("spans over different buffers cannot be joined without copying them")
        return ByteSpans(data, np.concatenate([p.starts for p in parts]), np.concatenate([p.ends for p in parts]))


def map_file(path: Path) -> np.ndarray:
    """The file at ``path`` memory-mapped read-only, as a uint8 array (unmapped when the last array
    over it goes)."""
    with open(path, "rb") as fh:
        m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(m, dtype=np.uint8)


def _populate(data: np.ndarray, start: int, length: int) -> None:
    """Map ``data[start:start+length]``'s pages of the page cache now (a fault per 64 KiB otherwise)."""
    base = data.base
    if not isinstance(base, mmap.mmap) or length <= 0:
        return
    lo = start - start % mmap.PAGESIZE
    try:
        base.madvise(_MADV_POPULATE_READ, lo, start + length - lo)
    except (OSError, ValueError, AttributeError):  # an older kernel, no madvise: the reads fault the pages in
        pass


class _Corrupt(Exception):
    pass


class _Thrift:
    """The few Thrift compact-protocol reads a page header needs (``buf`` from ``pos``, not past ``end``)."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: np.ndarray, pos: int, end: int) -> None:
        self.buf, self.pos, self.end = buf, pos, end

    def byte(self) -> int:
        if self.pos >= self.end:
            raise _Corrupt("a page header running past its column chunk")
        b = int(self.buf[self.pos])
        self.pos += 1
        return b

    def varint(self) -> int:
        v = shift = 0
        while True:
            b = self.byte()
            v |= (b & 0x7F) << shift
            if b < 0x80:
                return v
            shift += 7
            if shift > 63:
                raise _Corrupt("a varint of more than 10 bytes in a page header")

    def zigzag(self) -> int:
        v = self.varint()
        return (v >> 1) ^ -(v & 1)

    def skip(self, ttype: int, depth: int = 0) -> None:
        if depth > 32:
            raise _Corrupt("page header structs nested more than 32 deep")
        if ttype in (1, 2):  # bool in a field header
            return
        if ttype == 3:
            self.byte()
        elif ttype in (4, 5, 6):
            self.varint()
        elif ttype == 7:
            self.pos += 8
        elif ttype == 8:
            n = self.varint()  # read before the position it moves is added to
            self.pos += n
        elif ttype in (9, 10):
            h = self.byte()
            size = h >> 4 if h >> 4 != 15 else self.varint()
            for _ in range(size):
                self.skip(h & 0x0F if h & 0x0F not in (1, 2) else 3, depth + 1)
        elif ttype == 11:
            size = self.varint()
            if size:
                kv = self.byte()
                for _ in range(size):
                    self.skip(kv >> 4 if kv >> 4 not in (1, 2) else 3, depth + 1)
                    self.skip(kv & 0x0F if kv & 0x0F not in (1, 2) else 3, depth + 1)
        elif ttype == 12:
            self.struct(lambda fid, t: None, depth + 1)
        else:
            raise _Corrupt(f"Thrift type {ttype} in a page header (expected 1-12)")
        if self.pos > self.end:
            raise _Corrupt("a page header running past its column chunk")

    def struct(self, on_field, depth: int = 0) -> None:
        """Read one struct, calling ``on_field(field id, type)`` for each field; it returns True when it
        consumed the field's value, anything else to have it skipped."""
        fid = 0
        while True:
            h = self.byte()
            if h == 0:
                return
            delta, ttype = h >> 4, h & 0x0F
            fid = fid + delta if delta else self.zigzag()
            if not on_field(fid, ttype):
                self.skip(ttype, depth)


def _page_header(t: _Thrift) -> dict[str, int]:
    """The fields of a PageHeader (and of its data page header, v1 or v2) read here."""
    head: dict[str, int] = {}

    def data_v1(fid: int, ttype: int) -> bool:
        if ttype == 5 and fid in (1, 2, 3, 4):
            head[("num_values", "encoding", "def_encoding", "rep_encoding")[fid - 1]] = t.zigzag()
            return True
        return False

    def data_v2(fid: int, ttype: int) -> bool:
        if ttype == 5 and fid in (1, 2, 3, 4, 5, 6):
            head[("num_values", "num_nulls", "num_rows", "encoding", "def_bytes", "rep_bytes")[fid - 1]] = t.zigzag()
            return True
        if fid == 7 and ttype in (1, 2):
            head["is_compressed"] = int(ttype == 1)
            return True
        return False

    def dictionary(fid: int, ttype: int) -> bool:
        if ttype == 5 and fid == 1:
            head["dict_values"] = t.zigzag()
            return True
        return False

    def page(fid: int, ttype: int) -> bool:
        if ttype == 5 and fid in (1, 2, 3, 4):
            head[("type", "uncompressed", "compressed", "crc")[fid - 1]] = t.zigzag()
            return True
        if ttype == 12 and fid in (5, 7, 8):
            t.struct({5: data_v1, 7: dictionary, 8: data_v2}[fid], 1)
            return True
        return False

    t.struct(page)
    for need in ("type", "uncompressed", "compressed"):
        if need not in head:
            raise _Corrupt(f"a page header without its required field {need!r}")
    return head


def _all_defined(buf: np.ndarray, pos: int, end: int, n: int) -> bool:
    """Whether the RLE/bit-packed hybrid definition levels (bit width 1) at ``buf[pos:end]`` say
    that the first ``n`` values are all present."""
    t = _Thrift(buf, pos, end)
    seen = 0
    while seen < n:
        header = t.varint()
        if header & 1:  # bit-packed: header >> 1 groups of 8 one-bit levels
            count = (header >> 1) * 8
            nbytes = header >> 1
            if t.pos + nbytes > end:
                raise _Corrupt("definition levels running past their page")
            take = min(count, n - seen)
            bits = int.from_bytes(buf[t.pos : t.pos + nbytes].tobytes(), "little") & ((1 << take) - 1)
            if bits.bit_count() != take:
                return False
            t.pos += nbytes
            seen += take
        else:  # a run of one value, in one byte
            count = header >> 1
            if count == 0:
                raise _Corrupt("an empty run of definition levels")
            if t.byte() != 1:
                return False
            seen += min(count, n - seen)
    return True


def _plain_spans_py(buf, pages, starts, ends):  # pragma: no cover - compiled by _kernel
    """For each page ``(values start, values end, count, first index)``: the PLAIN byte arrays' starts and ends.
    Returns -1, or the index of the first page whose values run past its end or fall short of it."""
    for j in range(pages.shape[0]):
        p = pages[j, 0]
        stop = pages[j, 1]
        at = pages[j, 3]
        for _ in range(pages[j, 2]):
            if p + 4 > stop:
                return j
            n = np.int64(buf[p]) | (np.int64(buf[p + 1]) << 8) | (np.int64(buf[p + 2]) << 16) | (np.int64(buf[p + 3]) << 24)
            p += 4
            if p + n > stop:
                return j
            starts[at] = p
            ends[at] = p + n
            p += n
            at += 1
        if p != stop:
            return j
    return -1


_compiled: list[Any] = []
_compile_lock = threading.Lock()


def _kernel() -> Any:
    """:func:`_plain_spans_py` compiled (numba, imported on first use: this module is imported with the
    restore code, the kernel needed only by a restore of an uncompressed checkpoint)."""
    with _compile_lock:
        if not _compiled:
            import numba

            from .. import numba_cache  # noqa: F401 - a damaged numba cache file is a miss, not an error

            _compiled.append(numba.njit(cache=True, nogil=True)(_plain_spans_py))
    return _compiled[0]


def column_spans(data: np.ndarray, column: Any, max_def: int, max_rep: int, where: str) -> ByteSpans | None:
    """The values of one column chunk (``column``: pyarrow's ``ColumnChunkMetaData``) of the file mapped
    as ``data``, or None when the chunk is not uncompressed PLAIN ``BYTE_ARRAY`` without nulls.
    ``max_def`` and ``max_rep`` are the column's maximum definition and repetition levels; ``where``
    names the file and row group in errors."""
    if (column.physical_type != "BYTE_ARRAY" or column.compression != "UNCOMPRESSED" or column.has_dictionary_page
            or max_rep != 0 or max_def > 1):
        return None
    start = int(column.data_page_offset)
    end = start + int(column.total_compressed_size)
    total = int(column.num_values)
    try:
        if start < 0 or end > len(data):
            raise _Corrupt(f"a column chunk at bytes {start}-{end} of a file of {len(data)}")
        _populate(data, start, end - start)
        pages = []
        pos, at = start, 0
        while at < total:
            if pos >= end:
                raise _Corrupt(f"{at} of its {total} values found in the column chunk's pages")
            t = _Thrift(data, pos, end)
            head = _page_header(t)
            body = t.pos
            size = head["compressed"]
            if size < 0 or body + size > end:
                raise _Corrupt(f"a page of {size} bytes at byte {pos} running past its column chunk (ends at {end})")
            if "crc" in head and zlib.crc32(data[body : body + size]) != head["crc"] & 0xFFFFFFFF:
                raise _Corrupt(f"the page at byte {pos}: CRC-32 {zlib.crc32(data[body:body + size]):08x} of its "
                               f"{size} bytes, its header says {head['crc'] & 0xFFFFFFFF:08x}")
            kind = head["type"]
            if kind == _INDEX_PAGE:
                pos = body + size
                continue
            if kind not in (_DATA_PAGE, _DATA_PAGE_V2) or head.get("encoding") != _PLAIN:
                return None  # a dictionary page, another encoding
            n = head.get("num_values", -1)
            if n < 0 or at + n > total:
                raise _Corrupt(f"a page at byte {pos} with {n} values, {total - at} left to the chunk's {total}")
            vals = body
            if kind == _DATA_PAGE_V2:
                if head.get("is_compressed", 1) and size != head["uncompressed"]:
                    return None
                if head.get("num_nulls", 0) or head.get("rep_bytes", 0):
                    return None
                vals += head.get("def_bytes", 0) + head.get("rep_bytes", 0)
            elif max_def:
                if head.get("def_encoding") != _RLE:
                    return None
                if body + 4 > body + size:
                    raise _Corrupt(f"the page at byte {pos} too short for its definition levels")
                ln = int.from_bytes(data[body : body + 4].tobytes(), "little")
                vals = body + 4 + ln
                if vals > body + size:
                    raise _Corrupt(f"definition levels of {ln} bytes in a page of {size} at byte {pos}")
                if not _all_defined(data, body + 4, vals, n):
                    return None  # nulls
            if vals > body + size:
                raise _Corrupt(f"levels longer than the page at byte {pos}")
            pages.append((vals, body + size, n, at))
            at += n
            pos = body + size
    except _Corrupt as exc:
        raise SnapshotCorruptError(f"{where}: column {column.path_in_schema!r}: {exc}") from None
    starts = np.empty(total, dtype=np.int64)
    ends = np.empty(total, dtype=np.int64)
    bad = _kernel()(data, np.array(pages, dtype=np.int64).reshape(-1, 4), starts, ends)
    if bad >= 0:
        vals, stop, n, _ = pages[bad]
        raise SnapshotCorruptError(
            f"{where}: column {column.path_in_schema!r}: the {n} PLAIN values of the page ending at byte {stop} "
            "do not fill it exactly (a length running past the page, or bytes left over)")
    return ByteSpans(data, starts, ends)


@dataclass(frozen=True)
class Chunk:
    """What the footer says of one column chunk: the fields the size checks read. Parsed here from the
    footer's Thrift (:func:`footer_chunks`), never through pyarrow's ``RowGroupMetaData.column()``: that
    accessor validates what it parses (a size-statistics histogram of the wrong length, say) by throwing
    a C++ exception it does not catch, which aborts the process, on bytes whose checksum is not yet checked."""

    path_in_schema: str
    physical_type: str
    compression: str
    num_values: int
    total_uncompressed_size: int
    total_compressed_size: int
    data_page_offset: int
    dictionary_page_offset: int | None
    #: a FIXED_LEN_BYTE_ARRAY column's width in bytes, from the footer's schema (0 for other types)
    type_length: int = 0

    @property
    def has_dictionary_page(self) -> bool:
        return self.dictionary_page_offset is not None


@dataclass(frozen=True)
class RowGroup:
    num_rows: int
    total_byte_size: int
    columns: tuple[Chunk, ...]


_TYPES = ("BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY")
_CODEC_NAMES = ("UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW")
#: a footer longer than this is refused before it is read (pyarrow's own default limit is 100 MB)
_FOOTER_MAX = 64 << 20


def footer_chunks(source: Any, where: Any = None) -> list[RowGroup]:
    """The row groups and column chunks the Parquet footer of ``source`` (a path, or a pyarrow file)
    declares, parsed from its Thrift compact bytes. Bytes that do not parse raise
    :class:`~explorer.errors.SnapshotCorruptError` naming the file (``where``) and the offset."""
    where = where if where is not None else source
    f, opened = _random_access(source)
    try:
        size = f.size()
        tail = f.read_at(8, size - 8) if size >= 12 else b""
        if len(tail) != 8 or tail[4:] != b"PAR1":
            raise SnapshotCorruptError(f"{where}: no Parquet footer (the file of {size:,} bytes does not end "
                                       "with 'PAR1'); expected a Parquet file")
        n = int.from_bytes(tail[:4], "little")
        if n <= 0 or n > size - 12 or n > _FOOTER_MAX:
            raise SnapshotCorruptError(f"{where}: its footer declares {n:,} bytes in a file of {size:,}; expected "
                                       f"a footer within the file (and under {_FOOTER_MAX:,} bytes)")
        budget.check(n, file=where, what="the Parquet footer")
        data = memoryview(f.read_at(n, size - 8 - n)).cast("B")
    finally:
        if opened:
            f.close()
    try:
        return _file_metadata(_Thrift(data, 0, len(data)))
    except _Corrupt as exc:
        raise SnapshotCorruptError(f"{where}: its Parquet footer does not parse: {exc}") from None


def _list(t: _Thrift, ttype: int, read_element) -> list:
    if ttype != 9:
        raise _Corrupt(f"a list field of Thrift type {ttype} (expected 9)")
    h = t.byte()
    n = h >> 4 if h >> 4 != 15 else t.varint()
    if n > t.end - t.pos:  # every element takes a byte at least
        raise _Corrupt(f"a list of {n:,} elements in {t.end - t.pos:,} bytes")
    return [read_element(t, h & 0x0F) for _ in range(n)]


def _file_metadata(t: _Thrift) -> list[RowGroup]:
    groups: list[RowGroup] = []

    def column_meta(fields: dict) -> Any:
        def on(fid: int, ttype: int) -> bool:
            if fid == 1 and ttype == 5:
                fields["type"] = t.zigzag()
            elif fid == 3:
                fields["path"] = ".".join(_list(t, ttype, lambda t, _: _binary(t)))
            elif fid == 4 and ttype == 5:
                fields["codec"] = t.zigzag()
            elif fid in (5, 6, 7, 9, 11) and ttype == 6:
                fields[fid] = t.zigzag()
            else:
                return False
            return True
        return on

    def chunk(t: _Thrift, ttype: int) -> Chunk:
        fields: dict = {}

        def on(fid: int, ttype: int) -> bool:
            if fid == 3 and ttype == 12:
                t.struct(column_meta(fields), 2)
                return True
            return False

        t.struct(on, 1)
        if "path" not in fields or 6 not in fields or 7 not in fields or 9 not in fields:
            raise _Corrupt("a column chunk without its metadata (path, sizes, data page offset)")
        ptype, codec = fields.get("type", -1), fields.get("codec", -1)
        return Chunk(fields["path"], _TYPES[ptype] if 0 <= ptype < len(_TYPES) else f"type {ptype}",
                     _CODEC_NAMES[codec] if 0 <= codec < len(_CODEC_NAMES) else f"codec {codec}",
                     fields.get(5, 0), fields[6], fields[7], fields[9], fields.get(11))

    def row_group(t: _Thrift, ttype: int) -> RowGroup:
        fields: dict = {"columns": []}

        def on(fid: int, ttype: int) -> bool:
            if fid == 1:
                fields["columns"] = _list(t, ttype, chunk)
            elif fid in (2, 3) and ttype == 6:
                fields[fid] = t.zigzag()
            else:
                return False
            return True

        t.struct(on, 1)
        return RowGroup(fields.get(3, 0), fields.get(2, 0), tuple(fields["columns"]))

    def schema_element(t: _Thrift, ttype: int) -> tuple[int, int, int]:
        fields: dict = {}

        def on(fid: int, ttype: int) -> bool:
            if fid in (1, 2, 5) and ttype == 5:
                fields[fid] = t.zigzag()
                return True
            return False

        t.struct(on, 1)
        return fields.get(1, -1), fields.get(2, 0), fields.get(5, 0)

    schema: list[tuple[int, int, int]] = []

    def on_file(fid: int, ttype: int) -> bool:
        if fid == 2:
            schema.extend(_list(t, ttype, schema_element))
            return True
        if fid == 4:
            groups.extend(_list(t, ttype, row_group))
            return True
        return False

    t.struct(on_file)
    # the leaves of the schema (its elements without children, the root aside), in order, are the columns:
    # a fixed-length byte array's width bounds what its values decode to (see _check_chunk)
    widths = [length if ptype == 7 else 0 for ptype, length, children in schema[1:] if children <= 0]
    if any(widths):
        groups = [RowGroup(g.num_rows, g.total_byte_size,
                           tuple(replace(c, type_length=max(0, widths[j])) if j < len(widths) and
                                 c.physical_type == "FIXED_LEN_BYTE_ARRAY" else c for j, c in enumerate(g.columns)))
                  for g in groups]
    return groups


def _binary(t: _Thrift) -> str:
    n = t.varint()
    if t.pos + n > t.end:
        raise _Corrupt("a string running past the footer")
    raw = bytes(t.buf[t.pos:t.pos + n])
    t.pos += n
    return raw.decode("utf-8", "replace")


def _random_access(source: Any) -> tuple[Any, bool]:
    """``source`` (what ``pq.ParquetFile`` was given) as a pyarrow random-access file, and whether it was
    opened here: a local path (or a remote one, through its cached copy: ``os.fspath``) memory-mapped, so a
    column chunk's headers cost no copy; a pyarrow file (a remote one read by range) as it is."""
    if isinstance(source, pa.NativeFile):
        return source, False
    return pa.memory_map(os.fspath(source), "r"), True


def check_page_sizes(source: Any, metadata: Any, row_groups: Any, columns: Any = None, where: Any = None) -> None:
    """(``metadata``: the footer as :func:`footer_chunks` gives it, or anything else to have it parsed here.)
    The page headers of the column chunks Arrow is about to decode (row groups ``row_groups``, their
    columns whose top-level name is in ``columns``, all when None), checked before it decodes them.

    Arrow allocates what a page header declares (its uncompressed size) whatever the footer said, and the
    row-group check (``format/keyed.py``) trusted the footer: so each page's declared uncompressed size is
    checked against the memory budget (:class:`~explorer.errors.SnapshotTooLargeError`), and the pages of a
    chunk together against the footer's ``total_uncompressed_size`` for that chunk
    (:class:`~explorer.errors.SnapshotCorruptError` when they declare more: the footer's sizes, which the
    budget was checked against, are then what bounds the read). Each chunk is read once, in one piece (a
    remote file's range is then in the cache for Arrow's own read); only headers are parsed."""
    where = where if where is not None else source
    wanted = None if columns is None else set(columns)
    ident = _identity(source)
    limit = budget.current()
    groups = metadata if isinstance(metadata, list) else footer_chunks(source, where)
    todo = [(i, col) for i in row_groups for col in groups[i].columns
            if (wanted is None or col.path_in_schema.split(".")[0] in wanted)
            and (ident is None or (ident, i, col.path_in_schema, limit) not in _PASSED)]
    if not todo:
        return
    f, opened = _random_access(source)
    try:
        file_size = f.size()
        for i, col in todo:
            _check_chunk(f, file_size, col, f"{where}: row group {i}, column {col.path_in_schema!r}", mapped=opened)
            if ident is not None:
                with _PASSED_LOCK:
                    if len(_PASSED) >= _PASSED_MAX:
                        _PASSED.clear()
                    _PASSED.add((ident, i, col.path_in_schema, limit))
    finally:
        if opened:
            f.close()


#: column chunks whose pages passed under a budget, by (file, size, mtime, row group, column, budget): an
#: analysis that streams key-group ranges reads a row group once per pass, its headers are checked once
_PASSED: set[tuple] = set()
_PASSED_LOCK = threading.Lock()
_PASSED_MAX = 1 << 16


def _identity(source: Any) -> tuple | None:
    """A local file's path, size and modification time (a file rewritten since is checked again); None for a
    pyarrow file (a remote one read by range: checked each time)."""
    if isinstance(source, pa.NativeFile):
        return None
    try:
        st = os.stat(os.fspath(source))
    except (OSError, TypeError):
        return None
    return os.fspath(source), st.st_size, st.st_mtime_ns


def _chunk_bytes(f: Any, start: int, length: int, mapped: bool) -> memoryview:
    """The ``length`` bytes of ``f`` from ``start``: in place when ``f`` is a memory map opened here
    (``read_buffer``: a slice of the mapping, only the pages read are touched), else read (``read_at``, a
    copy: positional, as a file someone else holds may be read by other threads meanwhile). ``read_at`` on
    a memory map copies too: a canonical 1 GB restore copied every column chunk whole only to parse its
    pages' headers (0.5 s of CPU, ``py-spy``)."""
    if mapped:
        f.seek(start)
        return memoryview(f.read_buffer(length)).cast("B")
    return memoryview(f.read_at(length, start)).cast("B")


def _check_chunk(f: Any, file_size: int, col: Any, where: str, mapped: bool = False) -> None:
    start = int(col.dictionary_page_offset) if col.has_dictionary_page and col.dictionary_page_offset else \
        int(col.data_page_offset)
    length, declared = int(col.total_compressed_size), int(col.total_uncompressed_size)
    if length == 0:  # no page at all (an empty row group's chunk, as pyarrow writes it)
        return
    if start < 4 or length < 0 or start + length > file_size:
        raise SnapshotCorruptError(f"{where}: its column chunk at bytes {start}-{start + length} lies outside the "
                                   f"file of {file_size:,} bytes; expected a chunk inside the file")
    budget.check(length, file=where, what="the column chunk (compressed, as the footer declares)")
    data = _chunk_bytes(f, start, length, mapped)
    if len(data) != length:
        raise SnapshotCorruptError(f"{where}: read {len(data):,} bytes of its {length:,}-byte column chunk")
    try:
        walk = _walker()
        pages = None if walk is None else _pages_compiled(walk, data, start, where)
        if pages is None:  # (the compiled walk left this chunk to the reference parser, or is not used yet)
            pages = _pages_python(data, start, where)
        total, values, indexed, dictionary = pages
        if total > declared:
            raise SnapshotCorruptError(
                f"{where}: its pages' headers declare {total:,} bytes uncompressed, the footer {declared:,} for the "
                "whole column chunk; expected pages within what the footer declares (the footer's sizes are what "
                "the memory budget was checked against)")
        # values decoded from run-length or delta encodings take a slot each, whatever the page's bytes
        budget.check(values * 8, file=where, what=f"its {values:,} values as decoded (8 bytes each, at least)")
        if col.type_length > 8:  # fixed-length values decode to their width each, dictionary-encoded or not
            budget.check(values * col.type_length, file=where,
                         what=f"its {values:,} values as decoded ({col.type_length:,} bytes each, the column's width)")
        if dictionary is not None and indexed and col.physical_type == "BYTE_ARRAY":
            _check_dictionary(data, dictionary, indexed, col.compression, where)
    except _Corrupt as exc:
        raise SnapshotCorruptError(f"{where}: {exc}") from None
    finally:
        data.release()


def _page_budget(unc: int, start: int, pos: int, where: str) -> None:
    budget.check(unc, file=where, what=f"the page at byte {start + pos} (uncompressed, as its header declares)")


def _walk_python(data: Any, start: int) -> Any:
    """The pages of a column chunk (``data``, at byte ``start`` of its file) one after the other as the Python
    parser reads their headers: ``(header position, body position, the header's fields)`` each, raising
    :class:`_Corrupt` at the first header that does not parse or page that does not fit the chunk. The reference
    of the compiled walk (:mod:`._page_kernels`)."""
    length = len(data)
    pos = 0
    while pos < length:
        t = _Thrift(data, pos, length)
        head = _page_header(t)
        body, size, unc = t.pos, head["compressed"], head["uncompressed"]
        if size < 0 or unc < 0 or body + size > length:
            raise _Corrupt(f"a page at byte {start + pos} declares {size:,} bytes compressed and {unc:,} "
                           f"uncompressed, {length - body:,} bytes are left of its column chunk")
        yield pos, body, head
        pos = body + size


def _pages_python(data: memoryview, start: int, where: str) -> tuple[int, int, int, tuple | None]:
    """The pages of a column chunk (``data``, at byte ``start`` of its file) walked with the Python parser, each
    checked against the budget as it is read: ``(bytes uncompressed, values, values dictionary-indexed, the first
    dictionary page's (body, size, uncompressed, entries) or None)``."""
    total, values, indexed, dictionary, pages = 0, 0, 0, None, 0
    for pos, body, head in _walk_python(data, start):
        size, unc = head["compressed"], head["uncompressed"]
        _page_budget(unc, start, pos, where)
        total += unc
        if head["type"] == _DICTIONARY_PAGE and dictionary is None:
            dictionary = (body, size, unc, max(0, head.get("dict_values", 0)))
        elif head["type"] in (_DATA_PAGE, _DATA_PAGE_V2):
            n = max(0, head.get("num_values", 0))
            values += n
            if head.get("encoding") in _DICTIONARY_ENCODINGS:
                indexed += n
        pages += 1
    with _walk_lock:
        _python_pages[0] += pages
    return total, values, indexed, dictionary


def _pages_compiled(walk: Any, data: memoryview, start: int, where: str) -> tuple[int, int, int, tuple | None] | None:
    """:func:`_pages_python`'s answer from the compiled walk (:mod:`._page_kernels`, one call for the chunk's
    headers, which adds them up as the Python walk does), the same pages checked the same way; None when the walk
    leaves the chunk to the Python parser (a header it refuses, or anything the two might read apart: the Python
    parser then raises or reads it)."""
    sums = np.zeros(walk.SUMS, dtype=np.int64)
    rows = _headers(walk, data, 0, len(data), sums)
    if rows is None:
        return None
    total, largest, values, indexed, found, body, size, unc, entries = sums.tolist()
    limit = budget.current()
    if limit is not None and largest > limit:
        over = rows[:, walk.UNCOMPRESSED] > limit
        i = int(np.argmax(over))  # the first page over it, as the Python walk meets it
        _page_budget(int(rows[i, walk.UNCOMPRESSED]), start, int(rows[i, walk.HEADER]), where)
    return total, values, indexed, (body, size, unc, entries) if found else None


def _headers(walk: Any, data: Any, pos: int, end: int, sums: np.ndarray) -> np.ndarray | None:
    """The page headers of ``data[pos:end]`` by the compiled walk, one row each (:mod:`._page_kernels`' columns;
    added up in ``sums``), or None when it leaves them to the Python parser."""
    buf = _read_only(data)
    out = np.empty((64, walk.COLUMNS), dtype=np.int64)
    parts = []
    while True:
        status, n, pos = walk.page_headers(buf, pos, end, out, sums)
        if status == walk.DEFER:
            return None
        if status == walk.OK:
            return out[:n] if not parts else np.concatenate(parts + [out[:n]])
        parts.append(out[:n])
        out = np.empty((2 * len(out), walk.COLUMNS), dtype=np.int64)


def _read_only(data: Any) -> np.ndarray:
    """``data``'s bytes as a read-only uint8 array (no copy): the one signature of the kernels compiled and cached
    (a map's or an Arrow buffer's bytes are read-only)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    if buf.flags.writeable:
        buf = buf.view()
        buf.flags.writeable = False
    return buf


#: which parser walks the page headers :func:`check_page_sizes` reads: None (the compiled walk of
#: :mod:`._page_kernels` once the process has walked :data:`PYTHON_PAGES` pages with the Python parser and numba's
#: cache holds the kernel, or has walked :data:`COMPILE_PAGES`; the Python parser before), "numba" or "python" (tests)
WALK: str | None = None
#: pages a process walks with the Python parser before it loads numba and the kernel (~0.6 CPU-s, against ~10 us a
#: page in Python): a small snapshot is checked without numba
PYTHON_PAGES = 1 << 12
#: pages a process walks with the Python parser before it compiles the kernel where numba's cache lacks it
#: (~2 CPU-s of compiling, ``make venv`` compiles it ahead: :mod:`explorer.kernels`)
COMPILE_PAGES = 1 << 17
_python_pages = [0]
_kernel_cached: list[bool] = []
_walk_lock = threading.Lock()


def _walker() -> Any:
    """The compiled walk's module (:mod:`._page_kernels`) when it is to walk the next chunk, else None (see :data:`WALK`)."""
    if WALK == "python":
        return None
    seen = _python_pages[0]
    if WALK != "numba" and seen < PYTHON_PAGES:
        return None
    from . import _page_kernels  # numba: loaded where used

    if WALK == "numba" or seen >= COMPILE_PAGES:
        return _page_kernels
    if not _kernel_cached:
        from .. import numba_cache

        ro = np.frombuffer(b"\0", dtype=np.uint8)
        args = (ro, 0, 1, np.empty((1, _page_kernels.COLUMNS), dtype=np.int64), np.zeros(_page_kernels.SUMS, np.int64))
        with _walk_lock:
            if not _kernel_cached:
                _kernel_cached.append(numba_cache.cached(_page_kernels.page_headers, args))
    return _page_kernels if _kernel_cached[0] else None


def _may_hold_longer(page: bytes, limit: int) -> bool:
    """Whether some 4 bytes of ``page`` read as a length over ``limit`` that still fits in the page after them:
    False proves that no entry is longer than ``limit`` without walking the entries (every entry's length
    prefix is such 4 bytes), which for text is the common case (its bytes read as lengths of hundreds of MB,
    past the page). Four aligned views, no copy of the page."""
    end = len(page)
    for k in range(4):
        n = (end - k) // 4
        if n <= 0:
            continue
        lengths = np.frombuffer(page, dtype="<u4", offset=k, count=n)
        cand = np.flatnonzero((lengths > limit) & (lengths <= end - 4 - k))
        if len(cand) and (lengths[cand].astype(np.int64) <= end - 4 - k - 4 * cand).any():
            return True
    return False


#: dictionaries of more entries than this are walked by the compiled kernel (a Python walk: ~0.2 us an entry)
_WALK_IN_PYTHON = 4096
#: data page encodings whose values are indexes into the chunk's dictionary page
_DICTIONARY_ENCODINGS = (2, 8)  # PLAIN_DICTIONARY, RLE_DICTIONARY
#: Parquet's codec names as pyarrow's (LZ4 with Hadoop's framing, LZO: none)
_CODECS = {"SNAPPY": "snappy", "GZIP": "gzip", "BROTLI": "brotli", "ZSTD": "zstd", "LZ4_RAW": "lz4_raw"}


def _check_dictionary(data: memoryview, dictionary: tuple[int, int, int, int], indexed: int, codec: str,
                      where: str) -> None:
    """``indexed`` values of dictionary-encoded pages decode to a copy of an entry each: at most ``indexed``
    times the longest entry, which may be far more than any page declares (one 8 MB entry, 215 rows: 1.7 GB
    out of a 4.6 KB file). First the longest an entry can be (the page less a length prefix for each other
    entry); only when that bound is over the budget are the entries read (the page decompressed, as Arrow
    will) for the longest one."""
    body, size, unc, count = dictionary
    longest = max(0, unc - 4 * count)
    what = "its dictionary-encoded values as decoded (each a copy of its dictionary entry)"
    if indexed * longest <= (budget.current() or 0):
        return
    raw = data[body:body + size]
    if codec == "UNCOMPRESSED":
        page = bytes(raw)
    elif codec in _CODECS:
        try:
            # a view of Arrow's buffer, not a copy of it into a bytes object (the walk only reads it)
            page = memoryview(pa.decompress(raw, decompressed_size=unc, codec=_CODECS[codec]))
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise _Corrupt(f"its dictionary page does not decompress with {codec} ({type(exc).__name__})") from None
    else:  # (no codec to look inside with: the bound stands)
        budget.check(indexed * longest, file=where, what=f"{what}, up to {longest:,} bytes each")
        return
    limit = (budget.current() or 0) // indexed
    if count <= _WALK_IN_PYTHON and not _may_hold_longer(page, limit):
        return  # no entry longer than the budget allows for each index: proven without walking them
    if count > _WALK_IN_PYTHON:  # the compiled walk (numba loaded once, ~0.5 CPU-s, for dictionaries this big)
        from . import _page_kernels  # numba: loaded where used

        longest = _page_kernels.longest_entry(_read_only(page), count)
        if longest >= 0:
            budget.check(indexed * longest, file=where,
                         what=f"{what}: {indexed:,} of them, the longest entry {longest:,} bytes")
            return
    longest, at, end = 0, 0, len(page)  # (or the compiled walk found the entries not filling the page: say where)
    for _ in range(count):
        if at + 4 > end:
            raise _Corrupt(f"its dictionary page ends at byte {at} before its {count:,} entries do")
        n = int.from_bytes(page[at:at + 4], "little")
        longest = max(longest, n)
        at += 4 + n
    if at > end:
        raise _Corrupt(f"its dictionary page's entries run {at - end:,} bytes past its end")
    budget.check(indexed * longest, file=where,
                 what=f"{what}: {indexed:,} of them, the longest entry {longest:,} bytes")


def warm() -> None:
    """Load the values' kernel here from numba's cache (for a background warm-up when a RocksDB backend opens: a
    restore's direct route). The page headers' kernels (:mod:`._page_kernels`) are not loaded here: a restore's
    checks walk their first pages in Python (:data:`PYTHON_PAGES`), and loading more kernels beside the restore
    only holds numba's lock longer; :func:`warm_headers` compiles them at install."""
    buf = np.frombuffer(bytes([1, 0, 0, 0, 7]), dtype=np.uint8)  # read-only, as a mapped file
    _kernel()(buf, np.array([[0, 5, 1, 0]], dtype=np.int64), np.empty(1, np.int64), np.empty(1, np.int64))


def warm_headers() -> None:
    """Compile (or load) the page headers' kernels (:mod:`._page_kernels`) into numba's cache: ``python -m
    explorer.kernels --warm``."""
    from . import _page_kernels  # numba: loaded where used

    _page_kernels.warm()
