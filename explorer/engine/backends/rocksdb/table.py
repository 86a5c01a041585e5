"""A keyed state of the RocksDB backend: one column family, and this batch's writes buffered in front of it.

Keys and values are stored in the byte layout of
:mod:`explorer.format.rocksdb.layout` (its codec, bound to the state's
declared type; never pickled).

The per-batch write buffer
==========================

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
``WriteBatch`` across all states (:meth:`.backend.RocksDBStateBackend.flush_buffers`)
and the read cache dropped:

* at the end of every batch of the operator (records, the timers fired by a
  watermark or by processing time: :meth:`.backend.RocksDBStateBackend.end_batch`), so
  at most one batch's touched keys wait in memory; also early when a buffer
  reaches :data:`BUFFER_ENTRIES` entries;
* before anything that reads or writes RocksDB directly: every access to a
  table's ``_cf`` (scans, ``rows``/``addresses``/``map_items``, range deletes,
  bulk loads, the checkpoint code that reads a family), the backend's
  ``_write`` (TTL sweeps, map clears), :meth:`.backend.RocksDBStateBackend.flush`,
  :meth:`~.backend.RocksDBStateBackend.native_checkpoint` (so full, incremental and
  savepoint captures see every write), :meth:`~.backend.RocksDBStateBackend.close`,
  size estimates and state drops.

RocksDB stays the store of record. Across batches each table keeps a write-through
cache (``_c``, at most :data:`CACHE_ENTRIES` raw keys, then emptied): when a batch's
writes are applied, the bytes written (None for deletes) and the batch's reads go into
it, so the next batches read hot keys without RocksDB and get exactly what RocksDB
holds, since every write of the backend's own passes through the buffer. Anything
that reads or writes RocksDB directly (``_cf``, ``_write``, reopening) empties it.
Flink's backend has no such buffer (it calls RocksDB per access through JNI,
which is cheaper than a Python binding call). Durability is unchanged: with
the WAL off, unflushed memtables and the buffer are both lost in a crash, and
recovery comes from the last checkpoint, which always includes the buffer.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Iterator

from rocksdict import Rdict

from ....errors import SerializationError, StateMigrationError
from ....format.keycodec import decode_key, encode_key, prefix_successor
from ....format.rocksdb.layout import (
    LIST_DELIMITER,
    NONE_NAMESPACE,
    SCAN_CHUNK,
    TS,
    decode_elements,
    decode_map_value,
    decode_rows,
    decode_value,
    element_spans,
    encode_elements,
    encode_map_value,
    encode_value,
    scan,
    split_address,
)
from ....format.ttl import is_expired
from ....keygroups import KeyGroupRange
from ...state import StateDescriptor, StateKind
from ..base import Row, StateTable

if TYPE_CHECKING:
    from .backend import RocksDBStateBackend

__all__ = ["BUFFER_ENTRIES", "CACHE_ENTRIES", "RocksDBStateTable"]

#: writes (and, separately, cached reads) a state table buffers before applying them early
#: (otherwise they are applied at the end of each batch)
BUFFER_ENTRIES = 65536
#: raw keys a state table's write-through cache holds across batches before it is emptied
CACHE_ENTRIES = 1 << 17
_MISS = object()


class KeyCache:
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
        #: what RocksDB holds at raw keys read or written in earlier batches (None: absent), exact
        #: because every write of this backend passes through ``_w`` (see the module docstring)
        self._c: dict[bytes, Any] = {}
        self._bind(descriptor)

    @property
    def _cf(self) -> Rdict:
        """The column family, for anything that reads or writes RocksDB directly (scans,
        range deletes, bulk loads, the checkpoint code): the batch's buffered writes are
        applied first, so such readers see every write, and the read cache is dropped."""
        self._backend.flush_buffers()
        self._c = {}  # the caller may write RocksDB directly
        return self._raw

    @_cf.setter
    def _cf(self, cf: Any) -> None:
        self._raw = cf
        self._c = {}

    def _read(self, k: bytes) -> Any:
        """Stored bytes at ``k`` (None if absent): this batch's write, else a cached read, else RocksDB."""
        v = self._w.get(k, _MISS)
        if v is not _MISS:
            return v
        r = self._r
        v = r.get(k, _MISS)
        if v is not _MISS:
            return v
        v = self._c.get(k, _MISS)
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
                self._c.pop(k, None)
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
            c.none_addr = p + NONE_NAMESPACE
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
        return split_address(raw, self._kg_bytes)

    # --- values (the codec of :mod:`explorer.format.rocksdb.layout`, bound to this state) ------------
    def _encode_value(self, entry: Any) -> bytes:
        return encode_value(self._info, self.has_ttl, entry, self.name)

    def _decode_value(self, raw: bytes) -> Any:
        return decode_value(self._info, self.has_ttl, raw)

    def _encode_elements(self, elements: list[Any]) -> bytes:
        return encode_elements(self._info, self.has_ttl, elements, self.name)

    def _element_spans(self, raw: bytes) -> list[tuple[int, int]]:
        return element_spans(self._info, self.has_ttl, raw, self.name)

    def _decode_elements(self, raw: bytes) -> list[Any]:
        return decode_elements(self._info, self.has_ttl, raw)

    def _encode_map_value(self, entry: Any) -> bytes:
        return encode_map_value(self._info, self.has_ttl, entry, self.name)

    def _decode_map_value(self, raw: bytes) -> Any:
        return decode_map_value(self._info, self.has_ttl, raw)

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

    def get_many(self, key_groups, keys, namespace=None):
        """``get`` of many keys: what this batch wrote or read already, and the rest from RocksDB
        in one multi-get (cached like single reads)."""
        kind = self.kind
        if kind is StateKind.MAP:
            return super().get_many(key_groups, keys, namespace)
        address, w, r, c = self._address, self._w, self._r, self._c
        addrs = [address(g, k, namespace) for g, k in zip(key_groups, keys)]
        raws = []
        missing = []
        for i, a in enumerate(addrs):
            v = w.get(a, _MISS)
            if v is _MISS:
                v = r.get(a, _MISS)
                if v is _MISS:
                    v = c.get(a, _MISS)
                    if v is _MISS:
                        missing.append(i)
            raws.append(v)
        if missing:
            got = self._raw.get([addrs[i] for i in missing])
            if len(r) + len(missing) >= BUFFER_ENTRIES:
                self._backend.flush_buffers()
                r = self._r
            for i, v in zip(missing, got):
                raws[i] = v
                r[addrs[i]] = v
            self._backend._buffered.add(self)
        if kind is StateKind.LIST:
            dec = self._decode_elements
            return [None if not raw else (dec(bytes(raw) if raw.__class__ is bytearray else raw) or None) for raw in raws]
        dec = self._decode_value
        return [None if raw is None else dec(raw) for raw in raws]

    def append_many(self, key_groups, keys, lists, namespace=None, handed_over=False):
        """``append`` of each list; the keys not read or written in this batch yet are read in
        one multi-get first."""
        address, w, r, c = self._address, self._w, self._r, self._c
        addrs = [address(g, k, namespace) for g, k in zip(key_groups, keys)]
        todo = [a for a, e in zip(addrs, lists) if e and a not in w and a not in r and a not in c]
        if len(todo) > 1:
            got = self._raw.get(todo)
            if len(r) + len(todo) >= BUFFER_ENTRIES:
                self._backend.flush_buffers()
                r = self._r
            r.update(zip(todo, got))
            self._backend._buffered.add(self)
        append = self.append
        for g, k, e in zip(key_groups, keys, lists):
            if e:
                append(g, k, namespace, e)

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
            cur += LIST_DELIMITER
            cur += new
            return
        if cur is _MISS:
            cur = self._r.get(k, _MISS)
            if cur is _MISS:
                cur = self._c.get(k, _MISS)
                if cur is _MISS:
                    cur = self._raw.get(k)
        if cur:
            buf = bytearray(cur)
            buf += LIST_DELIMITER
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
        """``(raw_key, raw_value_or_None)`` for keys in ``[lo, hi)``: :func:`~explorer.format.rocksdb.layout.scan`,
        re-reading ``_cf`` for every chunk (a closed backend swaps in the reopened handle)."""
        return scan(lambda: self._cf, lo, hi, values)

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
        yield from decode_rows(self._scan(*r), self.kind.value, self.has_ttl, self._kg_bytes, self._info, self.name)

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
            if len(puts) >= SCAN_CHUNK:
                self._backend._write(self, puts, [])
                puts = []
        for addr, elems in lists.items():
            new = self._encode_elements(elems)
            cur = self._cf.get(addr)
            puts.append((addr, new if not cur else cur + LIST_DELIMITER + new))
            if len(puts) >= SCAN_CHUNK:
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
        (:func:`explorer.format.rocksdb.encode.encode_batch`); those are written into
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
        unpack = TS.unpack_from
        for rk, rv in self._scan(*r):
            seen += 1
            if clock is not None and requery_every and seen % requery_every == 0:
                now_ms = clock.now_ms()
            if is_list:
                spans = self._element_spans(rv)
                alive = [(s, e) for s, e in spans if not is_expired(unpack(rv, s)[0], ttl_ms, now_ms)]
                if len(alive) == len(spans):
                    continue
                removed += len(spans) - len(alive)
                if alive:
                    puts.append((rk, LIST_DELIMITER.join(rv[s:e] for s, e in alive)))
                else:
                    deletes.append(rk)
            elif is_expired(unpack(rv, 0)[0], ttl_ms, now_ms):
                deletes.append(rk)
                removed += 1
        if deletes or puts:
            self._backend._write(self, puts, deletes)
        return removed

