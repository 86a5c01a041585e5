"""The HDFS-backed state store's files, read without a JVM.

Facts (from Spark's ``HDFSBackedStateStoreProvider``, ``UnsafeRow`` and
``StateSchemaCompatibilityChecker``; no code copied):

* ``state/<op>/<part>[/<store>]/<v>.delta`` holds what micro-batch ``v - 1``
  changed, ``<v>.snapshot`` the whole store at ``v``. The state at ``v`` is the
  newest snapshot at or below ``v`` plus the deltas after it, in order.
* Both are compressed with the store's codec (:func:`spark_stream`; ``lz4`` by default:
  ``zstd`` files are plain zstd frames, ``snappy`` snappy-java's chunks). lz4 is lz4-java's block stream, blocks of
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


import cramjam
import numpy as np
import xxhash

from ...errors import SnapshotCorruptError, SnapshotFormatError, VersionGoneError
from ...format.sst.file import MAX_EXPANSION
from ...format.untrusted import Roots, excerpt
from .layout import verified_bytes

__all__ = ["lz4_block_stream", "read_hdfs_store", "read_schema", "records", "spark_stream", "store_dir"]

_MAGIC = b"LZ4Block"
_HEADER = len(_MAGIC) + 13
_FILE = re.compile(r"^(\d+)\.(delta|snapshot)$")


_XXH_SEED = 0x9747B28C  # lz4-java's default seed for the block checksum


def lz4_block_stream(data: bytes, where: str = "<bytes>") -> bytes:
    """The bytes of an lz4-java block stream (Spark's ``lz4`` codec), each block's checksum verified (the low
    28 bits of XXH32 of its decompressed bytes, seed ``0x9747B28C``)."""
    out = []
    i = 0
    while i < len(data):
        if data[i:i + len(_MAGIC)] != _MAGIC:
            raise SnapshotFormatError(f"{where}: expected an LZ4 block ({_MAGIC!r}) at byte {i}, found "
                                      f"{data[i:i + 8]!r}; is the store's compression codec lz4?")
        if i + _HEADER > len(data):
            raise SnapshotCorruptError(f"{where}: the LZ4 block header at byte {i} is cut off at {len(data)} bytes")
        token = data[i + 8]
        clen, dlen, checksum = struct.unpack_from("<iii", data, i + 9)
        i += _HEADER
        if dlen == 0:  # the end mark
            break
        body = data[i:i + clen]
        if clen < 0 or dlen < 0 or len(body) != clen:
            raise SnapshotCorruptError(f"{where}: an LZ4 block at byte {i - _HEADER} says {clen} bytes "
                                       f"({dlen} decompressed), the file has {len(body)} left")
        if dlen > MAX_EXPANSION * clen + 64:  # the decompressor would allocate dlen first
            raise SnapshotCorruptError(f"{where}: an LZ4 block at byte {i - _HEADER} of {clen} bytes states {dlen} "
                                       f"decompressed; expected at most {MAX_EXPANSION * clen + 64}")
        i += clen
        method = token & 0xF0
        if method == 0x10:
            block = body
        elif method == 0x20:
            try:
                block = bytes(cramjam.lz4.decompress_block(body, output_len=dlen))
            except Exception as exc:  # noqa: BLE001 - cramjam raises its own DecompressionError
                raise SnapshotCorruptError(f"{where}: the LZ4 block at byte {i - clen - _HEADER} does not "
                                           f"decompress ({exc})") from exc
        else:
            raise SnapshotFormatError(f"{where}: unknown LZ4 block method {method:#x} (known: 0x10 raw, 0x20 lz4)")
        if len(block) != dlen:
            raise SnapshotCorruptError(f"{where}: an LZ4 block decompressed to {len(block)} bytes, its header says "
                                       f"{dlen}")
        computed = xxhash.xxh32_intdigest(block, _XXH_SEED) & 0x0FFFFFFF
        if computed != checksum & 0x0FFFFFFF:
            raise SnapshotCorruptError(f"{where}: the LZ4 block at byte {i - clen - _HEADER} has checksum "
                                       f"{computed:#09x}, its header records {checksum & 0x0FFFFFFF:#09x} "
                                       "(the file is damaged)")
        out.append(block)
    return b"".join(out)


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_SNAPPY_MAGIC = b"\x82SNAPPY\x00"
_ZSTD_BLOCK_MAX = 128 * 1024  # the most one compressed zstd block decompresses to


def _zstd_size_bound(data: bytes, where: str) -> int:
    """The most a stream of zstd frames decompresses to, from its frame and block headers (RFC 8878): raw and
    RLE blocks state their size, a compressed block makes at most 128 KiB. Nothing is allocated before."""
    i, total, n = 0, 0, len(data)
    while i < n:
        if i + 8 <= n and data[i + 1:i + 4] == b"\x2a\x4d\x18" and data[i] & 0xF0 == 0x50:  # a skippable frame
            i += 8 + int.from_bytes(data[i + 4:i + 8], "little")
            continue
        if data[i:i + 4] != _ZSTD_MAGIC or i + 5 > n:
            raise SnapshotCorruptError(f"{where}: expected a zstd frame (28 b5 2f fd) at byte {i}, found "
                                       f"{data[i:i + 4].hex(' ')}")
        fhd = data[i + 4]
        single = fhd >> 5 & 1
        fcs = (0, 2, 4, 8)[fhd >> 6] or single
        i += 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3] + fcs
        while True:
            if i + 3 > n:
                raise SnapshotCorruptError(f"{where}: a zstd frame is cut off at byte {n}")
            head = int.from_bytes(data[i:i + 3], "little")
            kind, size = head >> 1 & 3, head >> 3
            i += 3
            if kind == 0:
                total, i = total + size, i + size
            elif kind == 1:
                total, i = total + size, i + 1
            elif kind == 2:
                total, i = total + _ZSTD_BLOCK_MAX, i + size
            else:
                raise SnapshotCorruptError(f"{where}: a zstd block at byte {i - 3} has the reserved type 3")
            if head & 1:
                break
        i += 4 if fhd >> 2 & 1 else 0
    return total


def _zstd_stream(data: bytes, where: str) -> bytes:
    out = np.empty(_zstd_size_bound(data, where), np.uint8)
    try:
        size = cramjam.zstd.decompress_into(data, out)
    except Exception as exc:  # noqa: BLE001 - cramjam raises its own DecompressionError
        raise SnapshotCorruptError(f"{where}: the zstd stream does not decompress ({exc})") from exc
    return out[:size].tobytes()


def _snappy_stream(data: bytes, where: str) -> bytes:
    """snappy-java's stream (Spark's ``snappy`` codec): its 16-byte header (magic, version, compatible
    version), then chunks of a big-endian int size and a raw snappy block."""
    out, i = [], 16
    while i < len(data):
        if i + 4 > len(data):
            raise SnapshotCorruptError(f"{where}: a snappy chunk header at byte {i} is cut off")
        (size,) = struct.unpack_from(">i", data, i)
        body = data[i + 4:i + 4 + size]
        if size < 0 or len(body) != size:
            raise SnapshotCorruptError(f"{where}: a snappy chunk at byte {i} says {size} bytes, the file has "
                                       f"{len(data) - i - 4} left")
        try:
            if cramjam.snappy.decompress_raw_len(body) > MAX_EXPANSION * size + 64:
                raise SnapshotCorruptError(f"{where}: a snappy chunk at byte {i} of {size} bytes states more "
                                           f"than {MAX_EXPANSION * size + 64} decompressed")
            out.append(bytes(cramjam.snappy.decompress_raw(body)))
        except SnapshotCorruptError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise SnapshotCorruptError(f"{where}: the snappy chunk at byte {i} does not decompress ({exc})") from exc
        i += 4 + size
    return b"".join(out)


def spark_stream(data: bytes, where: str = "<bytes>") -> bytes:
    """The bytes of a file written through Spark's state store codec (``spark.sql.streaming.stateStore.
    compression.codec``), told by its first bytes: ``lz4`` (lz4-java's blocks, checksums verified), ``zstd``
    (zstd-jni writes plain zstd frames), ``snappy`` (snappy-java's chunked stream)."""
    if data[:4] == _ZSTD_MAGIC:
        return _zstd_stream(data, where)
    if data[:8] == _SNAPPY_MAGIC:
        return _snappy_stream(data, where)
    return lz4_block_stream(data, where)


def read_schema(path: Path, roots: Roots | Path) -> tuple[dict, dict]:
    """(key schema, value schema) as Spark's JSON of a ``_metadata/schema`` file (version 2), a file inside
    ``roots``."""
    data = verified_bytes(Path(path), roots)
    i = 0

    def utf() -> str:
        nonlocal i
        (n,) = struct.unpack_from(">H", data, i)
        s = data[i + 2:i + 2 + n].decode("utf-8")
        i += 2 + n
        return s

    version = utf()
    if version != "v2":
        raise SnapshotFormatError(f"{path}: unknown state schema version {excerpt(version)} (known: 'v2')")
    out = []
    for _ in range(2):
        (chunks,) = struct.unpack_from(">i", data, i)
        i += 4
        out.append(json.loads("".join(utf() for _ in range(chunks))))
    return out[0], out[1]


def store_dir(ckpt: Path, op: int, part: int, store: str) -> Path:
    """The folder of one store partition (a join's stores are sub-folders)."""
    d = Path(ckpt) / "state" / str(op) / str(part)
    return d if store == "default" else d / store


def records(data: bytes, where: str, rows: dict[bytes, bytes | None], keep_deletes: bool = False,
            start: int = 0) -> None:
    """Apply a stream of ``int key size, key, int value size (-1: removed), value`` records (from byte
    ``start``) to ``rows``; a key size of -1 ends it (HDFS-backed deltas and snapshots, RocksDB changelogs of
    version 1). ``keep_deletes``: a removed key is kept as None (to replay later) instead of dropped.
    Where the records are is found by a numba walk (:mod:`.kernels`); the dict is filled in bulk."""
    from . import kernels

    buf = np.frombuffer(data, np.uint8)
    count, code, at = kernels.count_records(buf, start)
    if code == kernels.CUT:
        raise SnapshotCorruptError(f"{where}: the record stream ends at byte {at} without its end mark")
    if code != kernels.OK:
        raise SnapshotCorruptError(f"{where}: the record at byte {at} has a size that runs past the end of the "
                                   f"stream ({len(data)} bytes) or is negative")
    koff, klen, voff, vlen = (np.empty(count, np.int64) for _ in range(4))
    kernels.fill_records(buf, start, koff, klen, voff, vlen)
    keys = [data[a:a + n] for a, n in zip(koff.tolist(), klen.tolist())]
    vals = [data[a:a + n] if n >= 0 else None for a, n in zip(voff.tolist(), vlen.tolist())]
    prev = 0
    for d in np.flatnonzero(vlen < 0).tolist():  # removals: applied in their place among the puts
        rows.update(zip(keys[prev:d], vals[prev:d]))
        if keep_deletes:
            rows[keys[d]] = None
        else:
            rows.pop(keys[d], None)
        prev = d + 1
    rows.update(zip(keys[prev:], vals[prev:]))


def read_hdfs_store(ckpt: Path, op: int, part: int, version: int, store: str = "default",
                    roots: Roots | None = None) -> dict[bytes, bytes]:
    """The rows (``UnsafeRow`` key bytes -> value bytes) of one HDFS-backed store partition at ``version``
    (batch + 1): the newest snapshot at or below it plus the deltas after it, each file's checksums verified.
    ``roots``: where files may be read from (default: ``ckpt``)."""
    roots = Roots.of(ckpt) if roots is None else roots
    d = store_dir(ckpt, op, part, store)
    files: dict[int, dict[str, Path]] = {}
    for f in d.iterdir() if d.is_dir() else []:
        m = _FILE.match(f.name)
        if m:
            files.setdefault(int(m.group(1)), {})[m.group(2)] = f
    snaps = [v for v, k in files.items() if "snapshot" in k and v <= version]
    start = max(snaps) if snaps else 0
    missing = [v for v in range(start + 1, version + 1) if "delta" not in files.get(v, {})]
    if (start == 0 and version > 0 and not files) or missing:
        raise (VersionGoneError if files and min(files) > 1 and missing and max(missing) < min(files) else
               SnapshotFormatError)(
            f"{d}: the HDFS-backed store at version {version} needs "
            f"{', '.join(f'{v}.delta' for v in missing) or 'its files'}, which are not there")
    rows: dict[bytes, bytes | None] = {}
    todo = ([files[start]["snapshot"]] if start else []) + [files[v]["delta"] for v in range(start + 1, version + 1)]
    for f in todo:
        records(spark_stream(verified_bytes(f, roots), str(f)), str(f), rows)
    return rows  # type: ignore[return-value]
