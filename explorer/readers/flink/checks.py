"""An Apache Flink snapshot's files checked without decoding a value (``explorer.verify``).

``_metadata`` is parsed (handles only: no state header or value is read); every file a handle names is
mapped inside the snapshot's roots (:class:`.handles.HandleResolver`: ``outside`` when it leaves them, never
opened), must be there (``missing``), hold the bytes the handle declares (a segment: inside its file; a stream at least
the declared bytes, an SST file exactly), and an SST file of an incremental RocksDB handle must have a good footer, index and block checksums (``damaged``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from ...errors import SnapshotError
from ...format.sst.file import SstError
from ...format.untrusted import Roots
from ..checks import DAMAGED, MISSING, OK, FileCheck, check_sst, failed
from .handles import ChangelogHandle, HandleResolver, IncrementalHandle, KeyGroupsHandle, StreamHandle
from .layout import metadata_file_in
from .metadata import read_metadata

__all__ = ["flink_checks"]


def _handles(meta: Any) -> Iterator[tuple[StreamHandle, str | None]]:
    """Every stream handle of the metadata with, for a RocksDB instance's files, the file's own name."""
    def keyed(kh: Any) -> Iterator[tuple[StreamHandle, str | None]]:
        if isinstance(kh, KeyGroupsHandle) and kh.stream is not None:
            yield kh.stream, None
        elif isinstance(kh, IncrementalHandle):
            if kh.meta is not None:
                yield kh.meta, None
            for name, sh in kh.shared + kh.private:
                yield sh, name
        elif isinstance(kh, ChangelogHandle):
            for m in kh.materialized:
                yield from keyed(m)
            for part in kh.changelog:
                for _, sh in part.streams:
                    yield sh, None

    for op in meta.operators:
        for st in op.subtasks:
            for oh in (st.managed_operator, st.raw_operator):
                if oh is not None and oh.stream is not None:
                    yield oh.stream, None
            for kh in (st.managed_keyed, st.raw_keyed):
                yield from keyed(kh)


def flink_checks(path: Any, allow_roots: Any = None, **_options: Any) -> list[FileCheck]:
    """Every file of a Flink savepoint or checkpoint (see module doc); ``allow_roots`` as the reader takes it,
    the reader's other options (what decodes values) are not needed."""
    try:
        meta_file = metadata_file_in(path)
    except SnapshotError as exc:
        return [failed(Path(str(path)) / "_metadata", exc)]
    try:
        if meta_file.is_symlink():
            Roots([meta_file.parent], allow_roots).confine(meta_file)
        meta = read_metadata(meta_file)
    except SnapshotError as exc:
        return [failed("_metadata", exc)]
    resolver = HandleResolver(meta_file, allow_roots)
    job = resolver.job_dir.resolve()
    out = [FileCheck("_metadata", OK, f"parsed: version {meta.version}, {len(meta.operators)} operators")]
    seen: set[tuple[str, str, int]] = set()
    inline = 0
    for h, name in _handles(meta):
        if h.kind == "bytes":
            inline += 1
            continue
        key = (h.kind, h.name, h.offset)
        if key in seen:
            continue
        seen.add(key)
        try:
            p = resolver.local_path(h)
        except SnapshotError as exc:
            out.append(failed(h.name, exc))
            continue
        shown = str(p.relative_to(job)) if job in p.parents else str(p)
        if h.kind == "segment":
            shown += f"@{h.offset}+{h.size}"
        out.append(_check_file(p, h, name, shown))
    if inline:
        out[0] = FileCheck("_metadata", OK, out[0].detail + f"; {inline} handles hold their bytes inline")
    return out


def _check_file(p: Any, h: StreamHandle, name: str | None, shown: str) -> FileCheck:
    try:
        if not p.is_file():
            return FileCheck(shown, MISSING, f"named by _metadata ({h.size} bytes), not there")
        size = p.stat().st_size
    except OSError as exc:
        return FileCheck(shown, DAMAGED, f"cannot be read ({exc.strerror})")
    if h.kind == "segment":
        if h.offset + h.size > size:
            return FileCheck(shown, DAMAGED, f"found {size} bytes, _metadata declares a segment of {h.size} bytes at "
                                             f"offset {h.offset}")
        return FileCheck(shown, OK, f"segment of {h.size} bytes inside the file's {size}")
    sst = name is not None and name.endswith(".sst")
    if h.size >= 0 and (size < h.size or (sst and size != h.size)):
        return FileCheck(shown, DAMAGED, f"found {size} bytes, _metadata declares {h.size}"
                                         + (" (file truncated?)" if size < h.size else ""))
    # (a changelog file holds a byte more than its handle declares; a stream is read up to its declared size)
    detail = f"{size} bytes as declared" if size == h.size or h.size < 0 else \
        f"{size} bytes, the {h.size} declared read from it"
    if sst:
        try:
            detail += "; " + check_sst(p.read_bytes(), f"{shown} ({name})")
        except (SstError, ValueError, IndexError) as exc:
            return FileCheck(shown, DAMAGED, str(exc))
    return FileCheck(shown, OK, detail)
