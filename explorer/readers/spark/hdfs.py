"""The HDFS-backed state store's files, read without a JVM.

Facts (from Spark's ``HDFSBackedStateStoreProvider``, ``UnsafeRow`` and
``StateSchemaCompatibilityChecker``; no code copied):

* ``state/<op>/<part>[/<store>]/<v>.delta`` holds what micro-batch ``v - 1``
  changed, ``<v>.snapshot`` the whole store at ``v``. The state at ``v`` is the
  newest snapshot at or below ``v`` plus the deltas after it, in order.
* Both are compressed with Spark's ``lz4`` codec: lz4-java's block stream, blocks of
  ``"LZ4Block"``, a token (method ``0x10`` raw / ``0x20`` LZ4, low nibble the
  level), little-endian compressed length, decompressed length and checksum,
  then the block; an empty block ends the stream.
* The stream is records of a big-endian int key size, the key, an int value size
  (``-1``: the key was removed) and the value; a key size of ``-1`` ends it.
* Keys and values are ``UnsafeRow``s: a null bit set of ``ceil(n / 64)`` 8-byte
  words, one 8-byte little-endian slot per field (fixed-size values in place;
  strings, binaries and nested rows as ``offset << 32 | size`` from the row's
  start), then the variable-length data.
* ``<part>[/<store>]/_metadata/schema``: ``writeUTF("v2")``, then for the key and
  the value a chunk count and that many ``writeUTF`` chunks of the schema's JSON.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa

from ...errors import SnapshotCorruptError, SnapshotFormatError
from ...format.checksums import verify_hadoop_crc
from .keys import unique_names

__all__ = ["hdfs_state_table", "json_leaf_types", "lz4_block_stream", "read_hdfs_store", "read_schema"]

_MAGIC = b"LZ4Block"
_HEADER = len(_MAGIC) + 13
_FILE = re.compile(r"^(\d+)\.(delta|snapshot)$")


def _lz4_block(src: bytes, out_len: int, where: str) -> bytes:
    """One raw LZ4 block (sequences of literals and back-references) decompressed."""
    out = bytearray()
    i, n = 0, len(src)
    while i < n:
        token = src[i]
        i += 1
        lit = token >> 4
        if lit == 15:
            while True:
                b = src[i]
                i += 1
                lit += b
                if b != 255:
                    break
        out += src[i:i + lit]
        i += lit
        if i >= n:
            break
        offset = src[i] | (src[i + 1] << 8)
        i += 2
        if offset == 0 or offset > len(out):
            raise SnapshotCorruptError(f"{where}: LZ4 back-reference {offset} outside the {len(out)} bytes so far")
        mlen = token & 15
        if mlen == 15:
            while True:
                b = src[i]
                i += 1
                mlen += b
                if b != 255:
                    break
        mlen += 4
        start = len(out) - offset
        if mlen <= offset:
            out += out[start:start + mlen]
        else:  # overlapping copy: the pattern repeats
            chunk = bytes(out[start:])
            reps, rest = divmod(mlen, offset)
            out += chunk * reps + chunk[:rest]
    if len(out) != out_len:
        raise SnapshotCorruptError(f"{where}: an LZ4 block decompressed to {len(out)} bytes, its header says {out_len}")
    return bytes(out)


def lz4_block_stream(data: bytes, where: str = "<bytes>") -> bytes:
    """The bytes of an lz4-java block stream (Spark's ``lz4`` codec)."""
    out = []
    i = 0
    while i < len(data):
        if data[i:i + len(_MAGIC)] != _MAGIC:
            raise SnapshotFormatError(f"{where}: expected an LZ4 block ({_MAGIC!r}) at byte {i}, found "
                                      f"{data[i:i + 8]!r}; is the store's compression codec lz4?")
        token = data[i + 8]
        clen, dlen, _checksum = struct.unpack_from("<iii", data, i + 9)
        i += _HEADER
        if dlen == 0:  # the end mark
            break
        body = data[i:i + clen]
        i += clen
        method = token & 0xF0
        if method == 0x10:
            out.append(body)
        elif method == 0x20:
            out.append(_lz4_block(body, dlen, where))
        else:
            raise SnapshotFormatError(f"{where}: unknown LZ4 block method {method:#x} (known: 0x10 raw, 0x20 lz4)")
    return b"".join(out)


def read_schema(path: Path) -> tuple[dict, dict]:
    """(key schema, value schema) as Spark's JSON of a ``_metadata/schema`` file (version 2)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SnapshotFormatError(f"{path}: cannot read the state schema ({exc.strerror})") from exc
    verify_hadoop_crc(path, data)
    i = 0

    def utf() -> str:
        nonlocal i
        (n,) = struct.unpack_from(">H", data, i)
        s = data[i + 2:i + 2 + n].decode("utf-8")
        i += 2 + n
        return s

    version = utf()
    if version != "v2":
        raise SnapshotFormatError(f"{path}: unknown state schema version {version!r} (known: 'v2')")
    out = []
    for _ in range(2):
        (chunks,) = struct.unpack_from(">i", data, i)
        i += 4
        out.append(json.loads("".join(utf() for _ in range(chunks))))
    return out[0], out[1]


_FIXED = {"long": "q", "integer": "i", "short": "h", "byte": "b", "double": "d", "float": "f", "boolean": "?",
          "timestamp": "q", "timestamp_ntz": "q", "date": "i"}
_ARROW = {"long": pa.int64(), "integer": pa.int32(), "short": pa.int16(), "byte": pa.int8(), "double": pa.float64(),
          "float": pa.float32(), "boolean": pa.bool_(), "string": pa.string(), "binary": pa.binary(),
          "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us"), "date": pa.date32(),
          "void": pa.null()}


def _arrow_type(t: Any, where: str) -> pa.DataType:
    if isinstance(t, dict) and t.get("type") == "struct":
        names = unique_names([f["name"] for f in t["fields"]])
        return pa.struct([pa.field(n, _arrow_type(f["type"], where)) for n, f in zip(names, t["fields"])])
    if t in _ARROW:
        return _ARROW[t]
    raise SnapshotFormatError(f"{where}: state column type {t!r} is not read without Spark yet "
                              f"(known: {sorted(_ARROW)} and structs); read it through Spark's data source")


def _decode_row(buf: bytes, base: int, fields: list[dict]) -> list:
    """One UnsafeRow at ``buf[base:]`` as a list of its values, by position (names may repeat)."""
    n = len(fields)
    bitset = ((n + 63) // 64) * 8
    row: list[Any] = [None] * n
    for j, f in enumerate(fields):
        t = f["type"]
        name = j
        if buf[base + (j >> 3)] >> (j & 7) & 1:
            continue
        slot = base + bitset + 8 * j
        if t == "void":
            continue
        if isinstance(t, dict):
            (word,) = struct.unpack_from("<q", buf, slot)
            row[name] = _decode_row(buf, base + (word >> 32), t["fields"])
        elif t in ("string", "binary"):
            (word,) = struct.unpack_from("<q", buf, slot)
            off, size = word >> 32, word & 0xFFFFFFFF
            raw = buf[base + off:base + off + size]
            row[name] = raw.decode("utf-8") if t == "string" else bytes(raw)
        else:
            (row[name],) = struct.unpack_from("<" + _FIXED[t], buf, slot)
    return row


_PARTITIONING_TYPES = {"long": "long", "integer": "int", "short": "short", "byte": "byte", "double": "double",
                      "float": "float", "boolean": "boolean", "string": "string", "binary": "binary",
                      "timestamp": "timestamp", "timestamp_ntz": "timestamp", "date": "date"}


def json_leaf_types(t: Any) -> list[str]:
    """Spark type names of a schema's leaves, in order (nested structs flattened), for the partitioning."""
    if isinstance(t, dict) and t.get("type") == "struct":
        return [x for f in t["fields"] for x in json_leaf_types(f["type"])]
    return [_PARTITIONING_TYPES.get(t, str(t))]


def _store_dir(ckpt: Path, op: int, part: int, store: str) -> Path:
    d = Path(ckpt) / "state" / str(op) / str(part)
    return d if store == "default" else d / store


def _records(f: Path, rows: dict[bytes, bytes | None]) -> None:
    raw = f.read_bytes()
    verify_hadoop_crc(f, raw)
    data = lz4_block_stream(raw, str(f))
    i = 0
    while True:
        if i + 4 > len(data):
            raise SnapshotCorruptError(f"{f}: the record stream ends at byte {i} without its end mark")
        (ks,) = struct.unpack_from(">i", data, i)
        i += 4
        if ks == -1:
            return
        if ks < 0 or i + ks + 4 > len(data):
            raise SnapshotCorruptError(f"{f}: a record at byte {i - 4} has a key of {ks} bytes; expected a length "
                                       f"that fits in the {len(data) - i} bytes left (or -1, the end mark)")
        key = data[i:i + ks]
        i += ks
        (vs,) = struct.unpack_from(">i", data, i)
        i += 4
        if vs > len(data) - i:
            raise SnapshotCorruptError(f"{f}: a record at byte {i - 8 - ks} has a value of {vs} bytes; expected at "
                                       f"most the {len(data) - i} bytes left")
        if vs < 0:
            rows.pop(key, None)
        else:
            rows[key] = data[i:i + vs]
            i += vs


def read_hdfs_store(ckpt: Path, op: int, part: int, version: int, store: str = "default") -> tuple[list[list], list[list]]:
    """(keys, values) of one HDFS-backed store partition at ``version`` (batch + 1), as lists of field values."""
    d = _store_dir(ckpt, op, part, store)
    files: dict[int, dict[str, Path]] = {}
    for f in d.iterdir() if d.is_dir() else []:
        m = _FILE.match(f.name)
        if m:
            files.setdefault(int(m.group(1)), {})[m.group(2)] = f
    snaps = [v for v, k in files.items() if "snapshot" in k and v <= version]
    start = max(snaps) if snaps else 0
    missing = [v for v in range(start + 1, version + 1) if "delta" not in files.get(v, {})]
    if (start == 0 and version > 0 and not files) or missing:
        raise SnapshotFormatError(
            f"{d}: the HDFS-backed store at version {version} needs "
            f"{', '.join(f'{v}.delta' for v in missing) or 'its files'}, which are not there")
    rows: dict[bytes, bytes | None] = {}
    if start:
        _records(files[start]["snapshot"], rows)
    for v in range(start + 1, version + 1):
        _records(files[v]["delta"], rows)
    # Spark writes the schema into partition 0's folder only
    key_schema, value_schema = read_schema(_store_dir(ckpt, op, 0, store) / "_metadata" / "schema")
    keys = [_decode_row(k, 0, key_schema["fields"]) for k in rows]
    values = [_decode_row(v, 0, value_schema["fields"]) for v in rows.values()]
    return keys, values


def hdfs_state_table(ckpt: Path, op: int, partitions: int | list[int], batch_id: int,
                     store: str = "default") -> pa.Table:
    """``partition_id, key, value`` of one operator's store at ``batch_id``, like Spark's state data source
    (``partitions``: how many, or which)."""
    d = _store_dir(ckpt, op, 0, store)
    key_schema, value_schema = read_schema(d / "_metadata" / "schema")
    kt, vt = _arrow_type(key_schema, str(d)), _arrow_type(value_schema, str(d))
    parts, keys, values = [], [], []
    for p in range(partitions) if isinstance(partitions, int) else partitions:
        k, v = read_hdfs_store(ckpt, op, p, batch_id + 1, store)
        parts += [p] * len(k)
        keys += k
        values += v
    # positional: value names may repeat (aggregation buffers), so build the struct from its columns
    return pa.table({
        "partition_id": pa.array(parts, pa.int32()),
        "key": _struct(keys, kt),
        "value": _struct(values, vt),
    })


def _struct(rows: list[list], t: pa.StructType) -> pa.StructArray:
    cols = []
    for i in range(t.num_fields):
        f = t.field(i)
        vals = [None if r is None else r[i] for r in rows]
        if pa.types.is_struct(f.type):
            cols.append(_struct(vals, f.type))
        elif pa.types.is_null(f.type):
            cols.append(pa.nulls(len(vals)))
        elif pa.types.is_timestamp(f.type):
            cols.append(pa.array(vals, pa.int64()).cast(f.type))
        elif pa.types.is_date32(f.type):
            cols.append(pa.array(vals, pa.int32()).cast(f.type))
        else:
            cols.append(pa.array(vals, f.type))
    return pa.StructArray.from_arrays(cols, fields=[t.field(i) for i in range(t.num_fields)])
