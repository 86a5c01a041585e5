"""RocksDB SST files written without RocksDB: sorted raw entries as one block-based table, for ingestion.

A canonical restore into the RocksDB backend bulk-loads each batch of raw
entries (keys strictly ascending) as an external SST file
(``IngestExternalFile``). rocksdict's ``SstFileWriter`` takes one Python call
per entry, holding the GIL (2.4 s for 1 M entries of 1 KB); here numba kernels
lay out the data blocks and the index of a whole batch from its Arrow buffers
at once, outside the GIL, and the file is written with one call.

The file is what RocksDB's ``SstFileWriter`` writes for the same entries, in
the layout :mod:`.file` documents and reads: format version 2 (the oldest
RocksDB still writes; every release reads it), uncompressed data blocks of
about :data:`BLOCK_SIZE` bytes with a restart point every 16 entries, internal
keys ``user key + (0 << 8 | 1)`` (sequence 0, a value: RocksDB assigns the
ingested file's sequence number itself), an index block with one entry per
data block (its last internal key and its handle), a properties block with
the properties ingestion reads (``rocksdb.external_sst_file.version`` 2, the
entry count, sizes) and the metaindex naming it; every block followed by its
compression type (0) and XXH3 checksum (checksum type 4), checked by RocksDB
whenever it reads the block.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numba
import numpy as np
import pyarrow as pa

from ... import numba_cache  # noqa: F401 - a damaged numba cache file is a miss, not an error
from ..checksums import XXH3_LAST_BYTE_PRIME, rocksdb_block_checksums, xxh3_c_function
from ..parquet_pages import ByteSpans
from ..types import encode_varint
from .columns import pooled_empty
from .file import BLOCK_MAGIC
from .kernels import copy_bytes

__all__ = ["BLOCK_SIZE", "write_sst"]

#: target size of a data block (RocksDB's default ``block_size``)
BLOCK_SIZE = 4096
RESTART_INTERVAL = 16
FORMAT_VERSION = 2
CHECKSUM_XXH3 = 4

_jit = numba.njit(cache=True, nogil=True)

#: block checksums computed by :func:`_block_trailers` (xxhash's C function called from a kernel, outside
#: the GIL); off, or without xxhash's exported ``XXH3_64bits``: :func:`rocksdb_block_checksums` (a Python call per block)
BLOCK_SUMS_IN_KERNEL = True


@_jit
def _put_varint(out, p, v):
    while v >= 0x80:
        out[p] = (v & 0x7F) | 0x80
        v >>= 7
        p += 1
    out[p] = v
    return p + 1


@_jit
def _put_u32(out, p, v):
    out[p] = v & 0xFF
    out[p + 1] = (v >> 8) & 0xFF
    out[p + 2] = (v >> 16) & 0xFF
    out[p + 3] = (v >> 24) & 0xFF
    return p + 4


@_jit
def _block_trailers(xxh3, out, offsets, sizes):
    """Each block's checksum, RocksDB's XXH3 one (the low 32 bits of the block's 64-bit XXH3, seed 0,
    mixed with the compression type byte after it: :func:`explorer.format.checksums.rocksdb_block_checksum`),
    written little-endian after that byte in ``out``; ``xxh3`` is xxhash's C ``XXH3_64bits`` (ctypes,
    :func:`explorer.format.checksums.xxh3_c_function`: a pointer passed in, not compiled into the cached code)."""
    base = out.ctypes.data
    prime = np.uint64(XXH3_LAST_BYTE_PRIME)
    mask = np.uint64(0xFFFFFFFF)
    for i in range(len(offsets)):
        o = offsets[i]
        end = o + sizes[i]
        d = np.uint64(xxh3(base + o, sizes[i]))
        v = (d ^ (np.uint64(out[end]) * prime)) & mask
        _put_u32(out, end + 1, np.int64(v))


@_jit
def _data_blocks(kdata, koffs, hdata, hoffs, vdata, vstarts, vends, out, block_size, restart_interval, boff, bsize,
                 blast):
    """Lay out the data blocks of entries ``i`` (key ``kdata[koffs[i]:koffs[i+1]]``, value ``hdata[hoffs[i]:
    hoffs[i+1]]`` followed by ``vdata[vstarts[i]:vends[i]]``: a head, e.g. a length, and a body) in
    ``out``, each followed by 5 trailer bytes (compression type 0, checksum left for the caller).
    Returns ``(bytes used, blocks)``; block ``j`` starts at ``boff[j]``, holds ``bsize[j]`` bytes before
    its trailer, and ends with entry ``blast[j]``."""
    n = len(koffs) - 1
    restarts = np.empty(n + 1, dtype=np.int64)
    pos = 0
    nb = 0
    i = 0
    while i < n:
        bstart = pos
        nr = 0
        cnt = 0
        while True:
            ks = koffs[i]
            kl = koffs[i + 1] - ks
            hs = hoffs[i]
            hl = hoffs[i + 1] - hs
            vs = vstarts[i]
            vl = vends[i] - vs
            shared = 0
            if cnt % restart_interval == 0:
                restarts[nr] = pos - bstart
                nr += 1
            else:
                ps = koffs[i - 1]
                m = min(kl, koffs[i] - ps)
                while shared < m and kdata[ps + shared] == kdata[ks + shared]:
                    shared += 1
            pos = _put_varint(out, pos, shared)
            pos = _put_varint(out, pos, kl + 8 - shared)
            pos = _put_varint(out, pos, hl + vl)
            copy_bytes(out, pos, kdata, ks + shared, kl - shared)
            pos += kl - shared
            out[pos] = 1  # (sequence 0 << 8) | type 1 (a value), little-endian
            for b in range(1, 8):
                out[pos + b] = 0
            pos += 8
            copy_bytes(out, pos, hdata, hs, hl)
            pos += hl
            copy_bytes(out, pos, vdata, vs, vl)
            pos += vl
            cnt += 1
            i += 1
            if i >= n or pos - bstart + 4 * (nr + 1) >= block_size:
                break
        for r in range(nr):
            pos = _put_u32(out, pos, restarts[r])
        pos = _put_u32(out, pos, nr)
        boff[nb] = bstart
        bsize[nb] = pos - bstart
        blast[nb] = i - 1
        nb += 1
        out[pos] = 0  # compression type: none
        pos += 5
    return pos, nb


@_jit
def _index_block(kdata, koffs, boff, bsize, blast, nb, out, pos):
    """The index block at ``out[pos:]``: per data block its last internal key and its handle, a restart
    point at every entry. Returns the position after it (its trailer not included)."""
    start = pos
    rest = np.empty(nb, dtype=np.int64)
    handle = np.empty(20, dtype=np.uint8)
    for j in range(nb):
        rest[j] = pos - start
        e = blast[j]
        ks = koffs[e]
        kl = koffs[e + 1] - ks
        hl = _put_varint(handle, 0, boff[j])
        hl = _put_varint(handle, hl, bsize[j])
        pos = _put_varint(out, pos, 0)
        pos = _put_varint(out, pos, kl + 8)
        pos = _put_varint(out, pos, hl)
        copy_bytes(out, pos, kdata, ks, kl)
        pos += kl
        out[pos] = 1
        for b in range(1, 8):
            out[pos + b] = 0
        pos += 8
        out[pos : pos + hl] = handle[:hl]
        pos += hl
    for j in range(nb):
        pos = _put_u32(out, pos, rest[j])
    pos = _put_u32(out, pos, nb)
    return pos


def _varint(v: int) -> bytes:
    out = bytearray()
    encode_varint(v, out)
    return bytes(out)


def _small_block(entries: list[tuple[bytes, bytes]]) -> bytes:
    """A block of sorted ``(key, value)`` entries, a restart point at each (properties, metaindex)."""
    body = bytearray()
    restarts = []
    for k, v in entries:
        restarts.append(len(body))
        body += _varint(0) + _varint(len(k)) + _varint(len(v)) + k + v
    for r in restarts:
        body += r.to_bytes(4, "little")
    body += len(restarts).to_bytes(4, "little")
    return bytes(body)


def _spans(values: "pa.Array | ByteSpans") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The data bytes, starts and ends of binary values: an Arrow array's (its offsets, as views) or
    :class:`~explorer.format.parquet_pages.ByteSpans` (values in place in a mapped file)."""
    if isinstance(values, ByteSpans):
        if len(values) and (int(values.starts.min()) < 0 or int(values.ends.max()) > len(values.data)
                            or bool(np.any(values.ends < values.starts))):
            raise ValueError("byte spans outside their buffer")
        return values.data, values.starts, values.ends
    data, offs = _buffers(values)
    return data, offs[:-1], offs[1:]


def _buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The data bytes and ``len + 1`` int64 offsets of a binary array (its slice offset applied)."""
    if arr.null_count:
        raise ValueError("an SST file cannot hold null keys or values")
    if pa.types.is_large_binary(arr.type):
        off_t = np.int64
    elif pa.types.is_binary(arr.type) or pa.types.is_string(arr.type):
        off_t = np.int32
    else:
        raise TypeError(f"expected a binary array, found {arr.type}")
    bufs = arr.buffers()
    offs = np.frombuffer(bufs[1], dtype=off_t, count=len(arr) + 1, offset=arr.offset * np.dtype(off_t).itemsize)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size else np.zeros(1, np.uint8)
    return data, offs.astype(np.int64)


def write_sst(path: Path, keys: pa.Array, values: "pa.Array | tuple[pa.Array, pa.Array | ByteSpans]", scratch: Any = None
              ) -> int:
    """Write raw ``keys`` (strictly ascending, bytewise) and ``values`` (binary arrays of one length) to a
    new SST file at ``path`` for ``IngestExternalFile``; returns its size. The caller guarantees the order
    (RocksDB refuses an ingested file whose keys are not ascending). ``values`` may also be two binary
    arrays ``(heads, bodies)``: value ``i`` is ``heads[i] + bodies[i]`` (joined here, as the blocks are
    laid out, instead of in a joined array first); the bodies may be
    :class:`~explorer.format.parquet_pages.ByteSpans`, values in place in a mapped file.

    ``scratch``, an object with attributes (a ``threading.local()`` for calls from several threads),
    keeps the file's buffer for the next call: fresh memory is slow to touch on the benchmark
    machine (0.5-2 s per GB), so a restore writing many files reuses one buffer per thread."""
    n = len(keys)
    heads, bodies = values if isinstance(values, tuple) else (None, values)
    if n == 0 or len(bodies) != n or (heads is not None and len(heads) != n):
        raise ValueError(f"an SST file needs one value per key and at least one entry ({n} keys, {len(bodies)} values)")
    kdata, koffs = _buffers(keys)
    vdata, vstarts, vends = _spans(bodies)
    if heads is None:
        hdata, hoffs = np.zeros(1, dtype=np.uint8), np.zeros(n + 1, dtype=np.int64)
    else:
        hdata, hoffs = _buffers(heads)
    raw_k = int(koffs[-1] - koffs[0])
    raw_v = int((vends - vstarts).sum()) + int(hoffs[-1] - hoffs[0])
    # per entry at most 15 bytes of varints, 8 of trailer, a restart (4) and a block's restart count,
    # trailer and index entry (4 + 5 + 35 with its key, when each entry is a block of its own)
    bound = raw_k + raw_v + n * (15 + 8 + 4 + 4 + 5 + 35) + 2 * raw_k + 4096

    out = getattr(scratch, "sst_buffer", None)
    if out is None or len(out) < bound + _ALIGN:
        out = pooled_empty(bound + _ALIGN)
        if scratch is not None:
            scratch.sst_buffer = out
    out = out[(-out.ctypes.data) % _ALIGN :]  # block-aligned, for a direct write
    boff = np.empty(n, dtype=np.int64)
    bsize = np.empty(n, dtype=np.int64)
    blast = np.empty(n, dtype=np.int64)
    pos, nb = _data_blocks(kdata, koffs, hdata, hoffs, vdata, vstarts, vends, out, BLOCK_SIZE, RESTART_INTERVAL, boff,
                           bsize, blast)
    boff, bsize, blast = boff[:nb], bsize[:nb], blast[:nb]
    data_size = pos
    ix_off = pos
    pos = _index_block(kdata, koffs, boff, bsize, blast, nb, out, pos)
    ix_size = pos - ix_off
    out[pos] = 0
    pos += 5
    offsets = np.append(boff, ix_off)
    sizes = np.append(bsize, ix_size)
    xxh3 = xxh3_c_function() if BLOCK_SUMS_IN_KERNEL else None
    if xxh3 is not None:  # one call outside the GIL, not a Python call (and a GIL hand-over) per block
        _block_trailers(xxh3, out, offsets, sizes)
    else:
        sums = rocksdb_block_checksums(CHECKSUM_XXH3, out, offsets, sizes)
        trailer = offsets + sizes + 1
        for b in range(4):
            out[trailer + b] = (sums >> np.uint32(8 * b)).astype(np.uint8)

    def prop_int(v: int) -> bytes:
        return _varint(v)

    props = {
        b"rocksdb.block.based.table.index.type": (0).to_bytes(4, "little"),
        b"rocksdb.block.based.table.prefix.filtering": b"0",
        b"rocksdb.block.based.table.whole.key.filtering": b"1",
        b"rocksdb.column.family.id": prop_int(0x7FFFFFFF),  # unknown: ingestion assigns the family
        b"rocksdb.comparator": b"leveldb.BytewiseComparator",
        b"rocksdb.compression": b"NoCompression",
        b"rocksdb.creating.db.identity": b"State Explorer SST writer",
        b"rocksdb.creation.time": prop_int(0),
        b"rocksdb.data.size": prop_int(data_size),
        b"rocksdb.deleted.keys": prop_int(0),
        b"rocksdb.external_sst_file.global_seqno": (0).to_bytes(8, "little"),
        b"rocksdb.external_sst_file.version": (2).to_bytes(4, "little"),
        b"rocksdb.filter.size": prop_int(0),
        b"rocksdb.fixed.key.length": prop_int(0),
        b"rocksdb.format.version": prop_int(FORMAT_VERSION),
        b"rocksdb.index.key.is.user.key": prop_int(0),
        b"rocksdb.index.size": prop_int(ix_size + 5),
        b"rocksdb.index.value.is.delta.encoded": prop_int(0),
        b"rocksdb.key.largest.seqno": prop_int(0),
        b"rocksdb.merge.operands": prop_int(0),
        b"rocksdb.merge.operator": b"nullptr",
        b"rocksdb.num.data.blocks": prop_int(nb),
        b"rocksdb.num.entries": prop_int(n),
        b"rocksdb.num.filter_entries": prop_int(0),
        b"rocksdb.num.range-deletions": prop_int(0),
        b"rocksdb.oldest.key.time": prop_int(0),
        b"rocksdb.prefix.extractor.name": b"nullptr",
        b"rocksdb.property.collectors": b"[]",
        b"rocksdb.raw.key.size": prop_int(raw_k + 8 * n),
        b"rocksdb.raw.value.size": prop_int(raw_v),
        b"rocksdb.tail.start.offset": prop_int(data_size),
    }
    tail = bytearray()
    base = pos

    def add_block(body: bytes) -> tuple[int, int]:
        off = base + len(tail)
        tail.extend(body)
        tail.append(0)
        block = np.frombuffer(bytes(body) + b"\0", dtype=np.uint8)
        s = int(rocksdb_block_checksums(CHECKSUM_XXH3, block, np.array([0]), np.array([len(body)]))[0])
        tail.extend(s.to_bytes(4, "little"))
        return off, len(body)

    p_off, p_size = add_block(_small_block(sorted(props.items())))
    m_off, m_size = add_block(_small_block([(b"rocksdb.properties", _varint(p_off) + _varint(p_size))]))
    handles = _varint(m_off) + _varint(m_size) + _varint(ix_off) + _varint(ix_size)
    footer = bytes([CHECKSUM_XXH3]) + handles + b"\0" * (40 - len(handles)) + FORMAT_VERSION.to_bytes(4, "little") \
        + BLOCK_MAGIC.to_bytes(8, "little")
    _write(Path(path), memoryview(out)[:pos], bytes(tail) + footer)
    return pos + len(tail) + len(footer)


#: write the bulk of an SST file with ``O_DIRECT`` (Linux; else, or where the file system refuses it,
#: through the page cache)
DIRECT_WRITES = True
_ALIGN = 4096


def _write(path: Path, body: memoryview, rest: bytes) -> None:
    """``body`` (block-aligned in memory) then ``rest`` to a new file at ``path``.

    The bulk goes straight to the disk (``O_DIRECT``): a restore writes as many bytes of SST
    files as the state holds, and through the page cache each new page is allocated, copied
    and left dirty, so a restore right after other large writes was throttled to the
    writeback (1 GB took 2.8 s buffered against 0.7 s direct on the benchmark machine). The
    file is then read back through the page cache as usual (RocksDB opens it on ingestion).
    """
    direct = getattr(os, "O_DIRECT", 0) if DIRECT_WRITES else 0
    n = len(body) - len(body) % _ALIGN if direct else 0
    if n:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | direct, 0o644)
        except OSError:
            n = 0  # a file system without direct I/O (tmpfs): written below through the page cache
        else:
            try:
                done = 0
                while done < n:
                    done += os.write(fd, body[done:n])
            except OSError:
                n = 0  # refused after all (alignment, file system): the file is written again below
            finally:
                os.close(fd)
    with open(path, "r+b" if n else "wb") as f:
        f.seek(n)
        f.write(body[n:])
        f.write(rest)
        f.truncate()


def warm_kernels() -> None:
    """Load the numba kernels of full snapshots and restores (this module's and
    :func:`.kernels.warm`'s) from numba's cache, so that the first checkpoint or restore does not pay
    for it; meant for a background thread when a RocksDB backend opens (the kernels release the GIL,
    loading them mostly does not)."""
    from .. import parquet_pages
    from . import kernels

    kernels.warm()
    parquet_pages.warm()
    i64 = np.zeros(0, dtype=np.int64)
    u8 = np.zeros(16, dtype=np.uint8)
    z = np.zeros(1, dtype=np.int64)
    # values from Arrow's buffers (writable arrays) or in place in a mapped Parquet file (read-only)
    for vdata in (u8, np.frombuffer(bytes(16), dtype=np.uint8)):
        _data_blocks(u8, z, u8, z, vdata, z[:0], z[:0], u8.copy(), np.int64(BLOCK_SIZE), np.int64(RESTART_INTERVAL),
                     i64, i64.copy(), i64.copy())
    _index_block(u8, np.zeros(1, dtype=np.int64), i64, i64.copy(), i64.copy(), np.int64(0), u8.copy(), np.int64(0))
    xxh3 = xxh3_c_function() if BLOCK_SUMS_IN_KERNEL else None
    if xxh3 is not None:
        _block_trailers(xxh3, u8.copy(), i64, i64.copy())
