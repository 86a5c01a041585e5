"""The byte layout of the engine's RocksDB state (format version 1): raw keys, raw values, the one chunked scan.

The RocksDB backend (:mod:`explorer.engine.backends.rocksdb`) writes this
layout and the readers of its native files (:mod:`.native`, :mod:`.columns`,
:mod:`.encode`, :mod:`explorer.engine.checkpoint.sst_view`) read it; this
module is its one description and its one row-by-row codec.

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
``TtlSerializer`` does; ``value`` is the state's declared type's bytes,
:meth:`~explorer.format.types.TypeInfo.encode`)::

    value / reducing / aggregating   [ts] value
    list                             [ts] element ( , [ts] element )*    (one RocksDB value per key)
    map (one RocksDB entry per key)  [ts] null-flag(0|1) [value]

Lists separate their elements with one ``,`` byte, Flink's list layout (the
delimiter of RocksDB's StringAppend merge operator). Map values carry a null
flag (Flink's ``RocksDBMapState`` does the same), because ``map[k] = None``
is allowed. The default column family holds only metadata, under keys that
start with ``0xFF`` (above every key-group prefix): the format version
(:data:`META_FORMAT`: :data:`FORMAT_NAME`, :data:`FORMAT_VERSION`, the max
parallelism, the prefix width), and each state's descriptor as JSON under
:data:`META_STATE` + its name, so that a native checkpoint describes itself.

Rows, here and in every reader of this layout, are
``(key_group, key, namespace, user_key_or_list_index, value, last_access_ms)``.
"""

from __future__ import annotations

import itertools
import struct
from typing import Any, Callable, Iterable, Iterator

from ...errors import SerializationError, SnapshotFormatError
from ..keycodec import decode_key

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "LIST_DELIMITER",
    "META_FORMAT",
    "META_STATE",
    "NONE_NAMESPACE",
    "SCAN_CHUNK",
    "TS",
    "decode_elements",
    "decode_map_value",
    "decode_rows",
    "decode_value",
    "element_spans",
    "encode_elements",
    "encode_map_value",
    "encode_value",
    "key_group_bounds",
    "key_group_prefix_bytes",
    "scan",
    "split_address",
]

#: version of the layout described above
FORMAT_VERSION = 1
FORMAT_NAME = "state-explorer-rocksdb"
#: metadata keys in the default column family (above every key-group prefix)
META_FORMAT = b"\xffexplorer/format"
META_STATE = b"\xffexplorer/state/"

#: the last-access time before a value (TTL states)
TS = struct.Struct(">q")
LIST_DELIMITER = b","
_NULL, _PRESENT = b"\x00", b"\x01"
#: ``encode_key(None)``: the default namespace
NONE_NAMESPACE = b"\x01"
#: entries one scan step reads before it drops its RocksDB iterator
SCAN_CHUNK = 2048


def key_group_prefix_bytes(max_parallelism: int) -> int:
    """Width of the key-group prefix: 1 byte up to max parallelism 128, else 2."""
    return 2 if max_parallelism > 128 else 1


def key_group_bounds(first: int, last: int, prefix_bytes: int) -> tuple[bytes, bytes]:
    """``[lo, hi)`` raw-key bounds of the key groups ``first..last`` (inclusive)."""
    return int(first).to_bytes(prefix_bytes, "big"), (int(last) + 1).to_bytes(prefix_bytes, "big")


def split_address(raw: bytes, prefix_bytes: int) -> tuple[int, Any, Any, int]:
    """(key_group, key, namespace, position after the namespace) of a raw key."""
    kg = int.from_bytes(raw[:prefix_bytes], "big")
    key, pos = decode_key(raw, prefix_bytes)
    ns, pos = decode_key(raw, pos)
    return kg, key, ns, pos


def scan(column_family: Callable[[], Any], lo: bytes, hi: bytes | None, values: bool = True,
         chunk: int = SCAN_CHUNK, bulk: bool = False) -> Iterator[tuple[bytes, Any]]:
    """``(raw_key, raw_value)`` of the keys in ``[lo, hi)`` (no upper bound when ``hi`` is None),
    ``raw_value`` None when ``values`` is false: the one range scan of this layout.

    Read ``chunk`` entries at a time from a fresh iterator that is dropped before
    the entries are yielded: a live rocksdict iterator keeps the database open
    (and pins its files). ``column_family()`` gives the family to read; it is
    called again for every chunk, so a caller can swap in a reopened handle.
    ``bulk`` is for one pass over everything (a snapshot): large readahead, and
    the blocks read are kept out of the block cache the job uses.
    """
    from rocksdict import ReadOptions

    while True:
        cf = column_family()
        ro = ReadOptions()
        if hi is not None:
            ro.set_iterate_upper_bound(hi)
        if bulk:
            ro.fill_cache(False)
            ro.set_readahead_size(4 << 20)
        if values:
            it = cf.items(from_key=lo, read_opt=ro)
            got = list(itertools.islice(it, chunk))
        else:
            it = cf.keys(from_key=lo, read_opt=ro)
            got = [(k, None) for k in itertools.islice(it, chunk)]
        del it
        yield from got
        if len(got) < chunk:
            return
        lo = got[-1][0] + b"\x00"  # the smallest key after the last one read


# --- values, row by row (the column-wise codecs are in .columns and .encode) ----------------------
def _encode_into(info: Any, value: Any, out: bytearray, name: str) -> None:
    try:
        info.encode(value, out)
    except SerializationError:
        raise
    except Exception as exc:
        raise SerializationError(
            f"state {name!r}: cannot store {type(value).__name__} {value!r:.80} as {info.name}: {exc}"
        ) from exc


def _start(ttl: bool, entry: Any) -> tuple[Any, bytearray]:
    """The value of an entry (``(value, ts)`` with TTL) and a buffer holding its ts, if any."""
    if ttl:
        value, ts = entry
        return value, bytearray(TS.pack(ts))
    return entry, bytearray()


def encode_value(info: Any, ttl: bool, entry: Any, name: str) -> bytes:
    """A value-state entry (value, or ``(value, ts)`` with TTL) as stored bytes."""
    value, out = _start(ttl, entry)
    _encode_into(info, value, out, name)
    return bytes(out)


def decode_value(info: Any, ttl: bool, raw: bytes) -> Any:
    """The inverse of :func:`encode_value`."""
    if ttl:
        return info.decode(raw, 8)[0], TS.unpack_from(raw)[0]
    return info.decode(raw, 0)[0]


def encode_map_value(info: Any, ttl: bool, entry: Any, name: str) -> bytes:
    """A map entry's value (None allowed; ``(value, ts)`` with TTL) as stored bytes."""
    value, out = _start(ttl, entry)
    if value is None:
        out += _NULL
    else:
        out += _PRESENT
        _encode_into(info, value, out, name)
    return bytes(out)


def decode_map_value(info: Any, ttl: bool, raw: bytes) -> Any:
    """The inverse of :func:`encode_map_value`."""
    if ttl:
        v = None if raw[8] == 0 else info.decode(raw, 9)[0]
        return v, TS.unpack_from(raw)[0]
    return None if raw[0] == 0 else info.decode(raw, 1)[0]


def encode_elements(info: Any, ttl: bool, elements: list[Any], name: str) -> bytes:
    """List elements (each ``(value, ts)`` with TTL) as one stored list value."""
    out = bytearray()
    for i, e in enumerate(elements):
        if i:
            out += LIST_DELIMITER
        if ttl:
            value, ts = e
            out += TS.pack(ts)
        else:
            value = e
        _encode_into(info, value, out, name)
    return bytes(out)


def element_spans(info: Any, ttl: bool, raw: bytes, name: str) -> list[tuple[int, int]]:
    """(start, end) of each element's bytes (including its ts) in a stored list."""
    spans = []
    pos, n = 0, len(raw)
    dec = info.decode
    skip = 8 if ttl else 0
    while pos < n:
        start = pos
        _, pos = dec(raw, pos + skip)
        spans.append((start, pos))
        if pos < n:
            if raw[pos : pos + 1] != LIST_DELIMITER:
                raise SerializationError(f"state {name!r}: corrupt list bytes at {pos} (no delimiter)")
            pos += 1
    return spans


def decode_elements(info: Any, ttl: bool, raw: bytes) -> list[Any]:
    """The inverse of :func:`encode_elements`."""
    out = []
    pos, n = 0, len(raw)
    dec = info.decode
    while pos < n:
        if ttl:
            ts = TS.unpack_from(raw, pos)[0]
            v, pos = dec(raw, pos + 8)
            out.append((v, ts))
        else:
            v, pos = dec(raw, pos)
            out.append(v)
        pos += 1  # the delimiter (or past the end)
    return out


def decode_rows(entries: Iterable[tuple[bytes, bytes]], kind: str, ttl: bool, prefix_bytes: int, info: Any,
                name: str) -> Iterator[tuple]:
    """Raw ``(key, value)`` entries of one state of ``kind`` (a ``StateKind`` value) decoded one by
    one into rows ``(key_group, key, namespace, user_key_or_index, value, last_access_ms)``; a list
    value gives one row per element."""
    dec = info.decode
    skip = 8 if ttl else 0
    unpack = TS.unpack_from
    delimiter = LIST_DELIMITER[0]
    for rk, rv in entries:
        kg, key, ns, pos = split_address(rk, prefix_bytes)
        ts = unpack(rv, 0)[0] if ttl else None
        if kind == "map":
            uk = decode_key(rk, pos)[0]
            v = None if rv[skip] == 0 else dec(rv, skip + 1)[0]
            yield (kg, key, ns, uk, v, ts)
        elif kind == "list":
            p, n, i = 0, len(rv), 0
            while p < n:
                ets = unpack(rv, p)[0] if ttl else None
                v, p = dec(rv, p + skip)
                yield (kg, key, ns, i, v, ets)
                i += 1
                if p < n and rv[p] != delimiter:
                    raise SnapshotFormatError(f"state {name!r}: corrupt list bytes at {p} (no delimiter)")
                p += 1
        else:
            yield (kg, key, ns, None, dec(rv, skip)[0], ts)
