"""The data blocks of a column family's SST files parsed at once, with NumPy and numba kernels.

:mod:`.file` reads a data block entry by entry in Python; this module reads the same
bytes column-wise and gives the same visible key/value pairs as
:func:`.instance.resolve` (a test checks it on every fixture), as byte ranges of two
buffers (keys, values), ready for ``columnar`` decoding. Flink keeps one column
family per state, so only the files of the states asked for are read at all.

1. every data block is decompressed (``cramjam``) and the blocks are joined
   into one buffer (:func:`_blocks`);
2. a numba kernel (:func:`.kernels.scan_blocks`) walks every entry of every
   block, checking each varint, key and value against the end of its block's
   entries, and counts them and the longest key; a second walk
   (``fill_entries``) writes each user key as a row of a ``(entries, width)``
   byte matrix, zero past the key (the shared prefix comes from the previous
   key), with the value's place, the sequence number and type, and how the key
   compares with the previous one of its file (greater, an older version,
   out of order);
3. values stay where they are in the joined blocks. One file of values with
   one version per key is done: its rows are already in key order. Otherwise
   the files' sorted runs are merged (``merge_runs``, newest version first),
   the newest version of each user key decides as in :func:`.instance.resolve` and
   the visible keys' rows are copied into their own buffer, in key order
   (``visible_entries``); :func:`.instance.combine` joins the few keys whose newest
   version is a merge operand (Flink's list appends).

A damaged block raises :class:`SstError` naming the file and the block; what
this module does not handle (a data-block hash index, a key matrix much larger
than the data, entries out of bytewise order) raises :class:`Unsupported`; the
caller then uses the entry-by-entry reader.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import threading
import weakref
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cramjam
import numpy as np
import pyarrow as pa

from .. import snappy as snappy_format
from . import _vectorised
from .codes import DISORDER, HASH_INDEX, OLDER, SAME_SEQ
from .instance import combine
from .file import TYPE_MERGE, TYPE_VALUE, SstError, SstFile

_PAD = 16
_MARGIN = 128  # zero bytes around the joined blocks


class Unsupported(Exception):
    """These SST files need the entry-by-entry reader."""


#: which implementation walks and merges the blocks: None (numba's kernels where numba's cache holds them
#: or the process has walked :data:`NUMPY_BYTES` already, else their NumPy forms), "numba" or "numpy" (tests)
WALK: str | None = None
#: bytes (data blocks walked, key rows merged) a process gives the NumPy forms (:mod:`._vectorised`) of kernels
#: numba's cache does not hold, before it compiles them: ~0.5 CPU-s of NumPy at most, against 4-5 CPU-s
#: of compiling (issue 31: a first open after install without ``make venv``'s warm-up compiles nothing)
NUMPY_BYTES = 1 << 25
_numpy_left: list[int | None] = [None]  # what is left of NUMPY_BYTES (None: not started)
_numpy_lock = threading.Lock()


def _implementation(kernel: str, size: int, args: tuple) -> Any:
    """The module whose ``kernel`` walks ``args`` (``size`` bytes): :mod:`.kernels` (numba) where that kernel is
    compiled or in numba's cache for these argument types (:func:`explorer.numba_cache.cached`, one small file
    read) or the process's :data:`NUMPY_BYTES` are spent; else :mod:`._vectorised`, the same results without
    compiling."""
    if WALK == "numpy":
        return _vectorised
    from . import kernels  # numba: loaded where used
    from ... import numba_cache

    if WALK == "numba" or numba_cache.cached(getattr(kernels, kernel), args):
        return kernels
    with _numpy_lock:
        left = NUMPY_BYTES if _numpy_left[0] is None else _numpy_left[0]
        _numpy_left[0] = left - size if size <= left else 0
        return _vectorised if size <= left else kernels


def pooled_empty(n: int, dtype: Any = np.uint8) -> np.ndarray:
    """An uninitialised array of ``n`` items in Arrow's memory pool (mimalloc or jemalloc).

    For the large, short-lived buffers of a snapshot (joined data blocks, gathered values):
    the pool keeps freed memory for the next one, where ``np.empty`` maps fresh pages each
    time (and asks for transparent huge pages, whose direct compaction stalled a first touch
    of 1 GB for 2-4 s on the benchmark machine against 0.2 s for a reused pool buffer). The
    array holds the buffer: it lives as long as the array or anything made from it.
    """
    dt = np.dtype(dtype)
    buf = pa.allocate_buffer(max(1, n * dt.itemsize), resizable=False)
    return np.frombuffer(buf, dtype=dt, count=n)


class Recycled:
    """Buffers for the large, short-lived arrays of one snapshot (gathered values), each used again once
    the last array over it is gone: a snapshot's batches are decoded, written and dropped one after the
    other, and on this machine's VM a first touch of fresh memory costs more than the copy into it
    (1 GB of values: 0.19 s of page faults, see :func:`pooled_empty`). Thread-safe; :meth:`close`
    lets the buffers go (those still in use go with their arrays)."""

    def __init__(self, keep: int = 8) -> None:
        self._free: list[np.ndarray] = []
        self._lock = threading.Lock()
        self._keep = keep
        self._open = True

    def empty(self, n: int) -> np.ndarray:
        """An uninitialised uint8 array of ``n`` bytes (a view of a free buffer, or of a new one with some
        room to spare, so that the next batch, a little larger, fits it too)."""
        with self._lock:
            fits = [k for k, b in enumerate(self._free) if len(b) >= n]
            base = self._free.pop(min(fits, key=lambda k: len(self._free[k]))) if fits else None
        if base is None:
            base = pooled_empty(n + n // 8 + 64)
        out = base[:n]
        weakref.finalize(out, self._back, base)
        return out

    def _back(self, base: np.ndarray) -> None:
        with self._lock:
            if self._open and len(self._free) < self._keep:
                self._free.append(base)

    def close(self) -> None:
        with self._lock:
            self._open = False
            self._free.clear()


def _u32le(b: np.ndarray, pos: np.ndarray) -> np.ndarray:
    v = b[pos].astype(np.int64)
    v |= b[pos + 1].astype(np.int64) << 8
    v |= b[pos + 2].astype(np.int64) << 16
    v |= b[pos + 3].astype(np.int64) << 24
    return v


def _varints(b: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varint32 at every position; returns values and the positions after them."""
    v = b[pos].astype(np.int64)
    more = np.flatnonzero(v >= 0x80)
    if not len(more):
        return v, pos + 1
    end = pos + 1
    v[more] &= 0x7F
    for k in range(1, 5):
        y = b[pos[more] + k].astype(np.int64)
        v[more] |= (y & 0x7F) << (7 * k)
        end[more] += 1
        more = more[y >= 0x80]
        if not len(more):
            return v, end
    raise SstError(f"a varint32 at offset {int(pos[more[0]])} of the joined data blocks runs over 5 bytes")


def _data_handles(f: SstFile) -> list[tuple[int, int]]:
    """The data block handles of ``f``'s index (as ``SstFile.data_handles`` gives them)."""
    off, size = _handle_arrays(f)
    return list(zip(off.tolist(), size.tolist()))


def _index_restarts(f: SstFile) -> tuple | None:
    """The entries of ``f``'s index block read at its restart points, all at once: ``(block bytes (padded),
    entry starts, end of entries, shared and non-shared key lengths, position of each key)``; None
    where the index is not a binary-search index, its restart array is malformed or an entry's
    varints run off the block (the callers then read entry by entry, or not at all)."""
    if f.prop_int("rocksdb.block.based.table.index.type", 0) != 0:
        return None
    delta = f.prop_int("rocksdb.index.value.is.delta.encoded", 0) == 1
    block = f.block(f.index)
    n = len(block)
    b = np.frombuffer(block + b"\0" * _PAD, dtype=np.uint8)
    packed = int.from_bytes(block[n - 4 :], "little")
    nr = packed & 0x7FFFFFFF
    limit = n - 4 - 4 * nr
    if packed >> 31 or nr < 1 or limit < 0:
        return None
    starts = _u32le(b, limit + 4 * np.arange(nr))
    if (starts >= limit).any():
        return None
    try:
        shared, p = _varints(b, starts)
        nonshared, p = _varints(b, p)
        if not delta:
            _, p = _varints(b, p)
    except SstError:
        return None
    return b, starts, limit, shared, nonshared, p


def _handle_arrays(f: SstFile) -> tuple[np.ndarray, np.ndarray]:
    """Offsets and sizes of ``f``'s data blocks, all at once when every index entry is a restart point.

    That is RocksDB's default (``index_block_restart_interval`` 1): each entry is
    ``varint shared (0), varint non_shared, [varint value length], key, varint
    offset, varint size``. Otherwise ``SstFile.data_handles`` reads it entry by entry.
    """
    def by_entries() -> tuple[np.ndarray, np.ndarray]:
        handles = f.data_handles()
        return (np.array([h[0] for h in handles], dtype=np.int64), np.array([h[1] for h in handles], dtype=np.int64))

    if f.key_groups is not None:
        return by_entries()  # (only some key groups: the index keys say which blocks)
    got = _index_restarts(f)
    if got is None:
        return by_entries()
    b, starts, limit, shared, nonshared, p = got
    off, p = _varints(b, p + nonshared)
    size, p = _varints(b, p)
    if shared.any() or not (p == np.append(starts[1:], limit)).all():
        return by_entries()  # entries between restart points: the entry-by-entry reader
    return off, size


class _FileMapping:
    """SST files mapped side by side into one reserved stretch of address space (Linux): the joined
    buffer of :func:`_blocks` without copying a byte of them. Files are mapped read-only (their
    page-cache pages, populated in one call), page-aligned one after the other behind a zero
    page; ``extra`` writable zero bytes follow for decompressed blocks (the writable view of
    :meth:`views`). The array handed on (:meth:`views`) is read-only. Unmapped when the last array over it goes
    (the ctypes array holding the address keeps this object alive). ``populate=False``: the
    files' pages are mapped as they are first read, not all at once."""

    _READ, _WRITE = 0x1, 0x2
    _PRIVATE, _ANON, _FIXED, _POPULATE = 0x02, 0x20, 0x10, 0x8000

    def __init__(self, paths: list[str], extra: int, populate: bool = True) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self._munmap = libc.munmap
        page = mmap.PAGESIZE
        sizes = [os.path.getsize(p) for p in paths]
        self.starts = []
        at = page  # a zero page first: the margin before the first block
        for z in sizes:
            self.starts.append(at)
            at += -(-z // page) * page
        self.extra_start = at
        self.size = at + -(-(extra + _MARGIN) // page) * page
        base = libc.mmap(None, self.size, self._READ | self._WRITE, self._PRIVATE | self._ANON, -1, 0)
        if base in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap of the joined SST buffer failed")
        self.base = base
        try:
            for p, z, st in zip(paths, sizes, self.starts):
                if not z:
                    continue
                fd = os.open(p, os.O_RDONLY)
                try:
                    got = libc.mmap(base + st, z, self._READ, self._PRIVATE | self._FIXED | (self._POPULATE if populate else 0), fd, 0)
                finally:
                    os.close(fd)
                if got != base + st:
                    raise OSError(ctypes.get_errno(), f"mmap of {p} into the joined SST buffer failed")
        except BaseException:
            self.close()
            raise

    def views(self) -> tuple[np.ndarray, memoryview]:
        """The read-only array over the whole mapping, and the writable view of its area for
        decompressed blocks (release it when they are in place). Neither is kept here: the
        array holds the mapping (through the ctypes array under it), not the other way round,
        so the mapping is unmapped as the last array over it goes. (It once kept its array: a
        cycle through a NumPy array, which the garbage collector cannot see, so no mapping
        was ever unmapped and every full snapshot kept its SST files mapped, deleted or not.)"""
        holder = (ctypes.c_uint8 * self.size).from_address(self.base)
        holder._mapping = self
        writable = memoryview(holder).cast("B")[self.extra_start :]
        array = np.frombuffer(holder, dtype=np.uint8)
        array.flags.writeable = False
        return array, writable

    def close(self) -> None:
        if self.base:
            self._munmap(self.base, self.size)
            self.base = 0

    def __del__(self) -> None:
        self.close()


#: join SST files by mapping them side by side (Linux) instead of copying them into one buffer
MAP_FILES = True


def _place_blocks(f: SstFile, rest: np.ndarray, off: np.ndarray, size: np.ndarray, ctype: np.ndarray,
                  where: np.ndarray, length: np.ndarray, other: list, om: memoryview, shift: int) -> None:
    """Put the compressed blocks ``rest`` of ``f`` at ``where - shift`` in ``om``: Snappy blocks decompressed
    straight into place, others (already decompressed into ``other``) copied."""
    mv = memoryview(f.data)
    into = cramjam.snappy.decompress_raw_into
    for i, o, z, c, d, n in zip(rest.tolist(), off[rest].tolist(), size[rest].tolist(), ctype[rest].tolist(),
                                where[rest].tolist(), length[rest].tolist()):
        if c == 1:
            try:
                got = into(mv[o : o + z], om[d - shift : d - shift + n])
            except cramjam.DecompressionError as exc:
                raise SstError(f"{f.name}: the Snappy block at {o} ({z} bytes) does not decompress "
                               f"({exc})") from exc
            if got != n:
                raise SstError(f"{f.name}: the Snappy block at {o} decompressed short of its stated {n} bytes")
        else:
            om[d - shift : d - shift + n] = other[i]


def _mapped_blocks(files: list[SstFile], plans: list) -> tuple | None:
    """:func:`_blocks` by :class:`_FileMapping` where every file has a ``path`` (None elsewhere)."""
    paths = [getattr(f, "path", None) for f in files]
    if not MAP_FILES or not sys.platform.startswith("linux") or not files or any(p is None for p in paths):
        return None
    extra = int(sum(int(p[4][p[3] != 0].sum()) for p in plans))
    try:
        m = _FileMapping([str(p) for p in paths], extra)
    except OSError:
        return None
    out, om = m.views()  # om[d - m.extra_start] is out[d]
    at = m.extra_start
    x0 = m.extra_start
    where_all = []
    for (f, off, size, ctype, length, other), st in zip(plans, m.starts):
        plain = ctype == 0
        where = np.empty(len(off), dtype=np.int64)
        where[plain] = st + off[plain]
        rest = np.flatnonzero(~plain)
        if len(rest):
            where[rest] = at + np.cumsum(length[rest]) - length[rest]
            at += int(length[rest].sum())
        _place_blocks(f, rest, off, size, ctype, where, length, other, om, x0)
        where_all.append(where)
    om.release()
    starts = np.concatenate(where_all)
    blen = np.concatenate([p[4] for p in plans])
    block_file = np.repeat(np.arange(len(plans)), [len(p[1]) for p in plans]).astype(np.int64)
    block_offset = np.concatenate([p[1] for p in plans])
    return out, starts, blen, block_file, block_offset


def _blocks(files: list[SstFile], deferred: list | None = None
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every data block of ``files`` decompressed into one zero-margined buffer: the buffer, each block's
    start in it, its length, its file (index into ``files``) and its offset in that file.

    Stored (uncompressed) blocks are not copied one by one: the span of a file holding them is
    copied whole (one bulk copy; the trailers between them stay in the buffer, unread).
    Snappy blocks are decompressed straight into place after it (``cramjam``'s
    ``decompress_raw_into``), their lengths read from their headers all at
    once; :data:`_MARGIN` zero bytes before and after let fixed-width rows be
    read at any value without running off the buffer. A block that does not
    decompress raises :class:`SstError` naming the file.

    Every block's checksum is verified before anything is decompressed; with ``deferred`` (a list) and
    no compressed block in any file, the verification is left to the caller instead: ``(file, offsets,
    sizes, bytes)`` per file are appended to ``deferred`` (see :func:`_entries`; ``bytes``: the file's span
    of the mapped buffer, or None to read the file's own).
    """
    plans = []  # per file: (file, block offsets, sizes, compression types, decompressed lengths, other blocks)
    to_verify: list = []
    for f in files:
        try:
            off, size = _handle_arrays(f)
        except IndexError as exc:
            raise SstError(f"{f.name}: the index block is damaged (an entry runs past it)") from exc
        fb = np.frombuffer(f.data, dtype=np.uint8)
        over = (off < 0) | (size < 0) | (off + size + 5 > len(fb))
        if over.any():
            i = int(np.flatnonzero(over)[0])
            raise SstError(f"{f.name}: block at {int(off[i])} (+{int(size[i])}) runs past the end of the file")
        if f.ensure is not None and len(off):
            f.ensure(list(zip(off.tolist(), (size + 5).tolist())))  # a sparse file: its wanted blocks' bytes
        ctype = fb[off + size]
        to_verify.append((f, off, size))
        if deferred is None or ctype.any():
            deferred = None  # (a compressed block: every checksum now, before anything is decompressed)
            for g, o, z in to_verify:  # the trailers' checksums
                g.verify_blocks(o, z)
            to_verify = []
        length = size.copy()
        snappy = np.flatnonzero(ctype == 1)
        if len(snappy):
            # a raw Snappy block starts with its decompressed length, a varint32 (within the block's trailer)
            length[snappy] = _varints(fb, off[snappy])[0]
            wrong = length[snappy] > snappy_format.length_bound(size[snappy])  # a damaged header
            if wrong.any():
                i = int(snappy[np.flatnonzero(wrong)[0]])
                raise SstError(f"{f.name}: the Snappy block at {int(off[i])} ({int(size[i])} bytes) claims "
                               f"{int(length[i])} bytes decompressed, more than Snappy can expand to")
        other = {}
        for i in np.flatnonzero(ctype > 1).tolist():  # LZ4, ZSTD: whole, then copied
            try:
                other[i] = f.block((int(off[i]), int(size[i])))
            except (cramjam.DecompressionError, IndexError) as exc:
                raise SstError(f"{f.name}: the block at {int(off[i])} ({int(size[i])} bytes, compression type "
                               f"{int(ctype[i])}) does not decompress ({exc})") from exc
            length[i] = len(other[i])
        plans.append((f, off, size, ctype, length, other))
    mapped = _mapped_blocks(files, plans)
    if deferred is not None:
        # (f, offsets, sizes, the file's bytes to verify): with the files mapped side by side, each
        # file's own span of the joined buffer (its pages mapped already; plain blocks sit at start + offset)
        at = 0
        for f, off, size in to_verify:
            data = None
            if mapped is not None and len(off):
                start = int(mapped[1][at]) - int(off[0])
                if 0 <= start and start + len(f.data) <= len(mapped[0]):
                    data = mapped[0][start : start + len(f.data)]
            deferred.append((f, off, size, data))
            at += len(off)
    if mapped is not None:
        return mapped
    # layout: per file, the span of its stored (uncompressed) blocks copied whole, in one bulk copy
    # (trailers and all; blocks are addressed by start and length), then its decompressed blocks
    regions = []  # per file: (span start in the file, span length, decompressed bytes)
    for f, off, size, ctype, length, other in plans:
        plain = ctype == 0
        lo = int(off[plain].min()) if plain.any() else 0
        hi = int((off + size)[plain].max()) if plain.any() else 0
        regions.append((lo, hi - lo, int(length[~plain].sum())))
    total = sum(r[1] + r[2] for r in regions)
    out = pooled_empty(_MARGIN + total + _MARGIN)
    out[:_MARGIN] = 0
    out[_MARGIN + total:] = 0
    om = memoryview(out)
    where_all = []
    at = _MARGIN
    for (f, off, size, ctype, length, other), (lo, span, packed) in zip(plans, regions):
        plain = ctype == 0
        where = np.empty(len(off), dtype=np.int64)
        if span:
            out[at : at + span] = np.frombuffer(f.data, dtype=np.uint8, count=span, offset=lo)
            where[plain] = at + off[plain] - lo
        at += span
        rest = np.flatnonzero(~plain)
        if len(rest):
            where[rest] = at + np.cumsum(length[rest]) - length[rest]
        at += packed
        _place_blocks(f, rest, off, size, ctype, where, length, other, om, 0)
        where_all.append(where)
    starts = np.concatenate(where_all) if where_all else np.zeros(0, dtype=np.int64)
    blen = np.concatenate([p[4] for p in plans]) if plans else np.zeros(0, dtype=np.int64)
    block_file = np.repeat(np.arange(len(plans)), [len(p[1]) for p in plans]).astype(np.int64)
    block_offset = np.concatenate([p[1] for p in plans]) if plans else np.zeros(0, dtype=np.int64)
    return out, starts, blen, block_file, block_offset


_MESSAGES = {
    1: "is shorter than its 4-byte trailer",
    2: "claims more restart points than it has room for",
    4: "has a varint32 that runs past its entries or over 5 bytes",
    5: "has an entry whose key or value runs past its entries",
    6: "has a key that shares more bytes than the previous key has",
    7: "has an internal key shorter than its 8-byte trailer",
    8: "holds more entries on the second walk than on the first",
    9: "could not be walked (internal error: arrays of the wrong sizes)",
}


def _walk_error(code: int, block: int, at: int, files: list[SstFile], bfile: np.ndarray, boff: np.ndarray,
                blen: np.ndarray) -> Exception:
    if code == HASH_INDEX:
        return Unsupported("data block hash index")
    name = files[int(bfile[block])].name
    return SstError(f"{name}: the data block at offset {int(boff[block])} ({int(blen[block])} bytes decompressed) "
                    f"{_MESSAGES.get(code, f'is damaged (code {code})')}, at byte {at} of the block")


def _entries(files: list[SstFile]):
    """Walk every data block of ``files`` (the numba kernels of :mod:`.kernels`).

    Returns ``(joined, keys, width, ulen, vpos, vlen, seq, typ, rel, runs)``:
    the joined blocks; entry ``i``'s user key as row ``keys[_MARGIN + i * width :][:width]``
    (zero past the key, after :data:`_MARGIN` zero bytes); its length, its value's
    start and length in ``joined``, sequence number, type and relation to the
    previous entry of its file (``codes.FIRST`` ...); where each file's
    entries start, then their count.
    """
    deferred: list = []
    joined, base, blen, bfile, boff = _blocks(files, deferred)
    if not deferred:
        return _walk(files, joined, base, blen, bfile, boff)
    # no compressed blocks: their checksums are verified in a thread (a C call per block, with the GIL)
    # while the kernels walk the same bytes (without it); a damaged block's checksum error comes first
    with ThreadPoolExecutor(1, thread_name_prefix="sst-verify") as pool:
        check = pool.submit(_verify, deferred)
        try:
            got = _walk(files, joined, base, blen, bfile, boff)
        except BaseException:
            check.result()
            raise
        check.result()
    return got


def _verify(deferred: list) -> None:
    for f, off, size, data in deferred:
        f.verify_blocks(off, size, data)


def _walk(files: list[SstFile], joined: np.ndarray, base: np.ndarray, blen: np.ndarray, bfile: np.ndarray,
          boff: np.ndarray):
    """:func:`_entries` of the joined blocks."""
    counts = np.zeros(len(base), dtype=np.int64)
    kernels = _implementation("scan_blocks", int(blen.sum()), (joined, base, blen, counts))
    code, block, at, longest = kernels.scan_blocks(joined, base, blen, counts)
    if code:
        raise _walk_error(code, block, at, files, bfile, boff, blen)
    n = int(counts.sum())
    width = max(8, -(-(int(longest) - 8) // 8) * 8)
    if n * width > max(1 << 26, 8 * len(joined)):
        raise Unsupported(f"keys of up to {width} bytes")
    keys = np.empty(_MARGIN + n * width, dtype=np.uint8)
    keys[:_MARGIN] = 0
    ulen, vpos, vlen, seq = (np.empty(n, dtype=np.int64) for _ in range(4))
    typ = np.empty(n, dtype=np.uint8)
    rel = np.empty(n, dtype=np.int8)
    # (the scan's implementation: NumPy for both, or numba for both, as the warm-up caches them together)
    code, block, at = kernels.fill_entries(joined, base, blen, bfile, keys, _MARGIN, width, ulen, vpos, vlen, seq,
                                           typ, rel)
    if code:
        raise _walk_error(code, block, at, files, bfile, boff, blen)
    per_file = np.bincount(bfile, weights=counts, minlength=len(files)).astype(np.int64)
    runs = np.concatenate([[0], np.cumsum(per_file)]).astype(np.int64)
    return joined, keys, width, ulen, vpos, vlen, seq, typ, rel, runs


def read_column_family(files: list[SstFile], types: tuple[int, ...] | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Visible entries of one column family spread over ``files``: ``(values, keys, ks, ke, vs, ve, merged keys)``.

    ``types``, if given, are the only entry types accepted (anything else raises
    :class:`Unsupported`, as do two versions of a key with one sequence number).
    ``vs``/``ve`` index ``values`` (the joined blocks, then any merged lists),
    ``ks``/``ke`` index ``keys`` (one ``width``-byte row per key, zero past the
    key, after :data:`_MARGIN` zero bytes), both uint8 arrays (two buffers:
    joining them would copy every block once more). Entries come in RocksDB's
    key order (bytewise), as :func:`.instance.resolve` gives them.
    """
    return _resolve(files, types, *_entries(files))


class ColumnFamilyBlocks:
    """The data blocks of one column family's ``files`` joined once (:func:`_blocks`: mapped side by side,
    compressed ones decompressed and every checksum verified first), then read a few blocks at a time
    (:meth:`read`: :func:`read_column_family` of those blocks), so that a key-group range can be
    walked and written while the next one is walked (:mod:`explorer.engine.checkpoint.sst_view`).

    Where no block is compressed, the blocks' checksums are left to :meth:`verify`, which the caller
    runs on the blocks it is about to read (and on all the others at the end): :meth:`read` walks
    what it is given (bounds-checked: a damaged block gives an error or wrong entries, never a read
    outside the buffer).
    """

    def __init__(self, files: list[SstFile], lazy: bool = False) -> None:
        self.files = files
        deferred: list = []
        got = _mapped_plain(files, lazy)
        if got is None:
            got = _blocks(files, deferred)
        else:
            got, deferred = got
        self.joined, self.base, self.blen, self.bfile, self.boff = got
        self._deferred = {id(d[0]): d for d in deferred}  # by file: (file, offsets, sizes, bytes)
        self._unverified = np.zeros(len(self.base), dtype=bool)
        if deferred:
            self._unverified[np.isin(self.bfile, [i for i, f in enumerate(files) if id(f) in self._deferred])] = True
        self._first = np.searchsorted(self.bfile, np.arange(len(files)))  # each file's first block
        # (lazy: the blocks' compression types are read as they are verified, see _mapped_plain)
        self._typed = not (lazy and self._unverified.any())

    def __len__(self) -> int:
        return len(self.base)

    def verify(self, blocks: np.ndarray | None = None) -> None:
        """Check the checksums of the blocks ``blocks`` (indices; None: all) not checked yet (raises
        :class:`SstError` naming the first damaged one)."""
        todo = self._unverified if blocks is None else np.zeros_like(self._unverified)
        if blocks is not None:
            todo[blocks] = self._unverified[blocks]
        which = np.flatnonzero(todo)
        if not len(which):
            return
        if not self._typed and self.joined[self.base[which] + self.blen[which]].any():
            raise Unsupported("a compressed data block among uncompressed ones")
        for i in np.unique(self.bfile[which]).tolist():
            f, off, size, data = self._deferred[id(self.files[i])]
            local = which[self.bfile[which] == i] - self._first[i]
            f.verify_blocks(off[local], size[local], data)
        self._unverified[which] = False

    def key_group_bounds(self, prefix_bytes: int) -> tuple[np.ndarray, np.ndarray] | None:
        """For each block, the key groups ``lo..hi`` its keys may be of (keys starting with their key
        group in ``prefix_bytes`` bytes, big-endian), or None where that is not known.

        From the files' index blocks where they allow it (an index key is at least the last key of its
        block and less than the next block's first: a block's keys lie between the previous index key's
        key group and its own), without reading the data blocks; else from each block's first key
        (:func:`.kernels.first_key_groups`: a block's keys lie between its first key's key group and
        the next block's)."""
        top = (1 << (8 * prefix_bytes)) - 1
        his = [_index_key_groups(f, prefix_bytes) for f in self.files]
        counts = np.bincount(self.bfile, minlength=len(self.files))
        if all(h is not None and len(h) == c for h, c in zip(his, counts)):
            hi = np.concatenate(his) if his else np.zeros(0, dtype=np.int64)
            lo = np.empty_like(hi)
            lo[1:] = hi[:-1]
            lo[self._first[counts > 0]] = 0  # (a file's first block: from the lowest)
            if not ((hi >= lo) | (self.bfile != np.roll(self.bfile, 1))).all():
                return None
            return lo, hi
        from . import kernels

        kg = np.empty(len(self.base), dtype=np.int64)
        if not kernels.first_key_groups(self.joined, self.base, self.blen, prefix_bytes, kg):
            return None
        same = self.bfile[1:] == self.bfile[:-1]
        if ((np.diff(kg) < 0) & same).any():
            return None
        hi = np.full(len(kg), top, dtype=np.int64)
        hi[:-1][same] = kg[1:][same]
        return kg, hi

    def blocks_of(self, bounds: tuple[np.ndarray, np.ndarray], lo: int, hi: int) -> np.ndarray:
        """The blocks that may hold keys of key groups ``lo..hi`` (``bounds``: :meth:`key_group_bounds`)."""
        return np.flatnonzero((bounds[0] <= hi) & (bounds[1] >= lo))

    def read(self, blocks: np.ndarray, types: tuple[int, ...] | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
        """:func:`read_column_family` of the blocks ``blocks`` (indices, ascending) alone."""
        b = np.asarray(blocks, dtype=np.int64)
        return _resolve(self.files, types, *_walk(self.files, self.joined, self.base[b], self.blen[b],
                                                   self.bfile[b], self.boff[b]))


def _index_key_groups(f: SstFile, prefix_bytes: int) -> np.ndarray | None:
    """The key group of each index key of ``f`` (the first ``prefix_bytes`` bytes), read all at once where
    every index entry is a restart point (see :func:`_handle_arrays`); None otherwise."""
    if f.key_groups is not None:
        return None
    got = _index_restarts(f)
    if got is None:
        return None
    b, starts, limit, shared, nonshared, p = got
    if shared.any() or (nonshared < prefix_bytes).any() or (p + prefix_bytes > limit).any():
        return None
    kg = np.zeros(len(starts), dtype=np.int64)
    for j in range(prefix_bytes):
        kg = kg * 256 + b[p + j]
    return kg


def _mapped_plain(files: list[SstFile], lazy: bool = False) -> tuple | None:
    """:func:`_blocks` of files none of whose blocks is compressed (the common case of values that do not
    compress), with their blocks' checksums left to the caller (``(f, offsets, sizes, bytes)`` per file,
    as :func:`_blocks` defers them): the files mapped side by side first (:class:`_FileMapping`, its
    pages populated in one call) and the blocks' compression types read from there, not through each
    file's own mapping (a page fault per 16 blocks: 0.06 s for 1 GB). ``(joined, starts, lengths,
    files, offsets), deferred``; None where this does not apply (a compressed block, a file without
    a path or read on demand, not Linux): then :func:`_blocks`. ``lazy``: the files' pages are not
    mapped at once, and only each file's first block's compression type is read here (the others'
    with their checksums, see :meth:`ColumnFamilyBlocks.verify`): 0.1 s less before the first block
    of 1 GB is read."""
    paths = [getattr(f, "path", None) for f in files]
    if not MAP_FILES or not sys.platform.startswith("linux") or not files or any(p is None for p in paths) \
            or any(f.ensure is not None for f in files):
        return None
    handles = []
    for f in files:
        try:
            off, size = _handle_arrays(f)
        except IndexError as exc:
            raise SstError(f"{f.name}: the index block is damaged (an entry runs past it)") from exc
        over = (off < 0) | (size < 0) | (off + size + 5 > len(f.data))
        if over.any():
            i = int(np.flatnonzero(over)[0])
            raise SstError(f"{f.name}: block at {int(off[i])} (+{int(size[i])}) runs past the end of the file")
        handles.append((off, size))
    try:
        m = _FileMapping([str(p) for p in paths], 0, populate=not lazy)
    except OSError:
        return None
    out, om = m.views()
    om.release()
    deferred = []
    for f, (off, size), st in zip(files, handles, m.starts):
        if len(off) and (out[st + off[:1] + size[:1]] if lazy else out[st + off + size]).any():
            return None  # a compressed block (the mapping goes with ``out``)
        deferred.append((f, off, size, out[st : st + len(f.data)]))
    starts = np.concatenate([st + off for (off, _), st in zip(handles, m.starts)])
    blen = np.concatenate([size for _, size in handles])
    block_file = np.repeat(np.arange(len(files)), [len(h[0]) for h in handles]).astype(np.int64)
    block_offset = np.concatenate([off for off, _ in handles])
    return (out, starts, blen, block_file, block_offset), deferred


def _resolve(files: list[SstFile], types: tuple[int, ...] | None, joined, keys, width, ulen, vpos, vlen, seq, typ,
             rel, runs) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """:func:`read_column_family` of walked entries (:func:`_walk`)."""
    n = len(ulen)
    strict = types is not None
    if strict and n and not np.isin(typ, np.array(types, dtype=np.uint8)).all():
        bad = int(typ[~np.isin(typ, np.array(types, dtype=np.uint8))][0])
        raise Unsupported(f"an entry of type {bad} (expected one of {list(types)})")
    if n and (rel == DISORDER).any():
        i = int(np.flatnonzero(rel == DISORDER)[0])
        f = int(np.searchsorted(runs, i, side="right")) - 1
        raise Unsupported(f"{files[f].name}: entry {i - int(runs[f])} is out of RocksDB's bytewise key order")
    merged = 0
    if int((np.diff(runs) > 0).sum()) <= 1 and not (rel == OLDER).any() \
            and not (rel == SAME_SEQ).any() and (typ == TYPE_VALUE).all():
        # one file of values (or one with entries), one version per key: in key order and all visible;
        # the rows are the output
        ks = _MARGIN + np.arange(n, dtype=np.int64) * width
        return joined, keys, ks, ks + ulen, vpos, vpos + vlen, merged
    ok = True
    if len(files) > 1:
        args = (keys, _MARGIN, width, ulen, seq, runs)
        order, ok = _implementation("merge_runs", n * width, args).merge_runs(*args)
    else:
        order = np.arange(n, dtype=np.int64)
    kbuf = np.empty(_MARGIN + n * width, dtype=np.uint8)  # the visible keys' rows, in output order
    kbuf[:_MARGIN] = 0  # (columnar may read the bytes before a row)
    if ok:
        args = (keys, _MARGIN, width, ulen, seq, typ, vpos, vlen, order, kbuf, _MARGIN)
        keep, vs, ve, first, last, tie, ok = _implementation("visible_entries", n * width, args).visible_entries(*args)
    if not ok:
        raise RuntimeError("explorer.format.sst.columns: the merge kernels were given arrays that do not fit together")
    if strict and tie:  # which of the two is newer is not known here
        raise Unsupported("two versions of a key with the same sequence number")
    extra: list[bytes] = []  # merged list values, stored after the blocks
    off = len(joined)
    for k in np.flatnonzero(typ[keep] == TYPE_MERGE).tolist():  # combined exactly as instance.resolve does
        idx = order[first[k] : last[k]].tolist()
        value = combine([(int(typ[e]), joined[vpos[e] : vpos[e] + vlen[e]].tobytes()) for e in idx])
        vs[k], ve[k] = off, off + len(value)
        extra.append(value)
        off += len(value)
    merged = len(extra)
    kbuf = kbuf[: _MARGIN + len(keep) * width]
    values = joined if not extra else np.frombuffer(b"".join([joined, *extra]), dtype=np.uint8)
    ks = _MARGIN + np.arange(len(keep), dtype=np.int64) * width
    return values, kbuf, ks, ks + ulen[keep], vs, ve, merged


def column_families(sst_files: list[tuple[str, "bytes | SstFile"]]) -> tuple[dict[str, list[SstFile]], dict[str, int]]:
    """The SST files of one RocksDB instance by column family (footers and properties only); stats. A file
    may be given as its bytes or as an :class:`SstFile` already opened (a sparse one, say)."""
    by_cf: dict[str, list[SstFile]] = defaultdict(list)
    stats = {"sst_files": 0, "merged_keys": 0, "range_deletions": 0}
    for name, data in sst_files:
        f = data if isinstance(data, SstFile) else SstFile(data, name)
        stats["sst_files"] += 1
        stats["range_deletions"] += int(f.has_range_deletions)
        by_cf[f.column_family or "default"].append(f)
    return dict(by_cf), stats


__all__ = ["ColumnFamilyBlocks", "Recycled", "Unsupported", "column_families", "read_column_family"]
