"""A Spark checkpoint's files checked without a JVM and without decoding a row (``explorer.verify``).

For the newest committed batch (or ``batch_id``): ``metadata`` and the batch's offset and commit logs are
there; every operator has all its partition folders; every store partition has the files of its state version (``batch + 1``) back to the newest full
snapshot (``.snapshot``/``.zip``; checkpoint format v2: the ids ``commits/`` gives, then a changelog's lineage
back to its snapshot, each file of it there and checked); every file the batch
needs (:func:`.layout.batch_files`) resolves inside the checkpoint and matches its Hadoop ``.crc`` and Spark
4's ``.crc`` files; an lz4 stream's blocks their XXH32; a zip's members their CRC-32, and the SST files its
metadata names are plain names in ``SSTs/``, there, of the recorded size, with good footers and block
checksums. Symlinks anywhere under the folder that lead out of it are ``outside``.
"""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
import zlib
from pathlib import Path
from typing import Any

from ...errors import SnapshotError, SnapshotTooLargeError, UnsafePathError
from ...format import budget
from ...format.sst.file import SstError
from ...format.untrusted import Roots, plain_name
from ...storage import StoragePath
from ..checks import DAMAGED, MISSING, OK, OUTSIDE, FileCheck, check_sst, failed
from . import layout
from .hdfs import spark_stream
from .rocksdb import changelog_header, zip_metadata

__all__ = ["spark_checks"]

#: a store file's name: version, format v2's id, kind (as Spark names them; see ``layout``)
_STORE_FILE = re.compile(r"^(\d+)(?:_([0-9a-fA-F-]{36}))?\.(delta|snapshot|changelog|zip)$")


def _listing(root: Path) -> list[str]:
    """Every file under ``root`` (symlinked folders not followed), as relative POSIX paths."""
    out = []
    for top, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if (Path(top) / d).is_symlink()]:
            out.append((Path(top) / name).relative_to(root).as_posix())
    return sorted(out)


def spark_checks(path: Any, allow_roots: Any = None, batch_id: int | None = None, **_options: Any
                 ) -> list[FileCheck]:
    """Every file of a Spark checkpoint the newest committed batch (or ``batch_id``) needs (see module doc)."""
    if isinstance(path, StoragePath):  # an object store: the batch's files mirrored locally first
        mirror = layout.BatchMirror(path)
        path = mirror.batch(batch_id if batch_id is not None else (mirror.committed or [0])[-1])
    root = Path(path)
    roots = Roots([root], allow_roots, what="the checkpoint folder")
    rels = _listing(root)
    out: list[FileCheck] = []
    for link in layout.links_outside(root, roots):
        try:
            roots.confine(link)
        except UnsafePathError as exc:
            out.append(FileCheck(link.relative_to(root).as_posix(), OUTSIDE, str(exc)))
    committed = layout.committed_batches(rels)
    if not committed:
        return out + [FileCheck("commits/", MISSING, "no committed micro-batch; expected commits/<batch> files")]
    batch = committed[-1] if batch_id is None else batch_id
    for rel in ("metadata", f"offsets/{batch}", f"commits/{batch}"):
        if rel not in rels:
            out.append(FileCheck(rel, MISSING, f"needed to read batch {batch}, not there"))
    out += _missing_partitions(root, roots, batch)
    lineage: list[str] = []
    out += _missing_store_files(root, roots, rels, batch, lineage)
    outside = {c.file for c in out if c.status == OUTSIDE}
    needed = layout.batch_files(rels, batch)
    for rel in needed + sorted(set(lineage) - set(needed)):
        if rel.endswith(".crc") or rel in outside:
            continue  # (a checksum file is checked with the file it belongs to)
        out.append(_check_file(root, roots, rel))
    return out


def _missing_partitions(root: Path, roots: Roots, batch: int) -> list[FileCheck]:
    """Partition folders of each operator that are not there: an operator's ``numPartitions`` (its metadata)
    or the checkpoint's ``spark.sql.shuffle.partitions`` (the batch's offset log)."""
    try:
        lines = layout.verified_text(root / "offsets" / str(batch), roots).splitlines()
        conf = json.loads(lines[1]).get("conf", {}) if len(lines) > 1 else {}
        shuffle = int(conf.get("spark.sql.shuffle.partitions", 200))
    except (SnapshotError, json.JSONDecodeError, AttributeError, TypeError, ValueError):
        return []  # (the offset log's own check says why)
    out = []
    for op in layout.discover_operators(root):
        n = shuffle
        meta = root / "state" / str(op) / "_metadata" / "metadata"
        try:
            doc = json.loads(layout.verified_text(meta, roots).splitlines()[1]) if meta.is_file() else {}
            n = max((int(s["numPartitions"]) for s in doc.get("stateStoreInfo", [])), default=n)
        except (SnapshotError, json.JSONDecodeError, IndexError, KeyError, TypeError, ValueError, AttributeError):
            pass
        for p in layout.missing_partitions(root, op, n):
            out.append(FileCheck(f"state/{op}/{p}/", MISSING, f"operator {op} has {n} partitions; the folder of "
                                                              f"partition {p} is not there"))
    return out


def _uuids(root: Path, roots: Roots, batch: int) -> dict[str, list[list[str]]] | None:
    try:
        lines = layout.verified_text(root / "commits" / str(batch), roots).splitlines()
        doc = json.loads(lines[1]) if len(lines) > 1 else {}
    except (SnapshotError, json.JSONDecodeError):
        return None  # (the commit log's own check says why)
    ids = doc.get("stateUniqueIds") if isinstance(doc, dict) else None
    return ids if isinstance(ids, dict) else None


def _missing_store_files(root: Path, roots: Roots, rels: list[str], batch: int, lineage: list[str]) -> list[FileCheck]:
    """Per store folder, the files of version ``batch + 1`` back to its newest full snapshot that are not there
    (checkpoint format v2: back along the changelog's lineage, whose files are added to ``lineage`` to be
    checked too)."""
    version = batch + 1
    uuids = _uuids(root, roots, batch)
    folders: dict[str, dict[tuple[int, str | None], set[str]]] = {}
    for rel in rels:
        parts = rel.split("/")
        m = _STORE_FILE.match(parts[-1]) if parts[0] == "state" else None
        if m:
            folders.setdefault("/".join(parts[:-1]), {}).setdefault((int(m.group(1)), m.group(2)), set()).add(m.group(3))
    out = []
    for folder, files in sorted(folders.items()):
        kinds = {k for ks in files.values() for k in ks}
        rocks = bool(kinds & {"zip", "changelog"})
        full, step = ("zip", "changelog") if rocks else ("snapshot", "delta")
        if any(u is not None for _, u in files):  # format v2: the commit's ids name this version's file
            op, part = (folder.split("/") + ["", ""])[1:3]
            ids = (uuids or {}).get(op)
            want = ids[int(part)] if ids is not None and part.isdigit() and int(part) < len(ids) else None
            if want and not any((version, u) in files for u in want):
                out.append(FileCheck(f"{folder}/{version}_{want[0]}.zip", MISSING,
                                     f"commits/{batch} names id {want[0]} for version {version}; neither its .zip "
                                     "nor its .changelog is there"))
                continue
            uuid = next((u for u in want or () if (version, u) in files), None)
            if uuid is not None and "zip" not in files[(version, uuid)]:
                out += _lineage(root, roots, folder, files, version, uuid, lineage)
            continue
        start = max((v for (v, _), ks in files.items() if full in ks and v <= version), default=0)
        for v in range(start + 1, version + 1):
            if step not in files.get((v, None), set()):
                out.append(FileCheck(f"{folder}/{v}.{step}", MISSING,
                                     f"version {version} (batch {batch}) needs it after "
                                     f"{f'{start}.{full}' if start else 'the start'}, not there"))
    return out


def _lineage(root: Path, roots: Roots, folder: str, files: dict[tuple[int, str | None], set[str]], version: int,
             uuid: str, needed: list[str]) -> list[FileCheck]:
    """Format v2: version ``version`` of the store in ``folder`` is the changelog ``<version>_<uuid>.changelog``
    replayed over its lineage (the versions and ids its header names, back to the last snapshot), as the reader
    reads it: each of those files is there, and goes into ``needed`` to be checked like the batch's own."""
    name = f"{version}_{uuid}.changelog"
    try:
        data = spark_stream(layout.verified_bytes(root / folder / name, roots), f"{folder}/{name}")
        _, _, chain = changelog_header(data, f"{folder}/{name}")
    except SnapshotError:
        return []  # (the changelog's own check says why)
    chain = chain + [(version, uuid)]
    base = next((i for i in range(len(chain) - 1, -1, -1) if "zip" in files.get(chain[i], set())), None)
    out = []
    if base is None and chain[0][0] != 1:
        v, u = chain[0]
        out.append(FileCheck(f"{folder}/{v}_{u}.zip", MISSING, f"the lineage of {name} starts at version {v}, "
                                                               "whose snapshot is not there"))
    if base is not None:
        needed.append(f"{folder}/{chain[base][0]}_{chain[base][1]}.zip")
    for v, u in chain[(base + 1 if base is not None else 0):-1]:
        if "changelog" in files.get((v, u), set()):
            needed.append(f"{folder}/{v}_{u}.changelog")
        else:
            out.append(FileCheck(f"{folder}/{v}_{u}.changelog", MISSING, f"in the lineage of {name} (version "
                                                                         f"{version} replays it), not there"))
    return out


def _check_file(root: Path, roots: Roots, rel: str) -> FileCheck:
    f = root / rel
    try:
        data = layout.verified_bytes(f, roots)
    except SnapshotError as exc:
        return failed(rel, exc)
    detail = f"{len(data)} bytes" + ("; checksum file matches" if _has_sidecar(f) else "")
    try:
        if rel.endswith((".delta", ".snapshot", ".changelog")):
            spark_stream(data, rel)  # lz4 (its block checksums verified), zstd or snappy, by the first bytes
            detail += "; decompresses whole" + ("; lz4 block checksums match" if data[:8] == b"LZ4Block" else "")
        elif rel.endswith(".zip"):
            return _check_zip(f, rel, data, roots, detail)
        elif rel.endswith(".sst"):
            detail += "; " + check_sst(data, rel)
    except (SnapshotError, SstError, ValueError, IndexError) as exc:
        return failed(rel, exc)
    return FileCheck(rel, OK, detail)


def _has_sidecar(f: Path) -> bool:
    return f.with_name(f".{f.name}.crc").is_file() or f.with_name(f"{f.name}.crc").is_file()


def _check_zip(f: Path, rel: str, data: bytes, roots: Roots, detail: str) -> FileCheck:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        for info in zf.infolist():  # (as the reader does: before anything is inflated)
            budget.check(info.file_size, file=f, what=f"zip member {info.filename!r} (its declared uncompressed size)")
        bad = zf.testzip()
        version, body = zip_metadata(zf, f) if "metadata" in zf.namelist() else (b"", bytearray())
    except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as exc:
        return FileCheck(rel, DAMAGED, f"not a readable zip ({exc})")
    except SnapshotTooLargeError as exc:
        return FileCheck(rel, DAMAGED, str(exc))
    if bad is not None:
        return FileCheck(rel, DAMAGED, f"member {bad!r} does not match its CRC-32")
    if version not in (b"", b"v1"):
        return FileCheck(rel, DAMAGED, f"its metadata member's version is {version[:16]!r}; expected 'v1'")
    try:
        ssts = budget.loads(body, file=f, what="zip member 'metadata' (its JSON line)").get("sstFiles", []) \
            if body else []
    except SnapshotTooLargeError as exc:
        return FileCheck(rel, DAMAGED, str(exc))
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return FileCheck(rel, DAMAGED, f"its metadata member ({len(body):,} bytes after its version line) is not "
                                       "v1 and JSON")
    folder = f.parent / "SSTs"
    for s in ssts:
        name = s.get("dfsSstFileName") if isinstance(s, dict) else None
        try:
            sst = folder / plain_name(name, f, str(folder))
            if not sst.is_file():
                return FileCheck(rel, MISSING, f"names SST file {name!r}, which is not in {folder}")
            roots.confine(sst, f, name)
        except UnsafePathError as exc:
            return FileCheck(rel, OUTSIDE, str(exc))
        size = sst.stat().st_size
        if isinstance(s.get("sizeBytes"), int) and s["sizeBytes"] != size:
            return FileCheck(rel, DAMAGED, f"names SST file {name!r} of {s['sizeBytes']} bytes, found {size}")
    return FileCheck(rel, OK, detail + f"; member CRC-32s match; its {len(ssts)} SST files are there")
