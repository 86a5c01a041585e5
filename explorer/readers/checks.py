"""A snapshot's files checked without decoding a value (``explorer.verify``; ``SnapshotReader.check_files``).

Each format's check lists one :class:`FileCheck` per file it looked at: ``ok``, ``missing`` (named by the
metadata or needed by the snapshot, not there), ``damaged`` (a checksum, a size, a footer or an archive that
does not match what the format records) or ``outside`` (a path or symlink that leaves the roots the
format allows, never opened). What is checked per format:

* the engine's: ``_metadata``'s magic, version and CRC-32; every listed file inside the snapshot (symlinks
  resolved), of its recorded size and SHA-256 or XXH3-128 (:mod:`explorer.format.snapshot`);
* Apache Flink's: ``_metadata`` parsed; every file a handle names mapped inside the snapshot's roots
  (``readers.flink.handles``), present, of the declared size (a segment inside its file), and an SST
  file's footer and every block checksum (``readers.flink.checks``);
* Spark's: every file the newest committed batch needs present (the chain of deltas or changelogs back to
  the newest full snapshot, per store partition), inside the checkpoint, its Hadoop and Spark checksum
  files, lz4 blocks, zip members' CRC-32 and the SST files a zip names (``readers.spark.checks``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SnapshotError, UnsafePathError
from ..format.snapshot import (
    METADATA_FILE,
    check_file_digest,
    read_metadata,
    referenced_files,
    resolve,
)
from ..format.sst.file import SstError, SstFile

__all__ = ["DAMAGED", "MISSING", "OK", "OUTSIDE", "STATUSES", "FileCheck", "check_sst", "engine_checks"]

OK, MISSING, DAMAGED, OUTSIDE = "ok", "missing", "damaged", "outside"
STATUSES = (OK, MISSING, DAMAGED, OUTSIDE)


@dataclass(frozen=True)
class FileCheck:
    """One file of a snapshot as checked: ``file`` (its path as the snapshot names it, relative to the
    snapshot folder where it can be), ``status`` (one of :data:`STATUSES`) and ``detail`` (what was found
    and what was expected)."""

    file: str
    status: str
    detail: str


def failed(file: Any, exc: BaseException) -> FileCheck:
    """The check of ``file`` that raised ``exc``: outside for an unsafe path, else damaged."""
    return FileCheck(str(file), OUTSIDE if isinstance(exc, UnsafePathError) else DAMAGED, str(exc))


def check_sst(data: Any, name: str) -> str:
    """Check an SST file's footer, index and every data block's checksum; the detail of a good one.
    Raises :class:`~explorer.format.sst.file.SstError` naming the block that does not match."""
    sst = SstFile(data, name)
    handles = sst.data_handles()
    if handles:
        offsets = np.array([h[0] for h in handles], dtype=np.int64)
        sizes = np.array([h[1] for h in handles], dtype=np.int64)
        if int((offsets + sizes + 5).max()) > len(data) or int(offsets.min()) < 0 or int(sizes.min()) < 0:
            raise SstError(f"{name}: the index names a block past the end of the file ({len(data)} bytes)")
        sst.verify_blocks(offsets, sizes)
    return f"footer, index and {len(handles)} data block checksums match"


def engine_checks(folder: Path) -> list[FileCheck]:
    """Every file of an engine snapshot (see module doc)."""
    meta_file = folder / METADATA_FILE
    try:
        meta = read_metadata(folder)
    except SnapshotError as exc:
        return [failed(METADATA_FILE, exc)]
    out = [FileCheck(METADATA_FILE, OK, f"magic, format version and CRC-32 match ({meta_file.stat().st_size} bytes)")]
    files = meta.get("files", {})
    if not isinstance(files, dict):
        return [FileCheck(METADATA_FILE, DAMAGED, f"found a files list of type {type(files).__name__}, "
                                                  "expected a mapping of paths to sizes and checksums")]
    for rel in referenced_files(meta):
        if rel not in files:
            out.append(FileCheck(str(rel), MISSING, "named by an operator in _metadata, not in its files list "
                                                    "(an unlisted file is never read)"))
    for rel, entry in files.items():
        try:
            path = resolve(folder, rel)
        except SnapshotError as exc:
            out.append(failed(rel, exc))
            continue
        if not path.is_file():
            out.append(FileCheck(rel, MISSING, f"listed in _metadata with {entry.get('bytes')} bytes, not there"))
            continue
        size = path.stat().st_size
        if size != entry.get("bytes"):
            out.append(FileCheck(rel, DAMAGED, f"found {size} bytes, _metadata records {entry.get('bytes')}"))
            continue
        try:
            check_file_digest(path, entry)
        except SnapshotError as exc:
            out.append(failed(rel, exc))
            continue
        out.append(FileCheck(rel, OK, f"{size} bytes, {'SHA-256' if 'sha256' in entry else 'XXH3-128'} matches"))
    return out
