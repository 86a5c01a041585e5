"""The embedded RocksDB backend: keyed state as bytes in a real RocksDB, through ``rocksdict``.

Like Flink's ``EmbeddedRocksDBStateBackend``: one column family per state,
raw byte keys laid out so that a key group is one contiguous byte range, and
values stored as bytes in the state's declared schema
(:meth:`~explorer.format.types.TypeInfo.to_bytes`), never pickled.

Layout
======

Raw key (all parts from :mod:`explorer.format.keycodec`, which is prefix-free,
so a raw key splits back into its parts)::

    key-group prefix | encode_key(key) | encode_key(namespace) [| encode_key(user_key)]

The key-group prefix is the key group as a big-endian unsigned integer of 1
byte when ``max_parallelism <= 128`` and 2 bytes otherwise (Flink's
``CompositeKeySerializationUtils.computeRequiredBytesInKeyGroupPrefix``), so
iterating in key-group order is a plain range scan and the key groups of a
subtask are one range ``[prefix(start), prefix(end + 1))``.

Raw value (``ts`` is the 8-byte big-endian last-access time in epoch ms,
present only when the state has TTL, placed before the value as Flink's
``TtlSerializer`` does)::

    value / reducing / aggregating   [ts] value
    list                             [ts] element ( , [ts] element )*    (one RocksDB value per key)
    map (one RocksDB entry per key)  [ts] null-flag(0|1) [value]

Lists separate their elements with one ``,`` byte, Flink's list layout (the
delimiter of RocksDB's StringAppend merge operator). Map values carry a null
flag (Flink's ``RocksDBMapState`` does the same), because ``map[k] = None``
is allowed. The default column family holds only metadata, under keys that
start with ``0xFF`` (above every key-group prefix): the format version, the
max parallelism, and each state's descriptor as JSON, so that a native
checkpoint describes itself.

What rocksdict (0.3.29) can and cannot do -- verified against the installed wheel
==================================================================================

* **Raw bytes**: ``Options(raw_mode=True)`` stores ``bytes -> bytes`` with no
  Python pickling; str keys are refused. The mode is remembered in
  ``rocksdict-config.json`` next to the database.
* **Column families**: ``create_column_family(name, Options(raw_mode=True))``
  returns an ``Rdict`` bound to that family; reopening a database opens
  every existing family automatically. Each family handle keeps the database
  open: ``db.close()`` alone leaves the LOCK held, so :meth:`close` closes
  every family handle too. Live iterators also keep it open, so every scan
  here reads in bounded chunks and drops its iterator before yielding.
* **Iteration**: ``items(from_key=..., read_opt=...)`` with
  ``ReadOptions.set_iterate_upper_bound`` gives bounded range scans.
  ``set_iterate_lower_bound`` did *not* bound ``seek_to_first()`` in a test,
  so scans always ``seek``/``from_key`` explicitly.
* **Write batches**: ``WriteBatch(raw_mode=True)`` with per-family handles
  (``get_column_family_handle``), applied atomically with ``db.write``.
* **Delete range**: ``delete_range(begin, end)`` on a family works; used for
  clearing whole key-group ranges (clip on restore, :meth:`clear_all`). Map
  ``clear()`` deletes entry by entry, as Flink does, instead of piling up
  range tombstones.
* **Checkpoints**: ``Checkpoint(db).create_checkpoint(dir)`` is RocksDB's own
  checkpoint: SST files are hard links (link count 2 observed), plus
  MANIFEST, CURRENT, OPTIONS. ``live_files()`` lists SSTs per family.
  The checkpoint opens as a normal database.
* **Bulk load**: ``SstFileWriter(Options(raw_mode=True))`` writes sorted raw
  entries to an SST file and ``ingest_external_file(paths, opts)`` (with
  ``IngestExternalFileOptions.set_move_files(True)``) on a family handle adds
  it to the database (into the bottom level when the family is empty). A
  canonical restore loads its rows this way (:meth:`RocksDBStateBackend.ingest_sorted`),
  about 3x faster than write batches for 1 KB values, and the state lands
  as one sorted run instead of memtables waiting for flushes and compactions.
* **Merge operators: not available.** No ``set_merge_operator`` on ``Options``
  and no ``merge`` on ``Rdict``/``WriteBatch`` (the C++ library has them,
  the binding does not expose them). So list ``add`` is a read-modify-write,
  but at the byte level: the stored bytes are read and the new encoded
  elements concatenated, without decoding the existing list.
* **Compaction filters: not available** (no Python hook, and RocksDB's
  built-in ``TtlCompactionFilter`` works on RocksDB's own TTL format, not
  Flink's). TTL "compaction cleanup" is therefore a sweeper:
  :meth:`RocksDBStateBackend.background_cleanup` scans each TTL state once
  and deletes expired entries (expired list elements are cut out of the
  list bytes), re-reading the clock every ``query_time_after_num_entries``
  entries as Flink's compaction filter does. Cleanup on read is the shared
  logic in :mod:`explorer.engine.state`.

The per-batch write buffer
=========================

rocksdict costs several microseconds per ``get``/``put`` call, and without a
merge operator every list ``add`` is a read plus a write of the whole list. So
each state table buffers the writes of the current batch: a dict from raw key
to the stored bytes (None for a delete; a ``bytearray`` that later appends in
the batch extend in place, so a hot key's list is read once and written once
per batch instead of once per record), consulted before RocksDB by every read,
next to a cache of the batch's reads of unwritten keys. Values in the buffer
are already encoded, so what a read returns is decoded from the bytes as it
would be from RocksDB (a returned object mutated without ``update`` changes
nothing, as in Flink's RocksDB backend). The buffer is applied in one atomic
``WriteBatch`` across all states (:meth:`RocksDBStateBackend.flush_buffers`)
and the read cache dropped:

* at the end of every batch of the operator (records, the timers fired by a
  watermark or by processing time: :meth:`RocksDBStateBackend.end_batch`), so
  at most one batch's touched keys wait in memory; also early when a buffer
  reaches :data:`BUFFER_ENTRIES` entries;
* before anything that reads or writes RocksDB directly: every access to a
  table's ``_cf`` (scans, ``rows``/``addresses``/``map_items``, range deletes,
  bulk loads, the checkpoint code that reads a family), the backend's
  ``_write`` (TTL sweeps, map clears), :meth:`RocksDBStateBackend.flush`,
  :meth:`~RocksDBStateBackend.native_checkpoint` (so full, incremental and
  savepoint captures see every write), :meth:`~RocksDBStateBackend.close`,
  size estimates and state drops.

RocksDB stays the store of record and nothing is cached across batches;
Flink's backend has no such buffer (it calls RocksDB per access through JNI,
which is cheaper than a Python binding call). Durability is unchanged: with
the WAL off, unflushed memtables and the buffer are both lost in a crash, and
recovery comes from the last checkpoint, which always includes the buffer.

Writes skip the write-ahead log (as Flink does: checkpoints, not the WAL,
make state durable); :meth:`flush`, :meth:`close` and
:meth:`native_checkpoint` flush memtables to SST files first.

After :meth:`close` the database is closed; the first read afterwards
reopens it read-only, so ``JobResult.state()`` still works once a job has
finished (call :meth:`close` again to release it).

Staging folders next to the database
====================================

Bulk loads, full snapshots, incremental checkpoints and native restores
work in scratch folders beside the database directory ``<dir>/<db>``, named
``<dir>/.<db>-<kind>-<12 hex digits>`` (:data:`STAGING_KINDS`; a
:class:`StagingDir`). They hold hard links to SST files, so a process
killed while one exists would otherwise leak that disk for good. Each one
holds a lock file, ``.owner.lock``, that its owner keeps open under an
exclusive ``flock`` for the folder's whole life (the file also names the
owner's host, pid and start time, for people reading it). The kernel drops
the lock when the owner closes it or dies, however it dies, and ``flock``
locks of two open files conflict also within one process, so:

* when a backend opens its directory, :func:`sweep_staging` removes every
  folder of that exact name pattern whose lock it can take without waiting
  (its owner is gone), and leaves the others alone: a full snapshot's
  asynchronous phase, in this process or another, may still be reading
  its pinned view after its backend closed. Nothing else is touched (other
  names, files, symlinks). What is removed is logged (logger
  ``explorer.engine.backends.rocksdb``, level INFO).
* a folder of that pattern with no lock file at all (left by an older
  version, or caught in the instant between its creation and its lock) is
  claimed by creating the lock file exclusively (``O_EXCL``); an owner that
  loses that race, or whose lock file was removed before it could lock it,
  takes a new name (:class:`StagingDir` retries), so a sweep never removes
  a folder someone holds.

``flock`` is reliable on local file systems; on NFS it is emulated with
byte-range locks, which also survive only as long as their owner.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import json
import logging
import os
import re
import shutil
import socket
import struct
import uuid
import weakref
from pathlib import Path
from typing import Any, Iterator

from rocksdict import (
    AccessType,
    Checkpoint,
    IngestExternalFileOptions,
    Options,
    ReadOptions,
    Rdict,
    SstFileWriter,
    WriteBatch,
    WriteOptions,
)

from ...errors import RestoreError, SerializationError, SnapshotFormatError, StateMigrationError
from ...format.keycodec import decode_key, encode_key, prefix_successor
from ...format.types import type_from_description
from ...keygroups import KeyGroupRange
from ..state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    StateKind,
    ValueStateDescriptor,
)
from ..ttl import StateTtlConfig
from .base import KeyedStateBackend, Row, StateTable

__all__ = ["FORMAT_VERSION", "RocksDBStateBackend", "RocksDBStateTable", "StagingDir", "sweep_staging"]

log = logging.getLogger(__name__)

#: version of the on-disk layout described in the module docstring
FORMAT_VERSION = 1
_FORMAT_NAME = "state-explorer-rocksdb"
_META_FORMAT = b"\xffexplorer/format"
_META_STATE = b"\xffexplorer/state/"

_TS = struct.Struct(">q")
_LIST_DELIMITER = b","
_NULL, _PRESENT = b"\x00", b"\x01"
_NONE_NS = b"\x01"  # encode_key(None)
_SCAN_CHUNK = 2048
#: writes (and, separately, cached reads) a state table buffers before applying them early
#: (otherwise they are applied at the end of each batch)
BUFFER_ENTRIES = 65536
_MISS = object()
#: size at which a restore's bulk load starts a new SST file (RocksDB's default target file size)
INGEST_FILE_BYTES = 64 << 20


class _KeyCache:
    """The encoded ``key-group prefix + key`` of the key in use, shared by every table.

    A keyed operator sets the current key once per record and then touches
    several states; the key is encoded once. Identity (``is``) of the key
    object is the cache test, so an equal key built anew is just re-encoded.
    """

    __slots__ = ("key", "kg", "prefix", "none_addr", "ns", "ns_bytes", "kg_bytes")

    def __init__(self, kg_bytes: int) -> None:
        self.kg_bytes = kg_bytes
        self.key: Any = object()
        self.kg = -1
        self.prefix = b""
        self.none_addr = b""  # prefix + encode_key(None): the address of the default namespace
        self.ns: Any = object()
        self.ns_bytes = b""


class RocksDBStateTable(StateTable):
    """One keyed state in its own column family."""

    def __init__(self, descriptor: StateDescriptor, key_groups: KeyGroupRange, backend: "RocksDBStateBackend",
                 cf: Rdict) -> None:
        super().__init__(descriptor, key_groups)
        self._backend = backend
        self._cache = backend._key_cache
        self._kg_bytes = backend._kg_bytes
        self._raw = cf
        #: this batch's writes: raw key -> stored bytes (a bytearray for a list being appended
        #: to), or None for a delete; applied by :meth:`RocksDBStateBackend.flush_buffers`
        self._w: dict[bytes, Any] = {}
        #: this batch's reads of keys not written: raw key -> stored bytes or None
        self._r: dict[bytes, Any] = {}
        self._bind(descriptor)

    @property
    def _cf(self) -> Rdict:
        """The column family, for anything that reads or writes RocksDB directly (scans,
        range deletes, bulk loads, the checkpoint code): the batch's buffered writes are
        applied first, so such readers see every write, and the read cache is dropped."""
        self._backend.flush_buffers()
        return self._raw

    @_cf.setter
    def _cf(self, cf: Any) -> None:
        self._raw = cf

    def _read(self, k: bytes) -> Any:
        """Stored bytes at ``k`` (None if absent): this batch's write, else a cached read, else RocksDB."""
        v = self._w.get(k, _MISS)
        if v is not _MISS:
            return v
        r = self._r
        v = r.get(k, _MISS)
        if v is not _MISS:
            return v
        v = self._raw.get(k)
        if len(r) >= BUFFER_ENTRIES:
            self._backend.flush_buffers()
            r = self._r
        r[k] = v
        self._backend._buffered.add(self)
        return v

    def _store(self, k: bytes, v: Any) -> None:
        """Buffer a write (``v`` bytes) or a delete (``v`` None) of ``k``."""
        w = self._w
        if k not in w:
            b = self._backend
            if b._read_only or b._closed:  # nothing to buffer for: write through (RocksDB refuses)
                if v is None:
                    self._raw.delete(k)
                else:
                    self._raw.put(k, bytes(v))
                return
            if len(w) >= BUFFER_ENTRIES:
                self._backend.flush_buffers()
                w = self._w
            self._backend._buffered.add(self)
        w[k] = v

    def _bind(self, descriptor: StateDescriptor) -> None:
        """(Re)bind the value codec to ``descriptor`` (its live dataclasses)."""
        self.descriptor = descriptor
        self._info = descriptor.value_info

    # --- keys -------------------------------------------------------------------------------
    def _kg_prefix(self, kg: int) -> bytes:
        return int(kg).to_bytes(self._kg_bytes, "big")

    def _address(self, kg: int, key: Any, ns: Any) -> bytes:
        c = self._cache
        if key is c.key and kg == c.kg:
            if ns is None:
                return c.none_addr
            p = c.prefix
        else:
            try:
                p = int(kg).to_bytes(c.kg_bytes, "big") + encode_key(key)
            except SerializationError as exc:
                raise SerializationError(f"state {self.name!r}: {exc}") from exc
            except OverflowError as exc:
                raise SerializationError(f"state {self.name!r}: key group {kg} does not fit the prefix") from exc
            c.key, c.kg, c.prefix = key, kg, p
            c.none_addr = p + _NONE_NS
        if ns is None:
            return c.none_addr
        if ns is not c.ns:
            try:
                c.ns_bytes = encode_key(ns)
            except SerializationError as exc:
                raise SerializationError(f"state {self.name!r} namespace: {exc}") from exc
            c.ns = ns
        return p + c.ns_bytes

    def _user_key(self, uk: Any) -> bytes:
        try:
            return encode_key(uk)
        except SerializationError as exc:
            raise SerializationError(f"state {self.name!r} map key: {exc}") from exc

    def _split_address(self, raw: bytes) -> tuple[int, Any, Any, int]:
        """(key_group, key, namespace, position after the namespace) of a raw key."""
        n = self._kg_bytes
        kg = int.from_bytes(raw[:n], "big")
        key, pos = decode_key(raw, n)
        ns, pos = decode_key(raw, pos)
        return kg, key, ns, pos

    # --- values ---------------------------------------------------------------------------
    def _encoding_error(self, value: Any, exc: Exception) -> SerializationError:
        return SerializationError(
            f"state {self.name!r}: cannot store {type(value).__name__} {value!r:.80} as {self._info.name}: {exc}"
        )

    def _encode_value(self, entry: Any) -> bytes:
        """A value-state entry (value, or (value, ts) with TTL) as bytes."""
        if self.has_ttl:
            value, ts = entry
            out = bytearray(_TS.pack(ts))
        else:
            value, out = entry, bytearray()
        try:
            self._info.encode(value, out)
        except SerializationError:
            raise
        except Exception as exc:
            raise self._encoding_error(value, exc) from exc
        return bytes(out)

    def _decode_value(self, raw: bytes) -> Any:
        if self.has_ttl:
            return self._info.decode(raw, 8)[0], _TS.unpack_from(raw)[0]
        return self._info.decode(raw, 0)[0]

    def _encode_elements(self, elements: list[Any]) -> bytes:
        out = bytearray()
        ttl = self.has_ttl
        enc = self._info.encode
        for i, e in enumerate(elements):
            if i:
                out += _LIST_DELIMITER
            if ttl:
                value, ts = e
                out += _TS.pack(ts)
            else:
                value = e
            try:
                enc(value, out)
            except SerializationError:
                raise
            except Exception as exc:
                raise self._encoding_error(value, exc) from exc
        return bytes(out)

    def _element_spans(self, raw: bytes) -> list[tuple[int, int]]:
        """(start, end) of each element's bytes (including its ts) in a stored list."""
        spans = []
        pos, n = 0, len(raw)
        dec = self._info.decode
        skip = 8 if self.has_ttl else 0
        while pos < n:
            start = pos
            _, pos = dec(raw, pos + skip)
            spans.append((start, pos))
            if pos < n:
                if raw[pos : pos + 1] != _LIST_DELIMITER:
                    raise SerializationError(f"state {self.name!r}: corrupt list bytes at {pos} (no delimiter)")
                pos += 1
        return spans

    def _decode_elements(self, raw: bytes) -> list[Any]:
        out = []
        pos, n = 0, len(raw)
        dec = self._info.decode
        ttl = self.has_ttl
        while pos < n:
            if ttl:
                ts = _TS.unpack_from(raw, pos)[0]
                v, pos = dec(raw, pos + 8)
                out.append((v, ts))
            else:
                v, pos = dec(raw, pos)
                out.append(v)
            pos += 1  # the delimiter (or past the end)
        return out

    def _encode_map_value(self, entry: Any) -> bytes:
        if self.has_ttl:
            value, ts = entry
            out = bytearray(_TS.pack(ts))
        else:
            value, out = entry, bytearray()
        if value is None:
            out += _NULL
        else:
            out += _PRESENT
            try:
                self._info.encode(value, out)
            except SerializationError:
                raise
            except Exception as exc:
                raise self._encoding_error(value, exc) from exc
        return bytes(out)

    def _decode_map_value(self, raw: bytes) -> Any:
        if self.has_ttl:
            v = None if raw[8] == 0 else self._info.decode(raw, 9)[0]
            return v, _TS.unpack_from(raw)[0]
        return None if raw[0] == 0 else self._info.decode(raw, 1)[0]

    # --- single-address operations -----------------------------------------------------------
    def get(self, key_group, key, namespace):
        k = self._address(key_group, key, namespace)
        kind = self.kind
        if kind is StateKind.MAP:
            d = dict(self.map_items(key_group, key, namespace))
            return d or None
        raw = self._read(k)
        if raw is None:
            return None
        if kind is StateKind.LIST:
            if raw.__class__ is bytearray:
                raw = bytes(raw)  # decoded bytes elements must be bytes, not bytearray slices
            return self._decode_elements(raw) or None
        return self._decode_value(raw)

    def put(self, key_group, key, namespace, entry):
        kind = self.kind
        if kind is StateKind.MAP:
            self.remove(key_group, key, namespace)
            for uk, e in dict(entry).items():
                self.map_put(key_group, key, namespace, uk, e)
            return
        k = self._address(key_group, key, namespace)
        if kind is StateKind.LIST:
            self._store(k, self._encode_elements(entry) if entry else None)
        else:
            self._store(k, self._encode_value(entry))

    def remove(self, key_group, key, namespace):
        k = self._address(key_group, key, namespace)
        if self.kind is StateKind.MAP:
            keys = [rk for rk, _ in self._scan(k, prefix_successor(k), values=False)]
            if keys:
                self._backend._delete_keys(self, keys)
        else:
            self._store(k, None)

    def append(self, key_group, key, namespace, elements):
        """Byte-level read-modify-write: the stored list is not decoded (rocksdict has no merge).

        The first append to a list in a batch reads its bytes once into a ``bytearray`` in
        the write buffer; later appends in the batch extend it in place."""
        if not elements:
            return
        k = self._address(key_group, key, namespace)
        new = self._encode_elements(elements)
        cur = self._w.get(k, _MISS)
        if cur.__class__ is bytearray:
            cur += _LIST_DELIMITER
            cur += new
            return
        if cur is _MISS:
            cur = self._r.get(k, _MISS)
            if cur is _MISS:
                cur = self._raw.get(k)
        if cur:
            buf = bytearray(cur)
            buf += _LIST_DELIMITER
            buf += new
        else:
            buf = bytearray(new)
        self._store(k, buf)

    def map_get(self, key_group, key, namespace, user_key):
        raw = self._read(self._address(key_group, key, namespace) + self._user_key(user_key))
        return None if raw is None else self._decode_map_value(raw)

    def map_contains(self, key_group, key, namespace, user_key):
        return self._read(self._address(key_group, key, namespace) + self._user_key(user_key)) is not None

    def map_put(self, key_group, key, namespace, user_key, entry):
        self._store(self._address(key_group, key, namespace) + self._user_key(user_key), self._encode_map_value(entry))

    def map_remove(self, key_group, key, namespace, user_key):
        self._store(self._address(key_group, key, namespace) + self._user_key(user_key), None)

    def map_items(self, key_group, key, namespace) -> Iterator[tuple[Any, Any]]:
        prefix = self._address(key_group, key, namespace)
        n = len(prefix)
        dec = self._decode_map_value
        items = [(decode_key(rk, n)[0], dec(rv)) for rk, rv in self._scan(prefix, prefix_successor(prefix))]
        return iter(items)

    # --- scans ---------------------------------------------------------------------------------
    def _range(self, key_groups: KeyGroupRange | None) -> tuple[bytes, bytes] | None:
        kgr = self.key_groups if key_groups is None else key_groups
        start = max(kgr.start, self.key_groups.start)
        end = min(kgr.end, self.key_groups.end)
        if end < start:
            return None
        return self._kg_prefix(start), self._kg_prefix(end + 1)

    def _scan(self, lo: bytes, hi: bytes | None, values: bool = True) -> Iterator[tuple[bytes, Any]]:
        """``(raw_key, raw_value_or_None)`` for keys in ``[lo, hi)``, read in chunks; no
        RocksDB iterator stays open between chunks (a live iterator pins the database)."""
        while True:
            cf = self._cf  # re-read: a closed backend swaps in the reopened handle
            ro = ReadOptions()
            if hi is not None:
                ro.set_iterate_upper_bound(hi)
            if values:
                it = cf.items(from_key=lo, read_opt=ro)
                chunk = list(itertools.islice(it, _SCAN_CHUNK))
            else:
                it = cf.keys(from_key=lo, read_opt=ro)
                chunk = [(k, None) for k in itertools.islice(it, _SCAN_CHUNK)]
            del it
            yield from chunk
            if len(chunk) < _SCAN_CHUNK:
                return
            lo = chunk[-1][0] + b"\x00"  # the smallest key after the last one read

    def addresses(self, key_groups: KeyGroupRange | None = None) -> Iterator[tuple[int, Any, Any]]:
        r = self._range(key_groups)
        if r is None:
            return
        last = None
        split = self._split_address
        is_map = self.kind is StateKind.MAP
        for rk, _ in self._scan(*r, values=False):
            kg, key, ns, pos = split(rk)
            if is_map:
                addr = rk[:pos]
                if addr == last:
                    continue
                last = addr
            yield kg, key, ns

    def rows(self, key_groups: KeyGroupRange | None = None) -> Iterator[Row]:
        """Every stored entry flattened, in key-group order, from one range scan."""
        r = self._range(key_groups)
        if r is None:
            return
        split = self._split_address
        kind = self.kind
        ttl = self.has_ttl
        for rk, rv in self._scan(*r):
            kg, key, ns, pos = split(rk)
            if kind is StateKind.MAP:
                uk = decode_key(rk, pos)[0]
                e = self._decode_map_value(rv)
                yield (kg, key, ns, uk, e[0], e[1]) if ttl else (kg, key, ns, uk, e, None)
            elif kind is StateKind.LIST:
                for i, e in enumerate(self._decode_elements(rv)):
                    yield (kg, key, ns, i, e[0], e[1]) if ttl else (kg, key, ns, i, e, None)
            else:
                e = self._decode_value(rv)
                yield (kg, key, ns, None, e[0], e[1]) if ttl else (kg, key, ns, None, e, None)

    def entries_per_key_group(self) -> dict[int, int]:
        r = self._range(None)
        if r is None:
            return {}
        n = self._kg_bytes
        counts: dict[int, int] = {}
        is_list = self.kind is StateKind.LIST
        for rk, rv in self._scan(*r, values=is_list):
            kg = int.from_bytes(rk[:n], "big")
            counts[kg] = counts.get(kg, 0) + (len(self._element_spans(rv)) if is_list else 1)
        return counts

    def load_rows(self, rows: Iterator[Row]) -> int:
        """Restore rows through write batches (one RocksDB write per few thousand rows)."""
        ttl = self.has_ttl
        kind = self.kind
        n = 0
        puts: list[tuple[bytes, bytes]] = []
        lists: dict[bytes, list[Any]] = {}
        for kg, key, ns, uk, value, ts in rows:
            if ttl and ts is None:
                raise StateMigrationError(f"state {self.name!r} has TTL but a restored entry has no last-access time")
            entry = (value, ts) if ttl else value
            addr = self._address(kg, key, ns)
            if kind is StateKind.MAP:
                puts.append((addr + self._user_key(uk), self._encode_map_value(entry)))
            elif kind is StateKind.LIST:
                lists.setdefault(addr, []).append(entry)
            else:
                puts.append((addr, self._encode_value(entry)))
            n += 1
            if len(puts) >= _SCAN_CHUNK:
                self._backend._write(self, puts, [])
                puts = []
        for addr, elems in lists.items():
            new = self._encode_elements(elems)
            cur = self._cf.get(addr)
            puts.append((addr, new if not cur else cur + _LIST_DELIMITER + new))
            if len(puts) >= _SCAN_CHUNK:
                self._backend._write(self, puts, [])
                puts = []
        if puts:
            self._backend._write(self, puts, [])
        return n

    def load_restored(self, pending: Any, descriptor: StateDescriptor, operator: str) -> int:
        """Load a restored state into this (empty) state.

        A canonical restore (:class:`explorer.engine.checkpoint.restore.RestoredKeyedState`)
        hands over its rows in batches that carry, where the types allow, their raw
        entries already encoded column-wise and sorted
        (:func:`explorer.format.native_encode.encode_batch`); those are written into
        SST files and ingested (:meth:`RocksDBStateBackend.ingest_sorted`), the
        usual RocksDB bulk load. From the first batch without raw entries, or whose
        keys do not come after the previous batch's, the rest goes the row way
        (:meth:`load_rows`), so the result is the same either way.
        """
        chunks = getattr(pending, "chunks", None)
        if chunks is None or not self._is_empty():
            return self.load_rows(pending.rows(descriptor, operator))
        return self._backend.ingest_sorted(self, chunks(descriptor, operator, self._kg_bytes))

    def _is_empty(self) -> bool:
        it = self._cf.keys()
        first = list(itertools.islice(it, 1))
        del it
        return not first

    def clear_all(self) -> None:
        r = self._range(None)
        if r is not None:
            self._cf.delete_range(*r)

    def drop_expired(self, now_ms: int, ttl_ms: int, clock=None, requery_every: int | None = None) -> int:
        """One sweep over the whole state, deleting what has expired at ``now_ms`` (what
        Flink's TTL compaction filter drops). With ``clock`` and ``requery_every``, the
        time is re-read every ``requery_every`` entries, as the compaction filter does."""
        if not self.has_ttl:
            return 0
        r = self._range(None)
        if r is None:
            return 0
        removed = 0
        seen = 0
        deletes: list[bytes] = []
        puts: list[tuple[bytes, bytes]] = []
        is_list = self.kind is StateKind.LIST
        unpack = _TS.unpack_from
        for rk, rv in self._scan(*r):
            seen += 1
            if clock is not None and requery_every and seen % requery_every == 0:
                now_ms = clock.now_ms()
            if is_list:
                spans = self._element_spans(rv)
                alive = [(s, e) for s, e in spans if unpack(rv, s)[0] + ttl_ms > now_ms]
                if len(alive) == len(spans):
                    continue
                removed += len(spans) - len(alive)
                if alive:
                    puts.append((rk, _LIST_DELIMITER.join(rv[s:e] for s, e in alive)))
                else:
                    deletes.append(rk)
            elif unpack(rv, 0)[0] + ttl_ms <= now_ms:
                deletes.append(rk)
                removed += 1
        if deletes or puts:
            self._backend._write(self, puts, deletes)
        return removed


class _Closed:
    """Stands in for a closed column family: the first use reopens the database read-only."""

    __slots__ = ("_backend", "_name")

    def __init__(self, backend: "RocksDBStateBackend", name: str) -> None:
        self._backend = backend
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        self._backend._reopen_read_only()
        return getattr(self._backend._cfs[self._name], attr)


_DESCRIPTOR_TYPE_FIELD = {
    StateKind.VALUE: (ValueStateDescriptor, "type"),
    StateKind.LIST: (ListStateDescriptor, "element_type"),
    StateKind.MAP: (MapStateDescriptor, "value_type"),
    StateKind.REDUCING: (ReducingStateDescriptor, "type"),
    StateKind.AGGREGATING: (AggregatingStateDescriptor, "accumulator_type"),
}


def _descriptor_from_json(d: dict) -> StateDescriptor:
    """A descriptor rebuilt from stored metadata (types without user classes, no functions)."""
    kind = StateKind(d["kind"])
    cls, field = _DESCRIPTOR_TYPE_FIELD[kind]
    kw: dict[str, Any] = {field: type_from_description(d["value_type"]), "ttl": StateTtlConfig.from_json(d.get("ttl"))}
    if kind is StateKind.MAP:
        kw["key_type"] = type_from_description(d["user_key_type"])
    return cls(d["name"], **kw)


class RocksDBStateBackend(KeyedStateBackend):
    """Keyed state of one subtask in an embedded RocksDB at ``path``.

    ``path`` is this backend's working directory. It is created if missing; an
    existing RocksDB there is wiped first unless ``fresh=False`` (then it is
    opened and its states are adopted, which is what :meth:`restore_native`
    does after copying a checkpoint in). A directory that holds other files
    is never wiped.
    """

    name = "rocksdb"

    def __init__(self, max_parallelism: int, key_groups: KeyGroupRange, clock, path: str | os.PathLike,
                 *, fresh: bool = True) -> None:
        super().__init__(max_parallelism, key_groups, clock)
        self.path = Path(path)
        self._kg_bytes = 2 if max_parallelism > 128 else 1
        self._key_cache = _KeyCache(self._kg_bytes)
        #: tables holding buffered writes or cached reads (see :meth:`flush_buffers`)
        self._buffered: set[RocksDBStateTable] = set()
        self._cfs: dict[str, Rdict] = {}
        self._read_only = False
        self._closed = False
        sweep_staging(self.path)  # scratch folders of runs that died mid-way (not live ones)
        if fresh:
            _wipe_rocksdb_dir(self.path)
        #: the folders this backend created for its directory (``path`` and missing parents, deepest
        #: first): a failed restore removes them again when empty (:func:`remove_created_dirs`)
        self.created_dirs = _missing_dirs(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._write_opts = WriteOptions()
        self._write_opts.disable_wal = True
        self._families = set(Rdict.list_cf(str(self.path), self._options())) if (self.path / "CURRENT").exists() else set()
        self._db = self._open(read_only=False)
        self._check_or_write_format()
        self._adopt_existing_states()
        #: SST files of this instance already in a checkpoint's shared area: file name ->
        #: {"path": "../shared/...", "bytes": n, "sha256": hex}; SSTs are immutable and this
        #: instance never reuses a file number, so a name here needs no second upload
        #: (filled by incremental checkpoints and by a restore from one)
        self.uploaded: dict[str, dict[str, Any]] = {}

    # --- opening -------------------------------------------------------------------------------
    @staticmethod
    def _options() -> Options:
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        return opts

    def _open(self, read_only: bool) -> Rdict:
        access = AccessType.read_only() if read_only else AccessType.read_write()
        db = Rdict(str(self.path), self._options(), access_type=access)
        if not read_only:
            db.set_write_options(self._write_opts)
        return db

    def _check_or_write_format(self) -> None:
        raw = self._db.get(_META_FORMAT)
        if raw is None:
            meta = {"format": _FORMAT_NAME, "version": FORMAT_VERSION, "max_parallelism": self.max_parallelism,
                    "key_group_prefix_bytes": self._kg_bytes}
            self._db.put(_META_FORMAT, json.dumps(meta, sort_keys=True).encode())
            return
        meta = json.loads(raw)
        if meta.get("format") != _FORMAT_NAME or meta.get("version") != FORMAT_VERSION:
            raise SnapshotFormatError(
                f"{self.path}: RocksDB state format {meta.get('format')!r} version {meta.get('version')!r}; "
                f"expected {_FORMAT_NAME!r} version {FORMAT_VERSION}"
            )
        if meta.get("max_parallelism") != self.max_parallelism:
            raise RestoreError(
                f"{self.path}: RocksDB state was written with max parallelism {meta.get('max_parallelism')}, "
                f"the job has max parallelism {self.max_parallelism}; key groups would not match"
            )

    def _stored_descriptors(self) -> dict[str, dict]:
        out = {}
        n = len(_META_STATE)
        ro = ReadOptions()
        ro.set_iterate_upper_bound(prefix_successor(_META_STATE))
        for k, v in list(self._db.items(from_key=_META_STATE, read_opt=ro)):
            out[k[n:].decode("utf-8")] = json.loads(v)
        return out

    def _adopt_existing_states(self) -> None:
        """Create tables for states already in the database (a restore), from their metadata."""
        for name, d in self._stored_descriptors().items():
            if name not in self.tables:
                self.tables[name] = self._make_table(_descriptor_from_json(d), create=False)

    # --- tables --------------------------------------------------------------------------------
    def _make_table(self, descriptor: StateDescriptor, create: bool) -> RocksDBStateTable:
        name = descriptor.name
        cf = self._cfs.get(name)
        if cf is None:
            if name in self._families:
                cf = self._db.get_column_family(name)
            elif create:
                cf = self._db.create_column_family(name, Options(raw_mode=True))
                self._families.add(name)
                self._db.put(_META_STATE + name.encode("utf-8"), json.dumps(descriptor.describe(), sort_keys=True).encode())
            else:
                raise RestoreError(f"{self.path}: state {name!r} is in the metadata but has no column family")
            if not self._read_only:
                cf.set_write_options(self._write_opts)
            self._cfs[name] = cf
        return RocksDBStateTable(descriptor, self.key_groups, self, cf)

    def _create_table(self, descriptor: StateDescriptor) -> StateTable:
        stored = self._stored_descriptors().get(descriptor.name)
        if stored is not None:
            new = descriptor.describe()
            if stored["kind"] != new["kind"]:
                raise StateMigrationError(
                    f"state {descriptor.name!r} is stored as {stored['kind']} state in {self.path}, "
                    f"the job declares {new['kind']} state"
                )
        return self._make_table(descriptor, create=True)

    def register(self, descriptor: StateDescriptor, columnar: Any = None) -> StateTable:
        table = super().register(descriptor, columnar)  # no columnar tables here: values live in RocksDB
        table._bind(descriptor)  # decode with the job's own dataclasses from now on
        return table

    def _drop_read_cache(self) -> None:
        """Forget cached reads (a read-only or closed database has no buffered writes)."""
        for t in self._buffered:
            t._r = {}
        self._buffered = set()

    def _reopen_read_only(self) -> None:
        """After close(): reopen read-only so the state can still be read."""
        self._db = self._open(read_only=True)
        self._read_only = True
        self._closed = False
        self._cfs = {}
        for name, table in self.tables.items():
            cf = self._db.get_column_family(name)
            self._cfs[name] = cf
            table._cf = cf

    # --- the per-batch write buffer --------------------------------------------------------------
    def flush_buffers(self) -> None:
        """Apply every table's buffered writes to RocksDB in one atomic ``WriteBatch`` and
        drop the cached reads. Called at the end of each batch (:meth:`end_batch`), before
        anything reads or writes RocksDB directly, and when a buffer is full."""
        tables = self._buffered
        if not tables:
            return
        self._buffered = set()
        wb = None
        for t in tables:
            w = t._w
            if w:
                if wb is None:
                    wb = WriteBatch(raw_mode=True)
                handle = self._db.get_column_family_handle(t.name)
                for k, v in w.items():
                    if v is None:
                        wb.delete(k, handle)
                    else:
                        wb.put(k, v if v.__class__ is bytes else bytes(v), handle)
                t._w = {}
            t._r = {}
        if wb is not None:
            self._db.write(wb, self._write_opts)

    def end_batch(self) -> None:
        """The operator finished a batch (records, a watermark's timers, processing-time
        timers): apply its writes, so no more than one batch's touched keys wait in memory."""
        if self._buffered:
            self.flush_buffers()

    def _delete_keys(self, table: RocksDBStateTable, keys: list[bytes]) -> None:
        self._write(table, [], keys)

    def _write(self, table: RocksDBStateTable, puts: list[tuple[bytes, bytes]], deletes: list[bytes]) -> None:
        self.flush_buffers()  # earlier buffered writes first, and no cached read outlives this write
        handle = self._db.get_column_family_handle(table.name)
        wb = WriteBatch(raw_mode=True)
        for k, v in puts:
            wb.put(k, v, handle)
        for k in deletes:
            wb.delete(k, handle)
        self._db.write(wb, self._write_opts)

    def ingest_sorted(self, table: RocksDBStateTable, chunks: Iterator[Any]) -> int:
        """Bulk-load batches of a restored state into ``table`` (empty) through SST files.

        Each batch has ``raw`` (``(keys, values)`` binary arrays, keys strictly
        ascending, or None), ``num_rows`` and ``rows()``. Raw batches whose keys
        ascend from one batch to the next are written with an ``SstFileWriter``
        (files cut at :data:`INGEST_FILE_BYTES`) in a folder next to the database
        and ingested in one ``IngestExternalFile`` call (moved, not copied; they
        land in the bottom level as one sorted run). From the first other batch
        on, the files written so far are ingested and the rest is loaded with
        :meth:`RocksDBStateTable.load_rows`. Returns the rows loaded.
        """
        staging: StagingDir | None = None
        files: list[str] = []
        writer = None
        in_file = 0
        last: bytes | None = None
        by_rows = False
        n = 0

        def ingest() -> None:
            nonlocal writer
            if writer is not None:
                writer.finish()
                writer = None
            if files:
                opts = IngestExternalFileOptions()
                opts.set_move_files(True)
                table._cf.ingest_external_file(list(files), opts)
                files.clear()

        try:
            for chunk in chunks:
                raw = None if by_rows else chunk.raw
                if raw is not None and last is not None and raw[0][0].as_py() <= last:
                    raw = None  # not after the previous batch: cannot extend the sorted run
                if raw is None:
                    if not by_rows:
                        ingest()
                        by_rows = True
                    n += table.load_rows(chunk.rows())
                    continue
                keys, values = raw
                if writer is None:
                    if staging is None:
                        staging = StagingDir(self.path, "ingest")
                    files.append(str(staging.path / f"{len(files):06d}.sst"))
                    writer = SstFileWriter(Options(raw_mode=True))
                    writer.open(files[-1])
                    in_file = 0
                for k, v in zip(keys.to_pylist(), values.to_pylist()):
                    writer[k] = v
                last = keys[-1].as_py()
                n += chunk.num_rows
                in_file += keys.nbytes + values.nbytes
                if in_file >= INGEST_FILE_BYTES:
                    writer.finish()
                    writer = None
            ingest()
        finally:
            writer = None
            if staging is not None:
                staging.release()
        return n

    # --- TTL -----------------------------------------------------------------------------------
    def background_cleanup(self, now_ms: int | None = None) -> int:
        """Sweep every TTL state whose cleanup includes RocksDB compaction cleanup (the
        default) and delete the expired entries; the stand-in for Flink's TTL compaction
        filter, which rocksdict cannot install. Returns how many entries were removed."""
        n = 0
        for table in list(self.tables.values()):
            ttl = getattr(table.descriptor, "ttl", None)
            if ttl is None:
                continue
            rc = ttl.cleanup.rocksdb_cleanup()
            if rc is None:
                continue
            if now_ms is None:
                n += table.drop_expired(self.clock.now_ms(), ttl.ttl_ms, self.clock, rc.query_time_after_num_entries)
            else:
                n += table.drop_expired(now_ms, ttl.ttl_ms)
        return n

    # --- files ---------------------------------------------------------------------------------
    def flush(self) -> None:
        """Apply the write buffer, then write every memtable to SST files (state is otherwise
        not in files: the WAL is off)."""
        if self._closed or self._read_only:
            self._drop_read_cache()
            return
        self.flush_buffers()
        self._db.flush(True)
        for cf in self._cfs.values():
            cf.flush(True)

    def compact(self) -> None:
        """A full manual compaction of every state (RocksDB's ``CompactRange``): the LSM tree of a
        long-running job in its settled shape, e.g. after a bulk load."""
        if self._closed or self._read_only:
            return
        self.flush()
        for cf in self._cfs.values():
            cf.compact_range(None, None)

    def live_sst_files(self) -> list[dict]:
        """RocksDB's ``live_files()``: name, column family, level, size, key range per SST."""
        self.flush_buffers()
        return list(self._db.live_files())

    def native_checkpoint(self, target_dir: str | os.PathLike) -> list[str]:
        """A RocksDB checkpoint of the whole database in ``target_dir`` (which must not exist).

        SST files are hard-linked where possible (immutable, so an incremental
        checkpoint copies only SST names it has not uploaded before); MANIFEST,
        CURRENT and OPTIONS are copied. Returns the file names, sorted.
        """
        target = Path(target_dir)
        if target.exists():
            raise FileExistsError(f"checkpoint target {target} already exists")
        target.parent.mkdir(parents=True, exist_ok=True)
        self.flush()
        Checkpoint(self._db).create_checkpoint(str(target))
        return sorted(os.listdir(target))

    @classmethod
    def restore_native(cls, checkpoint_dir: str | os.PathLike, max_parallelism: int, key_groups: KeyGroupRange,
                       clock, path: str | os.PathLike) -> "RocksDBStateBackend":
        """Open a backend at ``path`` from a :meth:`native_checkpoint` directory.

        The checkpoint is not modified: its files are hard-linked (SSTs) or
        copied into ``path`` first. Key groups outside ``key_groups`` are
        deleted (Flink clips a restored instance the same way), so a subtask
        can restore from a checkpoint of a wider range after rescaling. States
        come back as tables right away, decoded without user classes until the
        job registers its descriptors again.
        """
        src = Path(checkpoint_dir)
        if not (src / "CURRENT").is_file():
            raise RestoreError(f"{src} is not a RocksDB checkpoint (no CURRENT file)")
        dst = Path(path)
        sweep_staging(dst)
        _wipe_rocksdb_dir(dst)
        created = _missing_dirs(dst)
        # the files are gathered in a staging folder and renamed into place once all are there: a
        # process killed mid-copy leaves a staging folder (swept later), never a half-filled ``dst``
        # that the next attempt would refuse to overwrite (it has no CURRENT file)
        staging = StagingDir(dst, "restore")
        try:
            work = staging.path / "db"
            work.mkdir()
            for f in sorted(src.iterdir()):
                if f.suffix == ".sst":
                    try:
                        os.link(f, work / f.name)
                        continue
                    except OSError:
                        pass
                shutil.copy2(f, work / f.name)
            if dst.is_dir():
                dst.rmdir()  # left empty by _wipe_rocksdb_dir; rename needs the name free
            os.rename(work, dst)
        finally:
            staging.release()
        backend = cls(max_parallelism, key_groups, clock, dst, fresh=False)
        backend.created_dirs = created
        try:
            backend._clip(key_groups)
        except BaseException:
            backend.close()
            raise
        return backend

    @property
    def key_group_prefix_bytes(self) -> int:
        return self._kg_bytes

    def estimated_entries(self, name: str) -> int:
        """RocksDB's estimate of the number of keys of state ``name`` (no scan)."""
        self.flush_buffers()
        try:
            return int(self._cfs[name].property_int_value("rocksdb.estimate-num-keys") or 0)
        except Exception:  # noqa: BLE001 - an estimate only
            return 0

    def sst_bytes(self, name: str) -> int:
        """Bytes of the live SST files of state ``name`` (its column family)."""
        self.flush_buffers()
        try:
            return int(self._cfs[name].property_int_value("rocksdb.live-sst-files-size") or 0)
        except Exception:  # noqa: BLE001 - a size report only
            return 0

    def store_descriptor(self, descriptor: StateDescriptor) -> None:
        """Record ``descriptor`` as the state's stored description (after a state migration)."""
        self._db.put(_META_STATE + descriptor.name.encode("utf-8"),
                     json.dumps(descriptor.describe(), sort_keys=True).encode())

    def drop_state(self, name: str) -> None:
        """Delete a state entirely: its table, column family and stored description
        (restored state the job does not declare, dropped with ``allow_non_restored_state``)."""
        self.flush_buffers()
        self.tables.pop(name, None)
        self._states.pop(name, None)
        cf = self._cfs.pop(name, None)
        if cf is not None:
            cf.close()
        if name in self._families:
            self._db.drop_column_family(name)
            self._families.discard(name)
        self._db.delete(_META_STATE + name.encode("utf-8"))

    def import_key_groups(self, source: str | os.PathLike) -> int:
        """Copy the raw entries of this backend's key groups from another native database
        (read-only, not modified): how a rescaled subtask merges a second restored instance
        into its first. States only ``source`` has are created. Returns the entries copied."""
        self.flush_buffers()
        src = Rdict(str(source), self._options(), access_type=AccessType.read_only())
        n = 0
        try:
            ro = ReadOptions()
            ro.set_iterate_upper_bound(prefix_successor(_META_STATE))
            stored = {k[len(_META_STATE):].decode("utf-8"): json.loads(v)
                      for k, v in list(src.items(from_key=_META_STATE, read_opt=ro))}
            kg = self.key_groups
            lo, hi = self._kg_prefix_of(kg.start), self._kg_prefix_of(kg.end + 1)
            for name, d in stored.items():
                if name not in self.tables:
                    self.tables[name] = self._make_table(_descriptor_from_json(d), create=True)
                table = self.tables[name]
                scf = src.get_column_family(name)
                try:
                    start = lo
                    while True:
                        ro = ReadOptions()
                        ro.set_iterate_upper_bound(hi)
                        it = scf.items(from_key=start, read_opt=ro)
                        chunk = list(itertools.islice(it, _SCAN_CHUNK))
                        del it
                        if chunk:
                            self._write(table, chunk, [])
                            n += len(chunk)
                        if len(chunk) < _SCAN_CHUNK:
                            break
                        start = chunk[-1][0] + b"\x00"
                finally:
                    scf.close()
        finally:
            src.close()
        return n

    def _kg_prefix_of(self, kg: int) -> bytes:
        return int(kg).to_bytes(self._kg_bytes, "big")

    def _clip(self, key_groups: KeyGroupRange) -> None:
        n = self._kg_bytes
        lo, hi = key_groups.start.to_bytes(n, "big"), (key_groups.end + 1).to_bytes(n, "big")
        zero, top = bytes(n), self.max_parallelism.to_bytes(n, "big")
        for table in self.tables.values():
            if lo > zero:
                table._cf.delete_range(zero, lo)
            if top > hi:
                table._cf.delete_range(hi, top)

    def close(self) -> None:
        """Flush and close the database (every column family handle, then the database)."""
        if self._closed:
            return
        self.flush()
        for cf in self._cfs.values():
            cf.close()
        self._db.close()
        self._cfs = {}
        self._closed = True
        for table in self.tables.values():
            table._cf = _Closed(self, table.name)


# --- staging folders ----------------------------------------------------------------------------
#: what a staging folder next to a database is for (see "Staging folders" in the module docstring):
#: a bulk load's SST files, a full snapshot's pinned view, an incremental checkpoint's hard-linked
#: RocksDB checkpoint, a native restore's files before they are moved into place
STAGING_KINDS = ("ingest", "full", "chk", "restore")
_LOCK_NAME = ".owner.lock"
_STAGING_TRIES = 100


def _staging_pattern(db_path: Path) -> re.Pattern[str]:
    kinds = "|".join(STAGING_KINDS)
    return re.compile(rf"\.{re.escape(db_path.name)}-(?:{kinds})-[0-9a-f]{{12}}")


def _process_start(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22), if known."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:].split()[19]
    except (OSError, ValueError, IndexError):
        return None


def _remove_owned(path: str, fd: int) -> None:
    """Remove an owned staging folder, then drop its lock (the finalizer of a :class:`StagingDir`)."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    finally:
        os.close(fd)


class StagingDir:
    """A scratch folder ``.<db>-<kind>-<hex>`` next to the database at ``db_path``, owned while alive.

    Holds its lock file under an exclusive ``flock`` until :meth:`release` (which
    removes the folder) or until this object is garbage-collected (same); a
    process that dies leaves a folder :func:`sweep_staging` can prove abandoned.
    """

    def __init__(self, db_path: str | os.PathLike, kind: str) -> None:
        if kind not in STAGING_KINDS:
            raise ValueError(f"unknown staging kind {kind!r}; expected one of {STAGING_KINDS}")
        db_path = Path(db_path)
        db_path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(_STAGING_TRIES):
            path = db_path.parent / f".{db_path.name}-{kind}-{uuid.uuid4().hex[:12]}"
            try:
                path.mkdir()
            except FileExistsError:
                continue
            try:
                fd = os.open(path / _LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except (FileExistsError, FileNotFoundError):
                continue  # a sweep took the new, still unlocked folder for a leftover: use another name
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # waits only while a sweep that got here first removes it
                if os.fstat(fd).st_nlink == 0:  # it did: the folder is gone
                    os.close(fd)
                    continue
                owner = {"host": socket.gethostname(), "pid": os.getpid(), "start": _process_start(os.getpid())}
                os.write(fd, json.dumps(owner).encode())
            except BaseException:
                os.close(fd)
                raise
            self.path = path
            self._finalizer = weakref.finalize(self, _remove_owned, str(path), fd)
            return
        raise OSError(f"{db_path.parent}: could not create a staging folder for {db_path.name} "
                      f"in {_STAGING_TRIES} tries (something keeps removing them)")

    @property
    def alive(self) -> bool:
        return self._finalizer.alive

    def release(self) -> None:
        """Remove the folder and drop the lock (idempotent)."""
        self._finalizer()


def sweep_staging(db_path: str | os.PathLike) -> list[Path]:
    """Remove the staging folders of the database at ``db_path`` that no live owner holds.

    Only directories named ``.<db>-<kind>-<12 hex>`` next to ``db_path`` are
    considered, and one is removed only while this call holds its lock (so its
    owner, in this or any other process, is gone). Returns what was removed.
    """
    db_path = Path(db_path)
    parent = db_path.parent
    pattern = _staging_pattern(db_path)
    try:
        entries = [e for e in os.scandir(parent) if pattern.fullmatch(e.name)]
    except FileNotFoundError:
        return []
    removed = []
    for entry in entries:
        if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
            continue  # not a folder we make
        folder = Path(entry.path)
        lock = folder / _LOCK_NAME
        try:
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                owner = "no owner recorded"
            except FileExistsError:
                fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW)
                owner = None
        except OSError:
            continue  # removed meanwhile, or not a lock file we can open: leave it
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    continue  # a live owner holds it
                raise
            if os.fstat(fd).st_nlink == 0:
                continue  # another sweep removed it while we waited
            if owner is None:
                owner = os.pread(fd, 4096, 0).decode("utf-8", "replace") or "owner not recorded"
            size = 0
            for p in folder.rglob("*"):
                try:
                    if p.is_file() and not p.is_symlink():
                        size += p.stat().st_size
                except OSError:
                    pass
            shutil.rmtree(folder, ignore_errors=True)
            if folder.exists():
                log.warning("could not fully remove abandoned staging folder %s", folder)
            else:
                removed.append(folder)
                log.info("removed abandoned staging folder %s (%d bytes; its owner %s is gone)", folder, size, owner)
        finally:
            os.close(fd)
    return removed


def _missing_dirs(path: Path) -> list[Path]:
    """``path`` and those of its parents that do not exist yet, deepest first."""
    out = []
    p = Path(path)
    while not p.exists() and p != p.parent:
        out.append(p)
        p = p.parent
    return out


def remove_created_dirs(backends: list["RocksDBStateBackend"]) -> None:
    """After a failed restore: close each backend, remove its database, then remove the folders
    the backends created for them (``state_dir/rocksdb/`` on a first run) where they are empty
    again, deepest first, so the state directory is left as the restore found it."""
    created: set[Path] = set()
    for backend in backends:
        backend.close()
        _wipe_rocksdb_dir(backend.path)
        created.add(backend.path)  # its database is gone: an empty folder of that name is no use either
        created.update(getattr(backend, "created_dirs", ()))
    for d in sorted(created, key=lambda p: len(p.parts), reverse=True):
        try:
            d.rmdir()
        except OSError:
            pass  # not empty (the user's files, another job's databases) or already gone


def _wipe_rocksdb_dir(path: Path) -> None:
    """Remove a previous RocksDB instance at ``path``; refuse to touch anything else."""
    if not path.exists():
        return
    entries = list(path.iterdir())
    if not entries:
        return
    if not (path / "CURRENT").is_file():
        raise RestoreError(f"{path} exists and is not a RocksDB directory; refusing to overwrite it")
    shutil.rmtree(path)
