"""RocksDB SST files (block-based table format), read without RocksDB.

File layout::

    [data block 1] ... [data block N] [meta blocks: filter, properties, ...]
    [metaindex block] [index block] [footer]

Every block is followed by a 5-byte trailer: compression type (0 none, 1 Snappy,
4/5 LZ4, 7 ZSTD) and a 4-byte checksum.

*Footer* (the last 53 bytes for format versions 1 to 5): checksum type (1 byte),
the metaindex and index *block handles* (each ``varint64 offset, varint64 size``,
zero-padded to 40 bytes), ``uint32`` format version, ``uint64`` magic
``0x88E241B785F4CFF7`` (little-endian).

*Block*: a run of entries, then ``uint32`` restart offsets and ``uint32`` count
(top bit: data-block hash index present). An entry is ``varint32 shared``,
``varint32 non_shared``, ``varint32 value_length`` (omitted in index blocks
whose values are delta-encoded, format version 4+), the key suffix, the value.
A key shares its first ``shared`` bytes with the previous key. Index entries'
values are block handles (at restart points) or a signed size delta.

*Internal keys* (data blocks) are the user key plus an 8-byte little-endian
trailer ``(sequence << 8) | type``: 0 deletion, 1 value, 2 merge operand,
7 single deletion. The metaindex names the properties block
(``rocksdb.properties``), whose entries include the column family name (Flink
names each column family after its state) and whether index values are
delta-encoded.

*Reading only some key groups*: an index entry's key is at least the last key of its data block
and less than the first key of the next, so the index says which key groups each data block
may hold (Flink's keys start with their key group, one byte, or two when the maximum parallelism
is over 128). :meth:`SstFile.only_key_groups` keeps the data blocks that may hold a wanted key
group (a file none of whose blocks may: no block at all); the others are never read. ``ensure``
lets the file's bytes be a sparse buffer filled on demand (only the footer, the index and the
wanted blocks of a file on an object store are fetched).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import cramjam
import numpy as np

from ...errors import SnapshotCorruptError
from .. import snappy
from ..checksums import (CHECKSUM_NAMES, available, rocksdb_block_checksum, rocksdb_block_checksums,
                         rocksdb_context_modifier)
from ..types import decode_varint as _varint  # RocksDB's varint32/64: the same 7-bit little-endian groups

BLOCK_MAGIC = 0x88E241B785F4CFF7
TYPE_DELETION, TYPE_VALUE, TYPE_MERGE, TYPE_SINGLE_DELETION = 0, 1, 2, 7
TYPE_RANGE_DELETION = 0xF


#: the most a compressed block (a RocksDB data block, a Spark LZ4 block) is taken to expand when decompressed
#: (LZ4's limit is ~255x; a larger
#: stated size is a damaged header)
MAX_EXPANSION = 256


class SstError(SnapshotCorruptError, ValueError):
    """An SST file is not what we expect (the message says what was found)."""


@dataclass
class SstEntries:
    column_family: str | None
    keys: list[bytes]  # user keys
    seqs: list[int]
    types: list[int]
    values: list[bytes]
    properties: dict[str, bytes]


class SstFile:
    def __init__(self, data: bytes, name: str, ensure: "Callable[[list[tuple[int, int]]], None] | None" = None
                 ) -> None:
        self.data = data
        self.name = name
        #: fills byte ranges ``(offset, length)`` of a sparse ``data`` before they are read (None: all there)
        self.ensure = ensure
        #: (key-group prefix bytes, the wanted key groups sorted), see :meth:`only_key_groups`
        self.key_groups: tuple[int, np.ndarray] | None = None
        #: data blocks of the index, and of those the ones kept by :meth:`only_key_groups`
        self.blocks_indexed = self.blocks_kept = 0
        if len(data) < 53:
            raise SstError(f"{name}: found {len(data)} bytes, expected an SST file of at least 53")
        if ensure is not None:
            ensure([(len(data) - 53, 53)])
        magic = int.from_bytes(data[-8:], "little")
        if magic != BLOCK_MAGIC:
            raise SstError(f"{name}: found table magic {magic:#x}, expected {BLOCK_MAGIC:#x} (block-based table)")
        self.format_version = int.from_bytes(data[-12:-8], "little")
        if not 1 <= self.format_version <= 6:
            raise SstError(f"{name}: found SST format version {self.format_version}, expected 1 to 6")
        footer = len(data) - 53
        #: the footer's checksum type (1 CRC32C, 2 xxHash, 3 XXH64, 4 XXH3), checked on every block read
        self.checksum_type = data[footer]
        if self.checksum_type not in CHECKSUM_NAMES:
            raise SstError(f"{name}: found checksum type {self.checksum_type} in the footer, expected 0 to 4")
        self._base_context = int.from_bytes(data[footer + 9 : footer + 13], "little") if self.format_version >= 6 else 0
        if self.format_version >= 6:
            # checksum type, the extended magic 3E 00 7A 00, footer and base context checksums, the
            # metaindex block's size (it ends right before the footer); the index handle is in the metaindex
            if bytes(data[footer + 1 : footer + 5]) != b"\x3e\x00\x7a\x00":
                raise SstError(f"{name}: found footer bytes {bytes(data[footer + 1 : footer + 5]).hex()} of a "
                               "format version 6 table, expected the extended magic 3e007a00")
            mi_size = int.from_bytes(data[footer + 13 : footer + 17], "little")
            self.metaindex = (footer - 5 - mi_size, mi_size)
            if self.metaindex[0] < 0:
                raise SstError(f"{name}: found a metaindex block of {mi_size} bytes, more than the file holds")
            index = [v for k, v in self.iter_block(self.block(self.metaindex)) if k == b"rocksdb.index"]
            if not index:
                raise SstError(f"{name}: found no 'rocksdb.index' entry in the metaindex of a format version 6 table")
            ix_off, q = _varint(index[0], 0)
            ix_size, _ = _varint(index[0], q)
        else:
            p = footer + 1
            mi_off, p = _varint(data, p)
            mi_size, p = _varint(data, p)
            ix_off, p = _varint(data, p)
            ix_size, p = _varint(data, p)
            self.metaindex = (mi_off, mi_size)
        self.index = (ix_off, ix_size)
        self.properties = self._read_properties()

    def verify_block(self, off: int, size: int) -> None:
        """Check the checksum in the trailer of the block at ``off`` (``size`` bytes before its trailer)."""
        if off < 0 or size < 0 or off + size + 5 > len(self.data):
            raise SstError(f"{self.name}: block at {off} (+{size}) runs past the end of the file "
                           f"({len(self.data)} bytes)")
        ct = self.checksum_type
        if ct == 0 or not available(ct):
            return
        stored = int.from_bytes(self.data[off + size + 1 : off + size + 5], "little")
        computed = rocksdb_block_checksum(ct, memoryview(self.data)[off : off + size + 1])
        if computed == stored:
            return
        # format version 6 mixes the file's context and the offset in (a plain match is accepted too)
        if self._base_context and (computed + rocksdb_context_modifier(self._base_context, off)) & 0xFFFFFFFF == stored:
            return
        raise SstError(f"{self.name}: the block at offset {off} ({size} bytes) has {CHECKSUM_NAMES[ct]} checksum "
                       f"{computed:#010x}, its trailer records {stored:#010x} (the file is damaged)")

    def verify_blocks(self, offsets: np.ndarray, sizes: np.ndarray, data: Any = None) -> None:
        """:meth:`verify_block` of every block ``(offsets[i], sizes[i])`` (in the file's bounds, checked by the
        caller), the checksums computed in one pass where the type allows; the first mismatch raises
        the same error as :meth:`verify_block`. ``data``: the file's bytes held elsewhere (another mapping
        of the same file, already populated), read instead of :attr:`data`."""
        ct = self.checksum_type
        if ct == 0 or not available(ct) or not len(offsets):
            return
        data = self.data if data is None else data
        computed = rocksdb_block_checksums(ct, data, offsets, sizes)
        if computed is None:
            for o, z in zip(offsets.tolist(), sizes.tolist()):
                self.verify_block(o, z)
            return
        fb = np.frombuffer(data, dtype=np.uint8)
        t = offsets + sizes + 1
        stored = (fb[t].astype(np.uint32) | (fb[t + 1].astype(np.uint32) << 8) | (fb[t + 2].astype(np.uint32) << 16)
                  | (fb[t + 3].astype(np.uint32) << 24))
        bad = computed != stored
        if bad.any() and self._base_context:
            o64 = offsets.astype(np.uint64)
            mod = (np.uint64(self._base_context) ^ ((o64 & 0xFFFFFFFF) + (o64 >> np.uint64(32)))) & 0xFFFFFFFF
            bad &= ((computed.astype(np.uint64) + mod) & 0xFFFFFFFF).astype(np.uint32) != stored
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            self.verify_block(int(offsets[i]), int(sizes[i]))  # raises the error naming the block

    def block(self, handle: tuple[int, int]) -> bytes:
        off, size = handle
        if off < 0 or size < 0 or off + size + 5 > len(self.data):
            raise SstError(f"{self.name}: block at {off} (+{size}) runs past the end of the file")
        if self.ensure is not None:
            self.ensure([(off, size + 5)])
        self.verify_block(off, size)
        raw = self.data[off : off + size]
        ctype = self.data[off + size]
        if ctype == 0:
            return raw
        if ctype == 1:
            return snappy.decompress_raw(raw, f"{self.name}: the block at {off}", SstError)
        if ctype in (4, 5, 7):
            n, q = _varint(raw, 0)  # RocksDB prefixes LZ4 and ZSTD blocks with the decompressed size
            # (a damaged size must not reach the decompressor: it allocates it, and aborts when it cannot)
            if n > MAX_EXPANSION * size + 64:
                raise SstError(f"{self.name}: the block at {off} ({size} bytes, compression type {ctype}) claims "
                               f"{n} bytes decompressed, more than {MAX_EXPANSION} times its size")
            out = bytearray(n)  # into a buffer of the stated size: the output cannot grow past it
            try:
                into = cramjam.zstd.decompress_into if ctype == 7 else cramjam.lz4.decompress_block_into
                got = into(raw[q:], out)
            except cramjam.DecompressionError as exc:
                raise SstError(f"{self.name}: the block at {off} ({size} bytes, compression type {ctype}) does "
                               f"not decompress to its stated {n} bytes ({exc})") from exc
            if got != n:
                raise SstError(f"{self.name}: the block at {off} decompressed to {got} bytes, its header "
                               f"says {n}")
            return bytes(out)
        raise SstError(f"{self.name}: block at {off} uses compression type {ctype}; expected 0, 1, 4, 5 or 7")

    @staticmethod
    def iter_block(block: bytes, values_have_length: bool = True):
        """Yield (key, value) of a block (keys rebuilt from shared prefixes)."""
        n = len(block)
        packed = int.from_bytes(block[n - 4 :], "little")
        num_restarts = packed & 0x7FFFFFFF
        limit = n - 4 - 4 * num_restarts
        if packed >> 31:  # data block hash index sits before the restarts: num buckets (uint16) etc.
            raise SstError("data block hash index is not supported")
        p = 0
        key = b""
        while p < limit:
            shared, p = _varint(block, p)
            non_shared, p = _varint(block, p)
            if values_have_length:
                vlen, p = _varint(block, p)
                key = key[:shared] + block[p : p + non_shared]
                p += non_shared
                yield key, block[p : p + vlen]
                p += vlen
            else:
                key = key[:shared] + block[p : p + non_shared]
                p += non_shared
                yield key, p  # caller decodes the handle at p

    def _read_properties(self) -> dict[str, bytes]:
        props_handle = None
        self.has_range_deletions = False
        for k, v in self.iter_block(self.block(self.metaindex)):
            if k == b"rocksdb.range_del":
                self.has_range_deletions = True
            if k == b"rocksdb.properties":
                off, q = _varint(v, 0)
                size, _ = _varint(v, q)
                props_handle = (off, size)
        if props_handle is None:
            return {}
        return {k.decode("utf-8", "replace"): v for k, v in self.iter_block(self.block(props_handle))}

    def prop_int(self, name: str, default: int = 0) -> int:
        v = self.properties.get(name)
        return _varint(v, 0)[0] if v else default

    @property
    def column_family(self) -> str | None:
        v = self.properties.get("rocksdb.column.family.name")
        return v.decode("utf-8", "replace") if v is not None else None

    def data_handles(self) -> list[tuple[int, int]]:
        """The data blocks' handles, from the index block or, for a partitioned (two-level) index
        (index type 2, which ForSt writes), from each index partition the top-level index names."""
        index_type = self.prop_int("rocksdb.block.based.table.index.type", 0)
        delta = self.prop_int("rocksdb.index.value.is.delta.encoded", 0) == 1
        block = self.block(self.index)
        if index_type != 2:
            keys: list[bytes] = []
            handles = self._index_handles(block, delta, keys)
            return self._kept(handles, keys, count=True)
        # the top-level index holds one handle per partition (encoded like the partitions' values);
        # each partition is an index block of its own (a partition none of whose blocks is wanted: not read)
        handles = []
        tops: list[bytes] = []
        parts = self._index_handles(block, delta, tops)
        keep = self._keep_mask(tops) if self.key_groups is not None else None
        for i, (off, size) in enumerate(parts):
            if size <= 0 or off + size + 5 > len(self.data):
                raise SstError(f"{self.name}: found index partition at {off} (+{size}), expected a block "
                               f"inside the file's {len(self.data)} bytes (partitioned index)")
            if keep is not None and not keep[i]:
                continue
            keys = []
            got = self._index_handles(self.block((off, size)), delta, keys)
            handles.extend(self._kept(got, keys, count=False, before=tops[i - 1] if i else None))
        self.blocks_kept = len(handles)
        return handles

    # -- reading only some key groups -------------------------------------------------------
    def only_key_groups(self, prefix: int, key_groups) -> None:
        """From now on :meth:`data_handles` (and the column-wise reader) give only the data blocks that
        may hold one of ``key_groups`` (keys starting with their key group in ``prefix`` bytes, big-endian)."""
        self.key_groups = (prefix, np.unique(np.fromiter(key_groups, dtype=np.int64)))

    def _index_user_key_bytes(self) -> int:
        """Bytes after the user key in an index entry's key: 0 when the index holds user keys, else 8."""
        return 0 if self.prop_int("rocksdb.index.key.is.user.key", 0) == 1 else 8

    def key_group_bounds(self, keys: list[bytes], before: bytes | None = None) -> np.ndarray:
        """For index keys ``keys`` (in order), the key-group range ``[lo, hi]`` each block may hold (rows);
        ``before``: the index key before the first (a partition's lower bound)."""
        prefix = self.key_groups[0] if self.key_groups is not None else 1
        trail = self._index_user_key_bytes()

        def kg(k: bytes) -> int:
            user = k[: max(0, len(k) - trail)][:prefix]
            return int.from_bytes(user.ljust(prefix, b"\0"), "big")  # (a short separator: zeros after it)

        hi = np.fromiter((kg(k) for k in keys), dtype=np.int64, count=len(keys))
        lo = np.empty_like(hi)
        if len(hi):
            lo[0] = kg(before) if before is not None else 0
            lo[1:] = hi[:-1]
        return np.stack([lo, hi], axis=1) if len(hi) else np.zeros((0, 2), dtype=np.int64)

    def _keep_mask(self, keys: list[bytes], before: bytes | None = None) -> np.ndarray:
        bounds = self.key_group_bounds(keys, before)
        wanted = self.key_groups[1]
        at = np.searchsorted(wanted, bounds[:, 0], side="left")
        return (at < len(wanted)) & (wanted[np.minimum(at, len(wanted) - 1)] <= bounds[:, 1]) if len(wanted) \
            else np.zeros(len(keys), dtype=bool)

    def _kept(self, handles: list[tuple[int, int]], keys: list[bytes], count: bool,
              before: bytes | None = None) -> list[tuple[int, int]]:
        if count:
            self.blocks_indexed = len(handles)
        else:
            self.blocks_indexed += len(handles)
        if self.key_groups is None:
            if count:
                self.blocks_kept = len(handles)
            return handles
        keep = self._keep_mask(keys, before)
        if before is None and len(handles) and keep[0] and keep.sum() == 1:
            # only the first block may hold a wanted key group, as far as the index tells (nothing bounds it
            # from below): its first key does (an SST file wholly after the wanted key groups: no block)
            first = self._first_user_key(handles[0])
            if first is not None:
                bounds = self.key_group_bounds(keys[:1])
                lo = int.from_bytes(first[: self.key_groups[0]].ljust(self.key_groups[0], b"\0"), "big")
                wanted = self.key_groups[1]
                keep[0] = bool(((wanted >= lo) & (wanted <= bounds[0, 1])).any())
        out = [h for h, k in zip(handles, keep.tolist()) if k]
        if count:
            self.blocks_kept = len(out)
        return out

    def _first_user_key(self, handle: tuple[int, int]) -> bytes | None:
        """The user key of the first entry of the data block at ``handle`` (None: the block holds none)."""
        block = self.block(handle)
        for key, _ in self.iter_block(block):
            return key[:-8] if len(key) >= 8 else None
        return None

    def _index_handles(self, block: bytes, delta: bool, keys: list[bytes] | None = None) -> list[tuple[int, int]]:
        """The block handles one index block holds (values full handles, or delta-encoded sizes); their
        index keys are appended to ``keys`` when given."""
        handles: list[tuple[int, int]] = []
        if not delta:
            for k, v in self.iter_block(block):
                off, q = _varint(v, 0)
                size, _ = _varint(v, q)
                handles.append((off, size))
                if keys is not None:
                    keys.append(k)
            return handles
        # delta-encoded values: a full handle at restart points, else a zigzag size delta
        n = len(block)
        num_restarts = int.from_bytes(block[n - 4 :], "little") & 0x7FFFFFFF
        restarts = {
            int.from_bytes(block[n - 4 - 4 * (num_restarts - i) : n - 4 - 4 * (num_restarts - i) + 4], "little")
            for i in range(num_restarts)
        }
        limit = n - 4 - 4 * num_restarts
        p = 0
        key = b""
        while p < limit:
            entry_start = p
            shared, p = _varint(block, p)
            non_shared, p = _varint(block, p)
            if keys is not None:
                key = key[:shared] + block[p : p + non_shared]
                keys.append(key)
            p += non_shared
            if entry_start in restarts or not handles:
                off, p = _varint(block, p)
                size, p = _varint(block, p)
            else:
                z, p = _varint(block, p)
                d = (z >> 1) ^ -(z & 1)
                prev_off, prev_size = handles[-1]
                off, size = prev_off + prev_size + 5, prev_size + d
            handles.append((off, size))
        return handles

    def entries(self) -> SstEntries:
        keys: list[bytes] = []
        values: list[bytes] = []
        for h in self.data_handles():
            _data_block_entries(self.block(h), keys, values)
        # each internal key ends in 8 bytes: (sequence << 8) | type, little-endian; split them off in bulk

        n = len(keys)
        if n:
            lens = np.fromiter(map(len, keys), dtype=np.int64, count=n)
            if lens.min() < 8:
                raise SstError(f"{self.name}: an internal key is shorter than its 8-byte trailer")
            joined = np.frombuffer(b"".join(keys), dtype=np.uint8)
            ends = np.cumsum(lens)
            trailer = joined[(ends - 8)[:, None] + np.arange(8)].copy().view("<u8").ravel()
            seqs = (trailer >> np.uint64(8)).tolist()
            types = (trailer & np.uint64(0xFF)).astype(np.int64).tolist()
            keys = [k[:-8] for k in keys]
        else:
            seqs, types = [], []
        return SstEntries(self.column_family, keys, seqs, types, values, self.properties)


def _data_block_entries(block: bytes, keys: list[bytes], values: list[bytes]) -> None:
    """Append the (internal key, value) entries of one data block; one-byte varints take a short cut."""
    n = len(block)
    packed = int.from_bytes(block[n - 4 :], "little")
    if packed >> 31:
        raise SstError("data block hash index is not supported")
    limit = n - 4 - 4 * (packed & 0x7FFFFFFF)
    ka, va = keys.append, values.append
    p = 0
    key = b""
    while p < limit:
        shared = block[p]
        if shared < 0x80:
            p += 1
        else:
            shared, p = _varint(block, p)
        non_shared = block[p]
        if non_shared < 0x80:
            p += 1
        else:
            non_shared, p = _varint(block, p)
        vlen = block[p]
        if vlen < 0x80:
            p += 1
        else:
            vlen, p = _varint(block, p)
        q = p + non_shared
        key = key[:shared] + block[p:q] if shared else block[p:q]
        ka(key)
        p = q + vlen
        va(block[q:p])
