"""Spark's RocksDB state store files, read without a JVM and without RocksDB.

Facts (from Spark's ``RocksDBFileManager``, ``RocksDBCheckpointMetadata``,
``StateStoreChangelog`` and ``RocksDBStateEncoder``; no code copied):

* ``state/<op>/<part>[/<store>]/<v>.zip`` is a RocksDB checkpoint of version ``v``
  (batch ``v - 1``): ``MANIFEST``, ``CURRENT``, ``OPTIONS`` and a ``metadata`` file
  (``v1`` then JSON naming its SST files: ``sstFiles[].dfsSstFileName``, shared
  by all versions in the partition's ``SSTs/`` folder). The state at ``v`` is the
  visible data of those SST files (:mod:`explorer.format.sst`, block checksums
  checked), the zip's members checked against their CRC-32.
* With changelog checkpointing, ``<v>.changelog`` holds what batch ``v - 1``
  changed, compressed with the store's codec (:func:`.hdfs.spark_stream`: lz4, zstd or snappy):
  version 1 is the HDFS-backed store's record stream; later versions start with
  ``writeUTF("v<n>")``: v2 and v4 records are a type byte (``0x01`` put,
  ``0x10`` delete, ``0x11`` merge, ``0x00`` the end) then the sizes and bytes; v3
  and v4 add a ``writeUTF`` of JSON lineage after the version. The state at ``v``
  is the newest zip at or below ``v`` plus the changelogs after it.
* Checkpoint format v2 names files ``<v>_<uuid>``; ``commits/<batch>`` give each
  partition's uuid (``stateUniqueIds``) and a changelog's lineage the uuids of the
  versions before it back to the last snapshot.
* Keys and values of the built-in operators are one version byte (0) and an
  ``UnsafeRow``. ``transformWithState`` keeps several column families (zip
  metadata ``columnFamilyMapping``, keys prefixed with a column family id) in
  encodings of their own: those checkpoints are read through Spark's data source.
* The files carry checksums: the lz4 blocks' XXH32, the SST blocks', the zip
  members' CRC-32, Hadoop's ``.<name>.crc`` and Spark 4's ``<name>.crc`` sidecars
  (:func:`.layout.verified_bytes`). Changelogs themselves have none beyond lz4's.
"""

from __future__ import annotations

import io
import json
import re
import struct
import zipfile
import zlib
from pathlib import Path

from ...errors import SnapshotCorruptError, SnapshotFormatError, VersionGoneError
from ...format import budget
from ...format.sst.columns import Unsupported, column_families, read_column_family
from ...format.sst.instance import read_instance
from ...format.untrusted import Roots, excerpt, plain_name
from .hdfs import records, spark_stream, store_dir
from .layout import verified_bytes

__all__ = ["ENCODING_VERSION", "changelog_header", "changelog_records", "read_rocksdb_store", "zip_metadata"]

#: the byte before every key's and value's UnsafeRow in the built-in operators' RocksDB stores
ENCODING_VERSION = 0

_FILE = re.compile(r"^(\d+)(?:_([0-9a-fA-F-]{36}))?\.(changelog|zip)$")
_PUT, _DELETE, _MERGE, _EOF = 0x01, 0x10, 0x11, 0x00


def _utf(data: bytes, i: int, where: str) -> tuple[str, int]:
    if i + 2 > len(data):
        raise SnapshotCorruptError(f"{where}: the stream ends at byte {i}, expected a string")
    (n,) = struct.unpack_from(">H", data, i)
    if i + 2 + n > len(data):
        raise SnapshotCorruptError(f"{where}: a string at byte {i} of {n} bytes runs past the end")
    return data[i + 2:i + 2 + n].decode("utf-8", errors="replace"), i + 2 + n


def changelog_header(data: bytes, where: str) -> tuple[int, int, list[tuple[int, str]]]:
    """A decompressed changelog's format version, where its records start, and its lineage ``[(version,
    uuid)]`` (the versions before it back to the last snapshot; empty before changelog version 3)."""
    version, pos = 1, 0
    if len(data) >= 3 and data[2:3] == b"v":
        text, after = _utf(data, 0, where)
        if re.fullmatch(r"v\d+", text):
            version, pos = int(text[1:]), after
    if version not in (1, 2, 3, 4):
        raise SnapshotFormatError(f"{where}: changelog version {version} is unknown (known: 1 to 4)")
    lineage: list[tuple[int, str]] = []
    if version >= 3:
        text, pos = _utf(data, pos, where)
        try:
            lineage = [(int(x["version"]), str(x["checkpointUniqueId"])) for x in json.loads(text)]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise SnapshotCorruptError(f"{where}: expected the changelog's lineage as JSON, found {len(text)} "
                                       "characters that are not a list of versions and ids") from exc
    return version, pos, lineage


def changelog_records(f: Path, rows: dict[bytes, bytes | None], keep_deletes: bool = False, *,
                      roots: Roots | Path) -> list[tuple[int, str]]:
    """Apply one changelog file (inside ``roots``) to ``rows``; return its lineage ``[(version, uuid)]`` (empty
    before version 3). ``keep_deletes``: a deleted key is kept as None instead of dropped."""
    where = str(f)
    data = spark_stream(verified_bytes(f, roots), where)
    version, pos, lineage = changelog_header(data, where)
    if version in (1, 3):
        records(data, where, rows, keep_deletes, start=pos)
        return lineage
    n = len(data)
    unpack = struct.unpack_from
    while True:
        if pos >= n:
            raise SnapshotCorruptError(f"{where}: the changelog ends at byte {pos} without its end record")
        kind = data[pos]
        pos += 1
        if kind == _EOF:
            return lineage
        if kind not in (_PUT, _DELETE, _MERGE):
            raise SnapshotCorruptError(f"{where}: record type {kind:#04x} at byte {pos - 1} is unknown "
                                       "(known: 0x00 end, 0x01 put, 0x10 delete, 0x11 merge)")
        if kind == _MERGE:
            raise SnapshotFormatError(f"{where}: a merge record (list state of transformWithState) is not read "
                                      "without Spark yet; read it through Spark's data source")
        if pos + 4 > n:
            raise SnapshotCorruptError(f"{where}: a record at byte {pos - 1} is cut off")
        (ks,) = unpack(">i", data, pos)
        pos += 4
        if ks < 0 or pos + ks + 4 > n:
            raise SnapshotCorruptError(f"{where}: a record at byte {pos - 5} has key size {ks}, the file has "
                                       f"{n - pos} bytes left")
        key = data[pos:pos + ks]
        pos += ks
        (vs,) = unpack(">i", data, pos)
        pos += 4
        if kind == _DELETE:
            if keep_deletes:
                rows[key] = None
            else:
                rows.pop(key, None)
            continue
        if vs < 0 or pos + vs > n:
            raise SnapshotCorruptError(f"{where}: a record's value at byte {pos - 4} has size {vs}, the file has "
                                       f"{n - pos} bytes left")
        rows[key] = data[pos:pos + vs]
        pos += vs


def zip_metadata(zf: zipfile.ZipFile, f: Path) -> tuple[bytes, bytearray]:
    """The ``metadata`` member's first line (its version) and its second (the JSON), with honest accounting: the
    member is inflated into one buffer of its declared size (zipfile stops there; a stream that inflates past it
    fails its CRC-32) and the JSON line is cut out of it in place, so what is held is that buffer, then the
    text :func:`~explorer.format.budget.loads` decodes from it (counted before parsing). Both are charged before
    anything is inflated: a member just under the budget once took three times its size as lines and strings."""
    size = zf.getinfo("metadata").file_size
    budget.check(2 * size, file=f, what=f"zip member 'metadata' ({size:,} bytes, held and decoded once read)")
    buf = bytearray(size)
    view, got = memoryview(buf), 0
    with zf.open("metadata") as member:
        while got < size and (n := member.readinto(view[got:got + budget.CHUNK])):
            got += n
    view.release()
    del buf[got:]
    first = buf.find(b"\n")
    version = bytes(buf[:first if first >= 0 else len(buf)]).rstrip(b"\r")
    del buf[:first + 1 if first >= 0 else len(buf)]  # (in place: no copy of the rest)
    second = buf.find(b"\n")
    if second >= 0:
        del buf[second:]
    return version, buf


def _zip_rows(f: Path, rows: dict[bytes, bytes | None], roots: Roots) -> None:
    """The visible rows of one RocksDB checkpoint zip and the SST files it names (plain file names in the
    store's ``SSTs/`` folder, resolved inside ``roots``: a name with a separator, ``..``, a NUL or an absolute
    path, or one linking out of the checkpoint, is refused before anything is read)."""
    where = str(f)
    try:
        zf = zipfile.ZipFile(io.BytesIO(verified_bytes(f, roots)))
        for info in zf.infolist():  # before inflating anything (a 0.3 MB zip can hold 300 MB)
            budget.check(info.file_size, file=f, what=f"zip member {info.filename!r} (its declared uncompressed size)")
        bad = zf.testzip()  # every member against its CRC-32 (streamed: zipfile stops at the declared size)
    except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as exc:
        raise SnapshotCorruptError(f"{where}: not a readable zip ({exc})") from exc
    if bad is not None:
        raise SnapshotCorruptError(f"{where}: member {bad!r} does not match its CRC-32 (the zip is damaged)")
    try:
        version, body = zip_metadata(zf, f)
    except KeyError as exc:
        raise SnapshotFormatError(f"{where}: expected a 'metadata' member naming the SST files, found "
                                  f"{zf.namelist()}") from exc
    if version != b"v1":
        raise SnapshotFormatError(f"{where}: metadata version {excerpt(version)} is unknown (known: 'v1')")
    try:
        meta = budget.loads(body, file=f, what="zip member 'metadata' (its JSON line)")
        del body
        names = [s["dfsSstFileName"] for s in meta.get("sstFiles", [])]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise SnapshotFormatError(f"{where}: expected the checkpoint's metadata JSON on its second line") from exc
    if meta.get("columnFamilyMapping"):
        raise SnapshotFormatError(
            f"{where}: holds column families {sorted(meta['columnFamilyMapping'])} (transformWithState), which are "
            "not read without Spark yet; read it through Spark's data source")
    folder = f.parent / "SSTs"
    ssts = []
    for name in names:
        sst = folder / plain_name(name, where, str(folder))
        if not sst.is_file():
            raise SnapshotFormatError(f"{where}: names SST file {name!r}, which is not in {folder}")
        roots.confine(sst, where, name)
        ssts.append((str(sst), verified_bytes(sst, roots)))
    rows.clear()
    try:  # column-wise (numba), the visible entries as byte ranges
        by_cf, _stats = column_families(ssts)
        for files in by_cf.values():
            values, kbuf, ks, ke, vs, ve, _merged = read_column_family(files)
            kb, vb = kbuf.tobytes(), values.tobytes()
            rows.update(zip([kb[a:b] for a, b in zip(ks.tolist(), ke.tolist())],
                            [vb[a:b] for a, b in zip(vs.tolist(), ve.tolist())]))
    except Unsupported:  # what the column-wise reader leaves out: entry by entry
        rows.clear()
        cfs, _stats = read_instance(ssts)
        for cf in cfs.values():
            rows.update(zip(cf.keys, cf.values))


def read_rocksdb_store(ckpt: Path, op: int, part: int, version: int, store: str = "default",
                       uuids: list[str] | None = None, roots: Roots | None = None) -> dict[bytes, bytes]:
    """The rows (key bytes -> value bytes, each still with its version byte) of one RocksDB store partition
    at ``version`` (batch + 1). ``uuids``: the partition's ids of checkpoint format v2 for this version
    (``commits/<batch>``), one of which names this store's file. ``roots``: where files may be read from
    (default: ``ckpt``)."""
    roots = Roots.of(ckpt) if roots is None else roots
    d = store_dir(ckpt, op, part, store)
    files: dict[tuple[int, str | None], dict[str, Path]] = {}
    for f in d.iterdir() if d.is_dir() else []:
        m = _FILE.match(f.name)
        if m and f.is_file():
            files.setdefault((int(m.group(1)), m.group(2)), {})[m.group(3)] = f
    rows: dict[bytes, bytes | None] = {}
    if version == 0:
        return {}
    if uuids is None:  # format v1: the newest zip at or below, then the changelogs after it
        zips = [v for (v, u), k in files.items() if u is None and "zip" in k and v <= version]
        start = max(zips) if zips else 0
        missing = [v for v in range(start + 1, version + 1) if "changelog" not in files.get((v, None), {})]
        if missing:
            # files of versions after this one but none at or below it: the store's maintenance deleted them
            gone = not zips and any(v > version for v, _ in files)
            oldest = min((v for (v, u), k in files.items() if u is None and "zip" in k), default=None)
            raise (VersionGoneError if gone else SnapshotFormatError)(
                f"{d}: the RocksDB store at version {version} needs {version}.zip or "
                f"{', '.join(f'{v}.changelog' for v in missing)} after {f'{start}.zip' if start else 'the start'}, "
                "which are not there" + (f" (the store keeps versions from {oldest}.zip on: its maintenance deleted "
                                         "the older files)" if gone and oldest else ""))
        if start:
            _zip_rows(files[(start, None)]["zip"], rows, roots)
        for v in range(start + 1, version + 1):
            changelog_records(files[(v, None)]["changelog"], rows, roots=roots)
        return rows  # type: ignore[return-value]
    present = sorted({v for v, u in files if u is not None})

    def missing(needed: int, what: str) -> SnapshotFormatError:
        """The error for a file of version ``needed`` that is not there: VersionGoneError when the store's
        maintenance deleted it (older than every file kept, and a version older than the newest is asked),
        else a SnapshotFormatError (a file the newest version needs, or one missing among the kept ones)."""
        if present and needed < present[0] and version < present[-1]:
            return VersionGoneError(f"{d}: version {version} needs {what}, which is not there: the store keeps "
                                    f"versions from {present[0]} on (its maintenance deleted the older files)")
        return SnapshotFormatError(f"{d}: version {version} needs {what}, which is not there")

    uuid = next((u for u in uuids if (version, u) in files), None)
    if uuid is None:
        raise missing(version, f"a {version}_<uuid>.zip or .changelog of the commit log's ids ({', '.join(uuids)})")
    here = files[(version, uuid)]
    if "zip" in here:
        _zip_rows(here["zip"], rows, roots)
        return rows  # type: ignore[return-value]
    # the changelog's lineage names the versions back to the last snapshot: read it first (records kept apart)
    own: dict[bytes, bytes | None] = {}
    lineage = changelog_records(here["changelog"], own, keep_deletes=True, roots=roots)
    chain = lineage + [(version, uuid)]
    base = next((i for i in range(len(chain) - 1, -1, -1) if "zip" in files.get(chain[i], {})), None)
    if base is None and chain[0][0] != 1:
        raise missing(chain[0][0], f"{chain[0][0]}_{chain[0][1]}.zip, where the lineage of "
                                   f"{here['changelog'].name} starts")
    if base is not None:
        _zip_rows(files[chain[base]]["zip"], rows, roots)
    for v, u in chain[(base + 1 if base is not None else 0):-1]:
        f = files.get((v, u), {}).get("changelog")
        if f is None:
            raise missing(v, f"{v}_{u}.changelog (its lineage)")
        changelog_records(f, rows, roots=roots)
    for k, val in own.items():  # the last changelog's records, replayed in their order
        if val is None:
            rows.pop(k, None)
        else:
            rows[k] = val
    return rows  # type: ignore[return-value]
